"""The tuning edits: ZeroTuning's initial-token scale (exact no-op at gamma 1, the renormalisation
formula, per head, under a KV cache) and ACT's sink calibration (hand-computed values, padding,
decoding steps, no-op without later sinks, whole patterns only), their errors and records."""

import json
import math

import pytest
import torch
from test_interventions import decoded_and_rerun, random_ids, sharp_model
from transformers import AutoModelForCausalLM

from sinklab import applied
from sinklab.core.errors import SinklabError
from sinklab.core.hooks import HookSite
from sinklab.intervene import Intervention
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

    with applied(model, edits, **kwargs) as block, block.hooks.attached([(f"blocks.*.{PATTERN}", keep)]), torch.no_grad():
        logits = model(input_ids=ids).logits
    return logits, patterns


def at(q_start=0, n_keys=None, point=PATTERN):
    return HookSite(f"blocks.0.{point}", 0, point, q_start, n_keys)


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


def test_act_finds_the_sinks_on_the_prompts_rows_where_an_answer_follows():
    """Rows 0-1 are the prompt, rows 2-3 a choice being scored. Over every row key 2 (the choice's
    first token, 0.45 on average over rows 2-3) is a sink; over the prompt's rows it is not seen, so
    nothing but key 1 (0.5 over row 1) is. Mutation caught: the answer's rows counted (key 2 found)."""
    from sinklab.tune.formulas import sinks_of

    head = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0], [0.3, 0.2, 0.5, 0.0], [0.4, 0.1, 0.4, 0.1]])
    pattern, mask = head.view(1, 1, 4, 4), torch.ones(4, 4, dtype=torch.bool).tril().view(1, 1, 4, 4)
    assert sinks_of(pattern, mask, 0, 0.1)[0, 0].tolist() == [False, True, True, False]
    assert sinks_of(pattern, mask, 0, 0.1, prompt_end=2)[0, 0].tolist() == [False, True, False, False]
    edited = SinkCalibration().edit(pattern, HookSite("blocks.0." + PATTERN, 0, PATTERN, 0, 4, prompt_end=2))
    assert edited[0, 0, 3, 2] > head[3, 2] and edited[0, 0, 3, 1] < head[3, 1]  # key 1 calibrated on the answer's rows too


def test_act_spares_position_0_or_as_the_papers_code_the_first_sink_found():
    """Threshold 0.4: position 0 is not a sink (mean 0.3 over rows 0-3), keys 1 (0.62) and 2 (0.45)
    are. sinklab's rule spares position 0 and calibrates both; the paper's code spares key 1, the
    first found. Where position 0 is a sink the rules agree. Mutation caught: the first sink's
    index taken from the last position (argmax over a reversed row)."""
    from sinklab.tune.formulas import sinks_of

    head = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.1, 0.9, 0.0, 0.0], [0.05, 0.5, 0.45, 0.0], [0.05, 0.45, 0.45, 0.05]])
    pattern, mask = head.view(1, 1, 4, 4), torch.ones(4, 4, dtype=torch.bool).tril().view(1, 1, 4, 4)
    assert sinks_of(pattern, mask, 0, 0.4)[0, 0].tolist() == [False, True, True, False]
    assert sinks_of(pattern, mask, 0, 0.4, spare="first_sink")[0, 0].tolist() == [False, False, True, False]
    sunk_first = torch.tensor([[1.0, 0.0, 0.0], [0.6, 0.4, 0.0], [0.5, 0.05, 0.45]]).view(1, 1, 3, 3)
    three = torch.ones(3, 3, dtype=torch.bool).tril().view(1, 1, 3, 3)
    for rule in ("first_token", "first_sink"):
        assert sinks_of(sunk_first, three, 0, 0.4, spare=rule)[0, 0].tolist() == [False, False, True]
    with pytest.raises(SinklabError, match="spare must be one of first_token, first_sink"):
        SinkCalibration(spare="none")


