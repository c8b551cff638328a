"""Interventions: zero strength is a no-op, each edit changes exactly what it claims, hooks are
removed on error, bad positions and layers are clear errors, and the trigger-model result."""

import dataclasses
import json

import pytest
import torch

from sinklab import cli
from sinklab.core.attention import causal_mask
from sinklab.core.errors import SinklabError
from sinklab.core.hooks import HookPoint
from sinklab.intervene import (
    DropFirst,
    InterveneConfig,
    MaskSelf,
    PlainScale,
    ScoreBias,
    ValueZero,
    VarianceAmplify,
    apply_interventions,
    hooks_of,
    run_intervene,
    share_at,
    suppress_sink,
)
from sinklab.models.hf import load_model
from sinklab.models.native import ModelConfig, Transformer
from sinklab.models.subjects import HFSubject, NativeSubject
from sinklab.scan import RecordOptions

T = 6


def at(point="attn.hook_z", q_start=0):
    return HookPoint(f"blocks.0.{point}", 0, point, q_start)


def native_subject():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(d_model=16, n_layers=2, n_heads=2, vocab_size=40, mlp=True, norm=True, rope=True, residual=True, scale_scores=True, max_seq_len=32))
    return NativeSubject(model)


def logits_with(subject, ids, interventions):
    with subject.session(), subject.hooks.attached(hooks_of(interventions, subject.n_heads)):
        return subject.logits(ids)


@pytest.mark.parametrize(
    "noop",
    [VarianceAmplify(k=3, lam=1.0), PlainScale(k=3, lam=1.0), ScoreBias(at=(0, 2), delta=0.0), DropFirst(n=0)],
    ids=lambda iv: type(iv).__name__,
)
def test_zero_strength_leaves_logits_unchanged(noop, tiny_model_dir):
    for subject in (native_subject(), HFSubject(load_model(str(tiny_model_dir("llama"))))):
        ids = torch.randint(0, 40, (2, 10))
        torch.testing.assert_close(logits_with(subject, ids, [noop]), logits_with(subject, ids, []), atol=1e-6, rtol=1e-6)


def test_mask_self_keeps_only_the_diagonal_of_row_k():
    mask = causal_mask(T, T)
    edited = MaskSelf(k=3).edit(mask, at("attn.hook_mask"))
    assert edited[0, 0, 3].tolist() == [False, False, False, True, False, False]
    assert torch.equal(edited[0, 0, [0, 1, 2, 4, 5]], mask[0, 0, [0, 1, 2, 4, 5]])
    # a chunk of rows that starts after k is untouched; one that contains it is shifted correctly
    assert torch.equal(MaskSelf(k=3).edit(mask[..., 4:, :], at("attn.hook_mask", 4)), mask[..., 4:, :])
    assert MaskSelf(k=3).edit(mask[..., 2:, :], at("attn.hook_mask", 2))[0, 0, 1].tolist() == [False, False, False, True, False, False]


def test_variance_amplify_and_plain_scale_on_hand_checkable_values():
    z = torch.arange(T, dtype=torch.float32).view(1, 1, T, 1).repeat(1, 2, 1, 2)  # o_t = t, mu = 2.5
    amplified = VarianceAmplify(k=4, lam=3.0).edit(z, at())
    assert amplified[0, 0, 4].tolist() == [2.5 + 3 * (4 - 2.5)] * 2
    assert torch.equal(amplified[..., [0, 1, 2, 3, 5], :], z[..., [0, 1, 2, 3, 5], :])
    scaled = PlainScale(k=4, lam=3.0).edit(z, at())
    assert scaled[0, 1, 4].tolist() == [12.0, 12.0]


def test_score_bias_only_hits_later_queries_of_the_named_keys():
    scores = torch.zeros(1, 1, T, T)
    out = ScoreBias(at=(0, 2), delta=-5.0).edit(scores, at("attn.hook_scores"))
    expected = torch.zeros(T, T)
    expected[1:, 0] = -5.0
    expected[3:, 2] = -5.0
    assert torch.equal(out[0, 0], expected)  # scores of a query on itself are untouched


def test_value_zero_and_drop_first():
    v = torch.ones(1, 2, T, 3)
    zeroed = ValueZero(at=(0, 4)).edit(v, at("attn.hook_v"))
    assert zeroed[..., [0, 4], :].abs().sum() == 0 and zeroed[..., [1, 2, 3, 5], :].min() == 1
    dropped = DropFirst(n=2).edit(causal_mask(T, T), at("attn.hook_mask"))[0, 0]
    assert not dropped[2:, :2].any()  # later queries no longer see the first two tokens
    assert torch.equal(dropped[:2], causal_mask(T, T)[0, 0, :2])  # the first two still see each other
    assert torch.equal(dropped[2:, 2:], causal_mask(T, T)[0, 0, 2:, 2:])


