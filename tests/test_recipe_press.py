"""The recipe of docs/contributing/recipes/press.md, followed: a new press is one file (a frozen
dataclass ``Press`` with ``@register_policy`` and a ``scores`` method), and ``sinklab compress
--press`` and ``sinklab.applied`` take it."""

import importlib.util
import json
import sys
import textwrap

import torch

import sinklab
from sinklab import cli
from sinklab.kvcache import POLICIES, PRESSES

#: The new file, as a contributor would write it: keep the keys whose values are longest.
VALUE_NORM = textwrap.dedent(
    '''
    """``value_norm``: keep the keys whose values have the largest L2 norm, per KV head (the value
    half of Guo et al. 2024's "value also matters", without the attention factor)."""

    from dataclasses import dataclass

    from sinklab.kvcache import Press, register_policy


    @register_policy("value_norm")
    @dataclass(frozen=True)
    class ValueNorm(Press):
        """ValueNorm: keep the keys whose values are longest (L2, float32), per KV head."""

        def scores(self, context):
            return context.values.float().norm(dim=-1)
    '''
)

CONTEXT = 40


def test_a_new_press_is_one_file_that_compress_and_applied_take(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """Registered from its own folder, ``value_norm`` is a press of the registry and of
    ``sinklab compress``'s description, ``sinklab compress --press value_norm`` gives it a row in its
    table and summary (half the keys kept, the text after the context scored), and under
    ``sinklab.applied`` every layer keeps, per KV head, exactly the half of the context whose values
    are longest in the dense cache. Mutation tried: the file's ``scores`` returning the negated
    norm (keep the shortest values) fails the kept positions."""
    try:
        path = tmp_path / "value_norm.py"
        path.write_text(VALUE_NORM)
        spec = importlib.util.spec_from_file_location("value_norm", path)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "value_norm", module)
        spec.loader.exec_module(module)  # registers it
        assert PRESSES["value_norm"] is POLICIES["value_norm"] is module.ValueNorm
        help_text = cli.build_parser()._subparsers._group_actions[0].choices["compress"].format_help()
        assert "value_norm" in help_text

        folder, out = str(tiny_model_dir("llama", positions=1024)), tmp_path / "run"
        flags = ["--ratio", "0.5", "--keep-sinks", "0", "--task", "ppl", "--outside-corpus", "none", "--context", "128"]
        assert cli.main(["compress", folder, "--press", "value_norm", *flags, "--out", str(out), "--quiet"]) == 0
        rows = [line.split() for line in capsys.readouterr().out.splitlines()]
        assert any(row[:4] == ["value_norm", "0.5", "0", "128"] for row in rows), rows  # the command's table
        summary = json.loads((out / "summary.json").read_text())
        (cell,) = summary["cells"]
        assert (cell["policy"], cell["kind"], cell["ratio"], cell["kept_fraction"]) == ("value_norm", "press", 0.5, 0.5)
        assert cell["ppl_ratio"]["shakespeare"] != 1.0  # half the context dropped moves the text's perplexity

        model = sinklab.load_model(folder).model
        ids = torch.randint(2, model.config.vocab_size, (1, CONTEXT), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            dense = model(ids, use_cache=True).cache
            with sinklab.applied(model, module.ValueNorm(ratio=0.5)) as pressing:
                model(ids, use_cache=True)
        kept = pressing.cache.last.positions
        assert sorted(kept) == list(range(model.config.num_hidden_layers))
        for layer, positions in kept.items():
            norms = dense.layers[layer].values.float().norm(dim=-1)  # (B, Hkv, T)
            longest = norms.topk(CONTEXT // 2, dim=-1).indices.sort(dim=-1).values
            assert torch.equal(positions, longest), layer
    finally:
        POLICIES.pop("value_norm", None)
        PRESSES.pop("value_norm", None)  # the summary names it only as a string: the run still validates