def test_every_choice_of_a_question_is_calibrated_alike_through_the_judge(tmp_path, tiny_model_dir, monkeypatch):
    """lm-eval scores each choice in its own forward (batch size 1): prompt plus the choice's tokens
    but the last. The sinks ACT finds must be the prompt's, the same for every choice of a
    question, whatever the choices' lengths. Mutation caught: the judge not telling the edit where
    the prompt ends (the choices' rows counted: sink sets differ between choices)."""
    from conftest import write_task

    from sinklab.accuracy import evaluate, lm_for, read_task, sizes_for
    from sinklab.tune import formulas

    found = []
    original = formulas.sinks_of

    def recording(pattern, mask, q_start, threshold, prompt_end=None, spare="first_token"):
        sinks = original(pattern, mask, q_start, threshold, prompt_end, spare)
        found.append((prompt_end, pattern.shape[-1], sinks[..., : prompt_end or pattern.shape[-1]].clone()))
        return sinks

    monkeypatch.setattr(formulas, "sinks_of", recording)
    model = tiny(tiny_model_dir)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir("llama"))
    path = write_task(tmp_path / "long" / "task.json", n=20, choices=("A", "B C D E", "F G"), append_choices_to_input=True)
    with applied(model, [SinkCalibration(threshold=0.02)], query_chunk=None):
        evaluate(lm_for(model, tokenizer, batch_size=1), [read_task(str(path))], "test", 0, sizes_for(0, 0, 3), rotations=1)
    assert found and all(prompt_end is not None and prompt_end <= width for prompt_end, width, _ in found)
    by_prompt: dict = {}
    for prompt_end, _, sinks in found:
        by_prompt.setdefault(prompt_end, []).append(sinks)
    assert any(len(sets) > 3 for sets in by_prompt.values())  # several choices (and layers) per prompt
    for sets in by_prompt.values():
        layers = len(model.model.layers)
        per_layer = [sets[i::layers] for i in range(layers)]
        assert all(torch.equal(s, group[0]) for group in per_layer for s in group)


# --------------------------------------------------------------------------- the mutation audit (issue 50, section 4)


def later_sink_input(tokenizer, n: int, seed: int = 0) -> torch.Tensor:
    """BOS and ``n - 1`` seeded tokens, every tenth the later-sink model's marker ``:``."""
    ids = torch.randint(2, len(tokenizer), (1, n), generator=torch.Generator().manual_seed(seed))
    ids[0, 0] = tokenizer.bos_token_id
    ids[0, 5::10] = tokenizer.convert_tokens_to_ids(":")
    return ids


@torch.no_grad()
def patterns_under(model, ids, tuning=None) -> torch.Tensor:
    """Layer 0's attention pattern (1, H, T, T) as the model uses it, under ``tuning`` (None: untouched)."""
    kept = {}

    def keep(w, where):
        kept["pattern"] = w.detach().clone()

    edits = (tuning,) if tuning is not None else ()
    with (
        applied(model, *edits, query_chunk=None) as block,
        block.hooks.attached([(f"blocks.0.{PATTERN}", keep)]),
        torch.no_grad(),
    ):
        model(input_ids=ids)
    return kept["pattern"]


def test_act_on_one_head_leaves_the_other_heads_of_its_layer_exactly(tokenizer):
    """ACT on head 0 of the later-sink model (test_tune): head 0's pattern is calibrated, head 1's
    is bit for bit the untouched one, although head 1 has sinks by ACT's rule (its uniform
    attention gives key 1 a mean of (H_40 - 1) / 39 = 0.084 over the rows that see it, and key 2
    and on less; ACT on both heads at a threshold of 0.05 changes it: checked). Mutations caught:
    ACT's edits built without their heads (every head of the chosen layer calibrated), and
    SinkCalibration's selected heads ignored."""
    from test_tune import later_sink_model

    from sinklab.tune import ACT

    model, ids = later_sink_model(tokenizer), later_sink_input(tokenizer, 40)
    untouched = patterns_under(model, ids)
    one = patterns_under(model, ids, ACT(((0, 0),), threshold=0.05))
    both = patterns_under(model, ids, ACT(((0, 0), (0, 1)), threshold=0.05))
    assert torch.equal(one[:, 1], untouched[:, 1]) and not torch.equal(both[:, 1], untouched[:, 1])
    assert (one[:, 0] - untouched[:, 0]).abs().max() > 0.05 and torch.equal(one[:, 0], both[:, 0])


