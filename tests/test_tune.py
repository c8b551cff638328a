"""``sinklab tune``: ZeroTuning and ACT found, searched and judged on a planted model whose answer
is decided by how much attention one head pays the initial token, through lm-eval on task files
the test writes (the BIG-bench download is never used here)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import one_line_error, planted_model, write_task

import sinklab
from sinklab.accuracy import read_task
from sinklab.core.errors import SinklabError
from sinklab.tune import ACT, ZeroTuning, applied, load_tuning, save_tuning

SIZES = dict(validation=6, test=8)


@pytest.fixture
def planted(tokenizer):
    return planted_model(tokenizer)


@pytest.mark.parametrize("gold,direction", [("A", 1), ("B", -1)])
def test_zerotuning_finds_the_direction_of_gamma_that_the_planted_head_wants(tmp_path, tokenizer, planted, gold, direction):
    task = write_task(tmp_path / f"planted_{gold}" / "task.json", gold=gold)
    result = sinklab.tune_model(planted, tokenizer, tasks=(str(task),), method="zerotuning", **SIZES)
    profile = result.data["profiles"][f"planted_{gold}"]
    assert profile[0, 0] * direction > 0 and abs(profile[0, 1]) < 1e-6 * abs(profile[0, 0])
    tuning = result.data["tunings"][f"planted_{gold}"]
    assert isinstance(tuning, ZeroTuning) and (tuning.gammas[0][0] - 1) * direction > 0 and tuning.gammas[0][1] == 1.0
    row = result.frame().iloc[0]
    assert row["gold_loglik_tuned"] > row["gold_loglik_untouched"]
    assert row["acc_tuned"] >= row["acc_untouched"]


def test_the_unsupervised_mode_lowers_the_entropy_over_the_choices_without_reading_labels(tmp_path, tokenizer, planted):
    runs = [
        sinklab.tune_model(
            planted, tokenizer, tasks=(str(write_task(tmp_path / g / "task.json", gold=g)),), mode="unsupervised", **SIZES
        )
        for g in ("A", "B")
    ]
    tunings = [next(iter(r.data["tunings"].values())) for r in runs]
    assert tunings[0] == tunings[1]  # the labels differ, the choice does not
    rows = runs[0].frame("validation")
    assert rows[rows["chosen"]]["entropy"].iloc[0] < rows[rows["label"] == "untouched"]["entropy"].iloc[0]


def later_sink_model(tokenizer, marker: str = ":", pull: float = 2.5, strength: float = 6.0):
    """One layer, two heads. Head 0's queries all ask for the ``marker`` token (a query bias meets a
    key only the marker has, in the pair of dimensions that RoPE at theta 1e8 barely turns), so each
    marker after the first token is a sink of head 0 (about 0.4 of its attention each, over ACT's
    0.1 threshold); the marker's value pulls toward choice B, every other token's toward A, and
    head 1 carries nothing. Untouched, B wins; calibrating head 0 away from its later sinks (ACT)
    gives the other tokens their mass back, and A wins."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=8, intermediate_size=4, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, head_dim=4, max_position_embeddings=512, bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=False, attention_bias=True, rope_parameters={"rope_type": "default", "rope_theta": 1e8},
    )  # fmt: skip
    model = LlamaForCausalLM(cfg).eval()
    a, b, mark = tokenizer.convert_tokens_to_ids(["A", "B", marker])
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        layer = model.model.layers[0]
        for norm in (layer.input_layernorm, layer.post_attention_layernorm, model.model.norm):
            norm.weight.fill_(1.0)
        emb = model.model.embed_tokens.weight
        emb[:, 1] = 1.0  # dim 1: any other token
        emb[tokenizer.bos_token_id] = torch.eye(8)[0]  # dim 0: the initial token
        emb[mark] = torch.eye(8)[2]  # dim 2: the marker
        attn = layer.self_attn
        attn.q_proj.bias[1] = pull  # head 0's query, dimension 1: rotated at 1e-4 rad a position
        attn.k_proj.weight[1, 2] = 1.0  # the marker's key meets it
        attn.v_proj.weight[0, 2] = 1.0  # head 0, value dim 0: "the marker"
        attn.v_proj.weight[1, 1] = 1.0  # head 0, value dim 1: "any other token"
        attn.o_proj.weight[4, 0] = strength
        attn.o_proj.weight[3, 1] = strength
        model.lm_head.weight[a, 3] = 1.0
        model.lm_head.weight[b, 4] = 1.0
    return model


