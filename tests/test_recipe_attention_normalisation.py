"""The recipe of docs/contributing/recipes/attention-normalisation.md, followed: a new attention
normalisation is one file (an ``AttnNorm`` subclass registered with ``@register``), and
``sinklab trigger --attn`` trains with it, its summary and saved maps showing its formula."""

import importlib.util
import json
import sys
import textwrap

import torch
from safetensors.torch import load_file

from sinklab import cli
from sinklab.core.attention import ATTN_NORMS, AttentionSpec
from sinklab.trigger import TriggerConfig
from sinklab.trigger.lab import load_trigger_model

#: The new file, as a contributor would write it: softmax that leaves a fixed share of every row in
#: an implicit slot (a "do nothing" given for free, whatever the scores).
FIXED_SLOT = textwrap.dedent(
    '''
    """``fixed_slot``: w = (1 - p) softmax(s), p = 0.25: every row sums to 1 - p, the rest in a slot."""

    import torch

    from sinklab.core.attention import AttnNorm, register


    @register("fixed_slot")
    class FixedSlot(AttnNorm):
        """Softmax over the visible keys scaled by 1 - p: a constant share p of every row is left out."""

        implicit_slot = True

        def __init__(self, n_heads, share=0.25):
            super().__init__(n_heads)
            self.share = share

        def forward(self, scores, mask):
            logits = torch.where(mask, scores.float(), float("-inf"))
            return (1.0 - self.share) * torch.softmax(logits, dim=-1) * mask
    '''
)

SHAPE = dict(layers=1, heads=2, n=6, length=6, eval_trigger=3, max_steps=3)
FLAGS = ["--n-layers", "1", "--n-heads", "2", "--n", "6", "--length", "6", "--eval-trigger", "3", "--max-steps", "3"]


def test_a_new_attention_normalisation_is_one_file_that_trigger_trains_with(tmp_path, monkeypatch, capsys):
    """Registered from its own folder, ``fixed_slot`` is in ``sinklab trigger``'s catalogue, trains
    through the command, and every row of its attention sums to 0.75: in the summary's row mass of
    every head, in the saved mean maps (row 0, which sees only BOS, puts exactly 0.75 on it), and
    in the trained model's weights, which are 0.75 times the softmax of its own scores. Mutation
    tried: the file's ``forward`` returning the plain softmax (no ``1 - share``) gives row mass 1
    and the test fails."""
    out = tmp_path / "run"
    try:
        path = tmp_path / "fixed_slot.py"
        path.write_text(FIXED_SLOT)
        spec = importlib.util.spec_from_file_location("fixed_slot", path)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "fixed_slot", module)
        spec.loader.exec_module(module)  # registers it
        assert ATTN_NORMS["fixed_slot"] is module.FixedSlot and list(ATTN_NORMS)[-1] == "fixed_slot"
        help_text = cli.build_parser()._subparsers._group_actions[0].choices["trigger"].format_help()
        assert "fixed_slot" in help_text

        argv = ["trigger", "--attn", "fixed_slot", *FLAGS, "--workers", "1", "--out", str(out), "--quiet"]
        assert cli.main(argv) == 0
        assert "fixed_slot_1x2" in capsys.readouterr().out  # the command's table
        (run,) = json.loads((out / "summary.json").read_text())["runs"]
        assert run["attn"] == "fixed_slot" and len(run["heads_detail"]) == 2
        for head in run["heads_detail"]:
            assert abs(head["row_mass_nontrigger"] - 0.75) < 1e-5, head

        cfg = TriggerConfig(attention=AttentionSpec("fixed_slot"), **SHAPE)
        assert run["key"] == cfg.key
        mean = load_file(str(out / "maps" / f"{cfg.key}.safetensors"))["mean"]  # (B..., layers, H, T, T) averaged
        torch.testing.assert_close(mean.sum(-1), torch.full(mean.shape[:-1], 0.75), atol=1e-5, rtol=0)
        torch.testing.assert_close(mean[..., 0, 0], torch.full(mean.shape[:-2], 0.75), atol=1e-6, rtol=0)

        model = load_trigger_model(out, cfg).eval()
        assert isinstance(model.blocks[0].attn.norm, module.FixedSlot)
        x = cfg.task.sample(4, torch.Generator().manual_seed(1)).x
        scores = []
        with model.hooks.attached([("blocks.0.attn.hook_scores", lambda s, where: scores.append(s))]), torch.no_grad():
            _, (weights,) = model(x, need_weights=True)
        causal = torch.ones(6, 6, dtype=torch.bool).tril()
        softmax = torch.softmax(scores[0].float().masked_fill(~causal, float("-inf")), dim=-1)
        torch.testing.assert_close(weights, 0.75 * softmax)
    finally:
        ATTN_NORMS.pop("fixed_slot", None)  # the summary names it only as a string: the run still validates