@torch.no_grad()
def test_act_attends_whole_patterns_on_prompts_longer_than_the_query_chunk(tokenizer):
    """sinklab's attention runs 256 query rows at a time by default, and ACT refuses a pattern in
    row chunks: on a 300-token input ``sinklab.applied`` with ACT (alone, or with a ZeroTuning
    before or after it in the same block) attends all rows at once and gives the logits of the same
    edits with ``query_chunk=None``, away from the untouched ones. Mutations caught: ACT run in row
    chunks (the block's default query chunk), and a later ZeroTuning in the same ``sinklab.applied``
    block resetting ACT's chunking."""
    from test_tune import later_sink_model

    from sinklab.tune import ACT, ZeroTuning

    model, ids = later_sink_model(tokenizer), later_sink_input(tokenizer, 300)
    act, zero = ACT(((0, 0),)), ZeroTuning(((2.0, 0.5),))
    assert ids.shape[-1] > 256
    untouched = model(input_ids=ids).logits
    with applied(model, act.edits(), query_chunk=None):
        expected = model(input_ids=ids).logits
    with applied(model, act):
        torch.testing.assert_close(model(input_ids=ids).logits, expected, rtol=1e-5, atol=1e-5)
    assert (expected - untouched).abs().max() > 0.05
    with applied(model, [*act.edits(), *zero.edits()], query_chunk=None):
        both = model(input_ids=ids).logits
    for edits in ((act, zero), (zero, act)):
        with applied(model, *edits):
            torch.testing.assert_close(model(input_ids=ids).logits, both, rtol=1e-5, atol=1e-5)


def test_both_profiles_find_acts_sinks_on_the_prompt_and_keep_the_sink_asked(tmp_path, tokenizer, monkeypatch):
    """The gradient and the one-head-at-a-time profile tell ACT where each question's prompt ends
    and which sink to spare, as the judge does. Mutations caught: ``scoring_after`` dropped in either
    profile (sinks over the answers' rows), the spare rule not passed."""
    from conftest import planted_model, write_task

    from sinklab.accuracy import lm_for, questions, read_task, sizes_for
    from sinklab.tune import formulas
    from sinklab.tune.profile import ablation_profile, head_profile

    seen = []
    original = formulas.sinks_of

    def recording(pattern, mask, q_start, threshold, prompt_end=None, spare="first_token"):
        seen.append((prompt_end, spare))
        return original(pattern, mask, q_start, threshold, prompt_end, spare)

    monkeypatch.setattr(formulas, "sinks_of", recording)
    planted = planted_model(tokenizer)
    task = read_task(str(write_task(tmp_path / "p" / "task.json", choices=("A", "BB C"), append_choices_to_input=True)))
    asked = questions(lm_for(planted, tokenizer, 1), task, "validation", 0, sizes_for(0, 4, 8))
    starts = {len(q.pairs[0][0]) for q in asked}
    head_profile(planted, asked, "act", "supervised", (1, 2), spare="first_sink")
    ablation_profile(planted, asked, "act", "supervised", (1, 2), 0.6, heads=[(0, 0)], spare="first_sink")
    assert seen and all(end in starts and spare == "first_sink" for end, spare in seen)


def test_the_tune_ablation_edits_each_head_at_the_papers_strength(monkeypatch, tmp_path, tokenizer):
    """ZeroTuning's ablation scales one head by gamma 1.5 (log 1.5 added to its score), ACT's
    calibrates one head at beta 0.4 (strength 1 - beta); ACT tries only the layers it may calibrate.
    Mutation caught: ACT's strength set to beta."""
    import math

    from sinklab.tune import TuneConfig
    from sinklab.tune import run as tune_run
    from sinklab.tune.run import profile_heads

    calls = []

    def ablation(model, asked, method, mode, shape, strength, heads=None, **kw):
        calls.append((method, strength, heads))
        return torch.zeros(shape)

    monkeypatch.setattr(tune_run, "ablation_profile", ablation)
    for method in ("zerotuning", "act"):
        _, passes = profile_heads(None, [1, 2], TuneConfig(method=method, profile="ablation"), (5, 2))
        assert passes == {"profile_forward_backward_passes": 0, "profile_forward_passes": (len(calls[-1][2]) + 1) * 2}
    assert calls[0][:2] == ("zerotuning", pytest.approx(math.log(1.5))) and len(calls[0][2]) == 10
    assert calls[1][:2] == ("act", pytest.approx(0.6)) and {layer for layer, _ in calls[1][2]} == {2, 3}


def test_an_intervention_that_reads_the_prompt_rows_is_judged_one_request_at_a_time(tmp_path, tokenizer):
    """``sinklab intervene --accuracy`` with ACT among the interventions runs lm-eval at batch size
    1, where each request's prompt is known (at 8, ACT would refuse). Mutation caught: the judge
    left at batch size 8 (the run fails with ACT's refusal)."""
    from conftest import planted_model, write_task

    import sinklab

    path = write_task(tmp_path / "i" / "task.json", n=40)
    run = sinklab.intervene_model(
        planted_model(tokenizer), tokenizer, [SinkCalibration(threshold=0.05)], tokens=16, accuracy=(str(path),),
        accuracy_test=6,
    )  # fmt: skip
    assert run.summary["accuracy"][0]["edited"]["n"] == 6