def test_act_finds_the_head_whose_later_sink_hides_the_answer_and_calibrating_it_helps(tmp_path, tokenizer):
    """ACT on a model whose head 0 sinks on a later token that carries the wrong answer: the
    profile points at head 0 (and not at head 1, which carries nothing), the search calibrates it,
    and the test split's accuracy (0 untouched) and gold log-likelihood rise. Mutation tried: the
    edit's strength fixed at 0 (the sinks' weight left whole) finds nothing to calibrate and fails."""
    model = later_sink_model(tokenizer)
    task = write_task(tmp_path / "later" / "task.json", gold="A")
    result = sinklab.tune_model(model, tokenizer, tasks=(str(task),), method="act", **SIZES)
    profile = result.data["profiles"]["later"]
    assert profile[0, 0] > 0 and abs(profile[0, 1]) < 1e-6 * profile[0, 0]
    assert result.data["tunings"]["later"] == ACT(((0, 0),))
    row = result.frame().iloc[0]
    assert row["acc_untouched"] < 0.5 < row["acc_tuned"] and row["gold_loglik_tuned"] > row["gold_loglik_untouched"]
    # the paired changes are tuned minus untouched (mutation caught: the verdict's runs swapped)
    assert row["acc_change"] > 0 and row["acc_change"] == pytest.approx(row["acc_tuned"] - row["acc_untouched"])
    assert row["gold_loglik_change"] == pytest.approx(row["gold_loglik_tuned"] - row["gold_loglik_untouched"])


def test_zerotuning_scales_the_profiled_heads_at_their_layer_and_head():
    """On 2 layers x 4 heads (the top quarter: 2 heads), the head the profile says wants more of
    the initial token gets gamma, the one that wants less 1 / gamma, every other head 1.
    Mutation caught: the flat gammas cut into layers by stride (``gammas[r::layers]``), which
    a one-layer model cannot tell apart."""
    from sinklab.tune.search import GAMMAS, zerotuning_candidates

    profile = torch.zeros(2, 4)
    profile[0, 1], profile[1, 2] = 0.5, -0.8
    for (label, tuning), g in zip(zerotuning_candidates(profile), GAMMAS):
        expected = [[1.0, g, 1.0, 1.0], [1.0, 1.0, 1.0 / g, 1.0]]
        assert [list(layer) for layer in tuning.gammas] == expected and label == f"gamma {g:g} on 2 heads"


def test_gamma_one_and_act_with_nothing_to_calibrate_leave_the_logits_bit_for_bit(tokenizer, planted):
    ids = torch.tensor([[tokenizer.bos_token_id, *tokenizer.encode("tree wind stone")]])
    with torch.no_grad():
        plain = planted(ids).logits
        with applied(planted, ZeroTuning.identity(1, 2)):
            assert torch.equal(planted(ids).logits, plain)
        with sinklab.intervene.applied(planted, [], query_chunk=None):
            routed = planted(ids).logits  # through sinklab's attention, which ACT's edit needs
        with applied(planted, ACT(((0, 0), (0, 1)), threshold=1.0)):
            assert torch.equal(planted(ids).logits, routed)
        with applied(planted, ZeroTuning(((1.0, 2.0),))):
            assert not torch.equal(planted(ids).logits, plain)


def test_a_tuning_is_saved_and_loaded_as_json_and_a_bad_file_is_one_line(tmp_path):
    for tuning in (ZeroTuning(((1.0, 2.0), (0.5, 1.0))), ACT(((1, 0), (0, 1)), beta=0.3)):
        assert load_tuning(save_tuning(tuning, tmp_path / "t.json")) == tuning
    (tmp_path / "bad.json").write_text('{"method": "mystery"}')
    with pytest.raises(SinklabError, match="not a sinklab tuning"):
        load_tuning(tmp_path / "bad.json")


@pytest.mark.parametrize(
    "content,message",
    [
        ({"examples": [{"input": "x", "target": "y"}]}, "no 'target_scores'"),
        ({"name": "x"}, "no 'examples' list"),
        ({"examples": [{"input": "x", "target_scores": {"a": 1, "b": 1}}]}, "2 best choices"),
    ],
)
def test_a_task_file_not_in_big_benchs_multiple_choice_format_is_one_line(tmp_path, content, message):
    path = tmp_path / "t" / "task.json"
    path.parent.mkdir()
    path.write_text(json.dumps(content))
    with pytest.raises(SinklabError, match=message):
        read_task(str(path))


