"""The tuning edits: ZeroTuning's initial-token scale (exact no-op at gamma 1, the renormalisation
formula, per head, under a KV cache) and ACT's sink calibration (hand-computed values, padding,
decoding steps, no-op without later sinks, whole patterns only), their errors and records."""

import json
import math

import pytest
import torch
from test_interventions import decoded_and_rerun, random_ids, sharp_model
from transformers import AutoModelForCausalLM

from sinklab.core.errors import SinklabError
from sinklab.core.hooks import HookPoint
from sinklab.intervene import Intervention, applied
from sinklab.tune import InitialTokenScale, SinkCalibration

PATTERN = "attn.hook_pattern"


def tiny(tiny_model_dir):
    """The conftest's tiny Llama (3 layers, 4 heads, near-uniform attention)."""
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir("llama")).eval()


def run(model, edits, ids, **kwargs):
    """Logits and each layer's pattern as the next layer would use it (probe after the edits)."""
    patterns = {}

    def keep(w, where):
        patterns[where.layer] = w.detach().clone()

    with applied(model, edits, **kwargs) as hooks, hooks.attached([(f"blocks.*.{PATTERN}", keep)]), torch.no_grad():
        logits = model(input_ids=ids).logits
    return logits, patterns


def at(q_start=0, n_keys=None, point=PATTERN):
    return HookPoint(f"blocks.0.{point}", 0, point, q_start, n_keys)


def test_gamma_one_leaves_the_logits_bit_for_bit(tiny_model_dir):
    """Mutation caught: log(g) replaced by g (gamma 1 then adds 1.0)."""
    model, ids = tiny(tiny_model_dir), random_ids(2, 20)
    untouched, _ = run(model, [], ids)
    ones = (1.0, 1.0, 1.0, 1.0)
    for edits in ([InitialTokenScale(ones)], [InitialTokenScale(ones, layers=(1,)), InitialTokenScale(ones, layers=(2,))]):
        assert torch.equal(run(model, edits, ids)[0], untouched)
    assert not torch.equal(run(model, [InitialTokenScale((1.0, 2.0, 1.0, 1.0))], ids)[0], untouched)


def test_the_pattern_follows_the_renormalisation_formula():
    """Layer 1 scaled: its pattern is the untouched one renormalised (row 0 stays [1, 0, ...]),
    layer 0 untouched, masked keys stay at zero; the same logits in row chunks. Mutations caught:
    log(g) added to the last column instead of column 0, and one gamma (the largest) for every head."""
    model, ids = sharp_model(), random_ids(2, 12)
    gammas = (2.0, 0.5, 4.0, 1.0)
    _, before = run(model, [], ids, query_chunk=None)
    logits, after = run(model, [InitialTokenScale(gammas, layers=(1,))], ids, query_chunk=None)
    assert torch.equal(after[0], before[0])
    g = torch.tensor(gammas).view(1, -1, 1)
    a = before[1]
    denominator = (g - 1) * a[..., 0] + 1
    expected = a / denominator.unsqueeze(-1)
    expected[..., 0] = g * a[..., 0] / denominator
    torch.testing.assert_close(after[1], expected, atol=2e-6, rtol=1e-5)
    assert torch.equal(after[1][..., 0, :], torch.eye(12)[0].expand(2, 4, 12))
    assert (after[1].triu(1) == 0).all()
    assert (after[1] - a).abs().max() > 0.05  # the edit acted
    chunked, _ = run(model, [InitialTokenScale(gammas, layers=(1,))], ids, query_chunk=4)
    torch.testing.assert_close(chunked, logits, atol=1e-5, rtol=1e-5)


def test_masked_scores_stay_masked_and_other_columns_are_untouched():
    scores = torch.randn(1, 2, 3, 3)
    scores[0, 1, 2, 0] = float("-inf")
    edited = InitialTokenScale((3.0, 0.5)).edit(scores, at(0, 3, "attn.hook_scores"))
    assert edited[0, 1, 2, 0] == float("-inf")
    assert torch.equal(edited[..., 1:], scores[..., 1:])
    torch.testing.assert_close(edited[0, 0, :, 0], scores[0, 0, :, 0] + math.log(3.0))


def test_per_head_gammas_change_only_their_head():
    """Mutation caught: one gamma (the largest) for every head (heads 0, 2 and 3 change)."""
    model, ids = sharp_model(), random_ids(1, 10)
    _, before = run(model, [], ids, query_chunk=None)
    _, after = run(model, [InitialTokenScale((1.0, 2.0, 1.0, 1.0), layers=(0,))], ids, query_chunk=None)
    for head in (0, 2, 3):
        assert torch.equal(after[0][:, head], before[0][:, head])
    assert (after[0][:, 1] - before[0][:, 1]).abs().max() > 0.01