def test_head_selection_edits_only_those_heads():
    subject = native_subject()
    ids = torch.randint(0, 40, (1, 8))
    seen = {}

    def keep(w, p):
        seen[p.layer] = w.detach().clone()

    with subject.session(), subject.hooks.attached([*MaskSelf(k=5, heads=(1,), layers=(0,)).hooks(2), ("blocks.*.attn.hook_pattern", keep)]):
        subject.logits(ids)
    w = seen[0][0]  # (H, T, T)
    assert w[1, 5, 5] == pytest.approx(1.0) and w[1, 5, :5].sum() == 0
    assert w[0, 5, :5].sum() > 0  # head 0 untouched
    assert seen[1][0, :, 5, :5].sum() > 0  # layer 1 untouched


def test_suppressing_the_sink_moves_all_first_token_attention(tiny_model_dir):
    subject = HFSubject(load_model(str(tiny_model_dir("llama"))))
    ids = torch.randint(2, subject.vocab_size, (2, 12))
    options = RecordOptions(key_columns=(0, 5))
    base, _ = apply_interventions(subject, ids, [], options)
    after, _ = apply_interventions(subject, ids, [suppress_sink(0)], options)
    assert max(share_at(base, 0)) > 0 and max(share_at(after, 0)) == 0
    masked, _ = apply_interventions(subject, ids, [MaskSelf(k=5)], options)
    assert masked.columns[5][:, :, 5].min() == pytest.approx(1.0)  # row 5 attends only to itself


def test_hooks_are_gone_after_a_run_that_fails_inside_an_intervention():
    """The failure happens in the second layer's hook, mid-forward, after the first one edited."""
    subject = native_subject()
    calls = []

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class FailsInTheSecondLayer(VarianceAmplify):
        def rewrite(self, o_k, z):
            calls.append(o_k)
            if len(calls) == 2:
                raise RuntimeError("failed inside the intervention")
            return super().rewrite(o_k, z)

    ids = torch.randint(0, 40, (1, 8))
    clean = logits_with(subject, ids, [])
    with pytest.raises(RuntimeError, match="inside the intervention"):
        logits_with(subject, ids, [FailsInTheSecondLayer(k=2, lam=2.0)])
    assert len(calls) == 2 and not subject.hooks
    torch.testing.assert_close(logits_with(subject, ids, []), clean, atol=0, rtol=0)  # nothing left behind


@pytest.mark.parametrize(
    "iv, message",
    [
        (MaskSelf(k=50), "beyond the input"),
        (ScoreBias(at=(3, 99), delta=1.0), "beyond the input"),
        (VarianceAmplify(k=2, lam=2.0, layers=(7,)), "layer 7 does not exist"),
        (PlainScale(k=2, lam=2.0, heads=(5,)), "head 5 does not exist"),
    ],
)
def test_bad_positions_layers_and_heads_are_clear_errors(iv, message):
    subject = native_subject()
    with pytest.raises(SinklabError, match=message):
        apply_interventions(subject, torch.randint(0, 40, (1, 10)), [iv], RecordOptions())


def test_run_directory_contract(tiny_model_dir, tmp_path):
    subject = HFSubject(load_model(str(tiny_model_dir("llama"))))
    cfg = InterveneConfig(edits={"mask_self": (5,), "amplify": 5, "scale": 5, "suppress_sink": True, "drop_first": 2}, lams=(1.0, 4.0), out=str(tmp_path))
    cfg.inputs.random_tokens, cfg.inputs.corpus, cfg.inputs.max_tokens, cfg.inputs.batch = True, None, 16, 2
    run_intervene(cfg, subject)
    s = json.loads((tmp_path / "summary.json").read_text())
    for entry in [s["baseline"], *s["results"]]:
        assert {"share_at_k", "share_at_0", "loss", "ppl"} <= set(entry)
        assert len(entry["share_at_k"]) == 3 and len(entry["share_at_0"]) == 3
    amp = [r for r in s["results"] if r["intervention"]["type"] == "VarianceAmplify"]
    assert [r["lam"] for r in amp] == [1.0, 4.0] and amp[0]["intervention"]["k"] == 5
    assert amp[0]["share_at_k"] == pytest.approx(s["baseline"]["share_at_k"], abs=1e-6)  # lam = 1 is a no-op
    assert all((tmp_path / f).exists() for f in s["figures"]) and "lam_curve.png" in s["figures"]


def test_cli_bad_position_is_one_line(tiny_model_dir, tmp_path, capsys):
    code = cli.main(["intervene", str(tiny_model_dir("llama")), "--random-tokens", "--max-tokens", "8", "--mask-self", "20", "--out", str(tmp_path)])
    assert code == 2
    assert "position 20 is beyond the input" in capsys.readouterr().err


def test_suppressing_the_bos_sink_breaks_softmax_but_not_relu_on_the_trigger_task(tmp_path):
    from sinklab.intervene import run_trigger_interventions

    summary = run_trigger_interventions(InterveneConfig(out=str(tmp_path)))
    by_model = {r["model"].split("_")[0]: r for r in summary["results"]}
    soft, relu = by_model["softmax"], by_model["relu"]
    assert soft["mse_nontrigger_after"] > 100 * max(soft["mse_nontrigger_before"], 1e-6)
    assert relu["mse_nontrigger_after"] == relu["mse_nontrigger_before"] == 0.0