def test_a_split_too_small_and_a_tokenizer_without_bos_are_refused_before_anything_runs(tmp_path, tokenizer, planted):
    small = write_task(tmp_path / "small" / "task.json", n=10)
    with pytest.raises(SinklabError, match="usable examples"):
        sinklab.tune_model(planted, tokenizer, tasks=(str(small),), **SIZES)
    big = write_task(tmp_path / "big" / "task.json")
    no_bos = type(tokenizer)(tokenizer_object=tokenizer.backend_tokenizer, eos_token="<eos>")
    assert no_bos.bos_token_id is None
    with pytest.raises(SinklabError, match="no BOS"):
        sinklab.tune_model(planted, no_bos, tasks=(str(big),), **SIZES)


def test_the_command_writes_the_run_and_a_missing_task_is_one_line(tmp_path, tiny_model_dir, capsys):
    from sinklab.cli import main

    task = write_task(tmp_path / "tiny" / "task.json")
    out = tmp_path / "run"
    model = str(tiny_model_dir("llama"))
    assert (
        main(["tune", model, "--tasks", str(task), "--validation", "6", "--test", "8", "--method", "act", "--out", str(out)]) == 0
    )
    assert (out / "summary.json").exists() and (out / "report.html").exists() and (out / "tuning-tiny.json").exists()
    assert isinstance(load_tuning(out / "tuning-tiny.json"), ACT)
    capsys.readouterr()
    assert main(["tune", model, "--tasks", str(tmp_path / "nowhere" / "task.json"), "--out", str(tmp_path / "r2")]) == 2
    one_line_error(capsys, "no task file")
    assert not (tmp_path / "r2").exists()


@pytest.mark.parametrize(
    "command, flags, needle",
    [
        ("tune", ["--shots", "20", "--validation", "6", "--test", "8"], "model has 128 positions; give fewer --shots"),
        ("intervene", ["--accuracy-shots", "20", "--accuracy-test", "8"], "model has 128 positions; give fewer --accuracy-shots"),
        ("intervene", ["--accuracy-test", "0"], "--accuracy-test must be at least 1, got 0"),
        ("intervene", ["--accuracy-shots", "-2"], "--accuracy-shots must be at least 0, got -2"),
        ("intervene", ["--bos", "no"], "drop --bos no"),
    ],
)
def test_an_accuracy_judge_that_cannot_run_is_one_line_before_claiming(command, flags, needle, tmp_path, tiny_model_dir, capsys):
    """lm-eval would cut a prompt longer than the model's positions from the left, BOS first, and
    score a prompt other than the one the profile or the edit read; 0 test examples, negative shots
    and a run without BOS (the judge always puts it first) are refused as compress refuses them."""
    from sinklab.cli import main

    task = str(write_task(tmp_path / "tiny" / "task.json", n=100))
    out = tmp_path / "run"
    given = (
        ["--tasks", task] if command == "tune" else ["--suppress-sink", "--random-tokens", "--tokens", "16", "--accuracy", task]
    )
    assert main([command, str(tiny_model_dir("llama")), *given, *flags, "--out", str(out)]) == 2
    one_line_error(capsys, needle)
    assert not out.exists()


def test_tunings_are_checked_when_made_loaded_and_applied(tmp_path, tokenizer, planted):
    with pytest.raises(SinklabError, match="positive finite"):
        ZeroTuning(((1.0, 0.0),))
    with pytest.raises(SinklabError, match="beta"):
        ACT(((0, 0),), beta=7)
    (tmp_path / "t.json").write_text('{"method": "zerotuning", "gammas": [[1.0, -1.0]]}')
    with pytest.raises(SinklabError, match="positive finite"):
        load_tuning(tmp_path / "t.json")
    with pytest.raises(SinklabError, match="gammas for 2 layers; the model has 1"):
        with applied(planted, ZeroTuning(((2.0, 1.0), (1.0, 1.0)))):
            pass
    task = str(write_task(tmp_path / "same" / "task.json"))
    with pytest.raises(SinklabError, match="name same twice"):
        sinklab.tune_model(planted, tokenizer, tasks=(task, task), **SIZES)