def test_initial_token_scale_acts_on_decoding_steps_as_on_the_whole_sequence():
    """Greedy decoding with a KV cache (Tq = 1, q_start > 0) equals re-running the whole sequence
    at each step. Mutation caught: column q_start edited instead of column 0."""
    logits, rerun, plain = decoded_and_rerun([InitialTokenScale((4.0, 0.25, 3.0, 0.5))], steps=6)
    torch.testing.assert_close(logits, rerun, atol=1e-4, rtol=1e-4)
    assert (logits - plain).abs().max() > 0.5


def calibrate(iv, pattern, mask, q_start=0, n_keys=None):
    """``iv``'s hooks fired as a forward fires them: the mask first, then the pattern."""
    n_keys = n_keys if n_keys is not None else mask.shape[-1]
    (mask_name, keep), (pattern_name, edit) = iv.hooks(pattern.shape[1])
    assert mask_name.endswith("attn.hook_mask") and pattern_name.endswith(PATTERN)
    assert keep(mask, at(q_start, n_keys, "attn.hook_mask")) is None
    return edit(pattern, at(q_start, n_keys))


def test_act_on_a_hand_made_pattern():
    """Key 1 (mean 0.4 over rows 1-3) and key 2 (mean 0.12 over rows 2-3) are sinks, key 3 (0.06)
    and key 0 (the first) are not; head 1 is not selected. Mutations caught: position 0 treated
    as a sink, the mean divided by all Tq rows instead of the rows that see the key (key 2 missed),
    no redistribution (rows no longer sum to 1), redistribution to the sinks too (wrong values),
    and heads=(0,) ignored."""
    head = torch.tensor(
        [[1.0, 0.0, 0.0, 0.0], [0.4, 0.6, 0.0, 0.0], [0.5, 0.3, 0.2, 0.0], [0.6, 0.3, 0.04, 0.06]],
    )
    other = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.1, 0.9, 0.0, 0.0], [0.1, 0.8, 0.1, 0.0], [0.1, 0.7, 0.1, 0.1]])
    pattern = torch.stack([head, other]).unsqueeze(0)  # (1, 2, 4, 4)
    mask = torch.ones(4, 4, dtype=torch.bool).tril().view(1, 1, 4, 4)
    out = calibrate(SinkCalibration(heads=(0,)), pattern, mask)
    scale = 1 + (0.6 * 0.3 + 0.6 * 0.04) / 0.66  # row 3: 0.204 given back over keys 0 and 3 (0.66)
    expected = torch.tensor(
        [[1.0, 0.0, 0.0, 0.0], [0.76, 0.24, 0.0, 0.0], [0.8, 0.12, 0.08, 0.0], [0.6 * scale, 0.12, 0.016, 0.06 * scale]]
    )
    torch.testing.assert_close(out[0, 0], expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out.sum(-1), torch.ones(1, 2, 4))
    assert torch.equal(out[0, 1], other)
    assert not torch.equal(calibrate(SinkCalibration(), pattern, mask)[0, 1], other)  # selected, it changes
    # the same through edit() with the causal mask assumed
    torch.testing.assert_close(SinkCalibration().edit(pattern[:, :1], at(0, 4)), expected.view(1, 1, 4, 4))


def test_act_reads_real_rows_decoding_steps_and_leaves_rows_without_spare_mass():
    """A right-padded row (it cannot see itself) does not vote; a decoding step's one row finds
    its own sinks; a mean equal to the threshold is not "more than" it; a row whose only weight
    is on sinks stays. Mutations caught: every row voting (the padded row makes key 2 a sink),
    ``>=`` for ``>``, and no guard for rows without spare mass (their sinks shrink, the row no
    longer sums to 1)."""
    pattern = torch.tensor([[1.0, 0, 0, 0], [0.95, 0.05, 0, 0], [0.9, 0.05, 0.05, 0], [0.1, 0.1, 0.8, 0]]).view(1, 1, 4, 4)
    mask = torch.ones(4, 4, dtype=torch.bool).tril()
    mask[3, 3] = False  # position 3 is padding
    assert torch.equal(calibrate(SinkCalibration(), pattern, mask.view(1, 1, 4, 4)), pattern)
    step = torch.tensor([0.5, 0.05, 0.3, 0.07, 0.08]).view(1, 1, 1, 5)
    out = calibrate(SinkCalibration(), step, torch.ones(1, 1, 1, 5, dtype=torch.bool), q_start=4, n_keys=5)
    factor = 1 + 0.6 * 0.3 / 0.7
    expected = torch.tensor([0.5 * factor, 0.05 * factor, 0.12, 0.07 * factor, 0.08 * factor]).view(1, 1, 1, 5)
    torch.testing.assert_close(out, expected)
    boundary = torch.tensor([0.25, 0.5, 0.25]).view(1, 1, 1, 3)  # key 1's mean is exactly the threshold
    assert torch.equal(SinkCalibration(threshold=0.5).edit(boundary, at(2, 3)), boundary)
    only_sinks = torch.tensor([[1.0, 0, 0], [0.0, 1.0, 0], [0.0, 0.5, 0.5]]).view(1, 1, 3, 3)
    assert torch.equal(SinkCalibration().edit(only_sinks, at(0, 3)), only_sinks)


