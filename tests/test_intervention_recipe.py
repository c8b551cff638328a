"""The recipe of docs/contributing/recipes/intervention.md, followed: a new intervention is one new
file (a registered frozen dataclass), and ``sinklab intervene`` and ``sinklab.applied`` take it."""

import importlib.util
import json
import sys
import textwrap

import pytest
import torch

from sinklab import applied, cli, load_model
from sinklab.intervene import INTERVENTIONS
from sinklab.intervene.interventions import BY_TYPE

#: The new file, as a contributor would write it: its own fields, hook point, label and option.
KEY_BOOST = textwrap.dedent(
    '''
    """``--key-boost``: every later query's score on key k raised by 4."""

    from dataclasses import dataclass
    from typing import ClassVar

    import torch

    from sinklab.intervene import Intervention, register


    @register("key_boost", takes="position", help="add 4 to every later query's score on key k")
    @dataclass(frozen=True)
    class KeyBoost(Intervention):
        k: int
        point: ClassVar[str] = "attn.hook_scores"

        @classmethod
        def for_option(cls, value, lams, where):
            return [cls(value, **where)]

        @property
        def label(self):
            return f"key_boost k={self.k}"

        def positions(self):
            return (self.k,)

        def edit(self, scores, where):
            queries = torch.arange(where.q_start, where.q_start + scores.shape[-2], device=scores.device)
            later = (queries > self.k).view(-1, 1) & (torch.arange(scores.shape[-1], device=scores.device) == self.k)
            return torch.where(later, scores + 4.0, scores)
    '''
)

#: The built-in options, in the order of their runs and flags (the package's imports' order).
BUILT_IN = ["mask_self", "amplify", "scale", "suppress_sink", "value_zero", "drop_first"]
K, T = 5, 12


@pytest.fixture
def key_boost(tmp_path, monkeypatch):
    """The class of the new file, imported from a folder of its own; afterwards the registries hold
    exactly what they held before (entries and order) and ``sys.modules`` forgets the module."""
    kept = [(registry, dict(registry)) for registry in (INTERVENTIONS, BY_TYPE)]
    try:
        path = tmp_path / "key_boost.py"
        path.write_text(KEY_BOOST)
        spec = importlib.util.spec_from_file_location("key_boost", path)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "key_boost", module)
        spec.loader.exec_module(module)
        yield module.KeyBoost
    finally:
        for registry, entries in kept:
            registry.clear()
            registry.update(entries)


def test_a_new_intervention_is_one_file_that_the_command_and_applied_take(key_boost, tiny_model_dir, tmp_path, capsys):
    """Its flag is in ``sinklab intervene``'s parser after the built-in ones, the run's summary and
    table hold its experiment, and it moves attention to key k in every layer, in the run and
    under ``sinklab.applied``. Mutation tried: the new file's ``edit`` returning ``scores``
    unchanged: the run's share at k equals the baseline's and the test fails."""
    assert list(INTERVENTIONS)[: len(BUILT_IN)] == BUILT_IN and list(INTERVENTIONS)[-1] == "key_boost"
    assert BY_TYPE["KeyBoost"] is key_boost
    help_text = cli.build_parser()._subparsers._group_actions[0].choices["intervene"].format_help()
    assert "--key-boost K" in help_text and "add 4 to every later query's score on key k" in help_text

    model_dir, out = str(tiny_model_dir("llama")), tmp_path / "run"
    argv = ["intervene", model_dir, "--random-tokens", "--max-tokens", str(T), "--key-boost", str(K), "--out", str(out)]
    assert cli.main([*argv, "--quiet"]) == 0
    assert f"key_boost k={K}" in capsys.readouterr().out  # the results table
    summary = json.loads((out / "summary.json").read_text())
    (result,) = summary["results"]
    assert result["label"] == f"key_boost k={K}"
    assert result["intervention"] == {"type": "KeyBoost", "layers": None, "heads": None, "k": K}
    before, after = summary["baseline"]["share_at_k"], result["share_at_k"]
    assert len(after) == 3 and all(a > b + 0.1 for a, b in zip(after, before)), (before, after)

    model = load_model(model_dir)
    ids = torch.randint(2, model.model.config.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))

    def share_at_k(*edits) -> list[float]:
        """Per layer: the mean attention that queries after k give to key k, under ``edits``."""
        shares = []

        def keep(pattern, where):
            shares.append(pattern[..., K + 1 :, K].mean().item())

        with (
            applied(model, *edits, query_chunk=None) as block,
            block.hooks.attached([("blocks.*.attn.hook_pattern", keep)]),
            torch.no_grad(),
        ):
            model.model(input_ids=ids)
        return shares

    plain, boosted = share_at_k(), share_at_k(key_boost(K))
    assert len(boosted) == 3 and all(b > p + 0.1 for b, p in zip(boosted, plain)), (plain, boosted)