def test_act_without_possible_or_actual_later_sinks_leaves_the_logits_bit_for_bit(tiny_model_dir):
    """threshold 1.0 (no mean can exceed it), and the near-uniform tiny model at 64 tokens, where
    no later key gets 0.1 on average (checked), are exact no-ops; a lower threshold acts.
    Mutation caught: every row renormalised by its sum at the end (a safety step that is not
    exact), with the no-sink shortcut removed."""
    model, ids = tiny(tiny_model_dir), random_ids(2, 64)
    untouched, patterns = run(model, [], ids, query_chunk=None)
    for w in patterns.values():
        mean = w.sum(-2) / torch.arange(64, 0, -1)  # over the rows that see each key
        assert mean[..., 1:].max() < 0.1
    for edits in ([SinkCalibration(threshold=1.0)], [SinkCalibration()]):
        assert torch.equal(run(model, edits, ids, query_chunk=None)[0], untouched)
    assert not torch.equal(run(model, [SinkCalibration(threshold=0.03)], ids, query_chunk=None)[0], untouched)


def test_act_on_a_model_keeps_rows_normalised_and_runs_under_generate():
    model, ids = sharp_model(), random_ids(2, 12)
    untouched, before = run(model, [], ids, query_chunk=None)
    logits, after = run(model, [SinkCalibration(layers=(0,))], ids, query_chunk=None)
    torch.testing.assert_close(after[0].sum(-1), torch.ones(2, 4, 12))
    assert (after[0] - before[0]).abs().max() > 0.05 and (logits - untouched).abs().max() > 0.05
    with applied(model, [SinkCalibration()]), torch.no_grad():  # decoding steps: one row each
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, min_new_tokens=3, do_sample=False)


def test_act_refuses_patterns_in_row_chunks():
    """Mutation caught: no check (the chunks are calibrated one by one)."""
    model, ids = sharp_model(), random_ids(1, 12)
    with pytest.raises(SinklabError, match="query_chunk=None") as error, applied(model, [SinkCalibration()], query_chunk=4):
        model(input_ids=ids)
    assert "\n" not in str(error.value)
    with pytest.raises(SinklabError, match="row chunks"):
        SinkCalibration().edit(torch.ones(1, 1, 4, 12) / 12, at(0, 12))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: InitialTokenScale((1.0, 0.0, 1.0, 1.0)), "positive finite"),
        (lambda: InitialTokenScale((1.0, -2.0, 1.0, 1.0)), "positive finite"),
        (lambda: InitialTokenScale((1.0, float("inf"), 1.0, 1.0)), "positive finite"),
        (lambda: InitialTokenScale(()), "got none"),
        (lambda: SinkCalibration(beta=-0.1), "beta must be in"),
        (lambda: SinkCalibration(beta=1.5), "beta must be in"),
        (lambda: SinkCalibration(threshold=0.0), "threshold must be in"),
        (lambda: SinkCalibration(threshold=float("nan")), "threshold must be in"),
    ],
)
def test_bad_values_are_one_line_errors(make, message):
    with pytest.raises(SinklabError, match=message) as error:
        make()
    assert "\n" not in str(error.value)


def test_wrong_number_of_gammas_is_refused_on_entry():
    with (
        pytest.raises(SinklabError, match="3 gamma\\(s\\) given, but the model has 4 heads"),
        applied(sharp_model(), [InitialTokenScale((1.0, 2.0, 1.0), layers=(0,))]),
    ):
        pytest.fail("the block must not run")


def test_labels_and_records():
    edits = [InitialTokenScale((1.0, 2.5), layers=(3,)), InitialTokenScale([0.5, 2]), SinkCalibration(heads=(1, 2))]
    assert [iv.label for iv in edits] == ["initial_token_scale layer 3", "initial_token_scale all layers", "act beta=0.4 thr=0.1"]
    assert edits[1].gammas == (0.5, 2.0)
    for iv in edits:
        assert Intervention.from_record(json.loads(json.dumps(iv.to_record()))) == iv
