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
    with pytest.raises(SinklabError, match="names same twice"):
        sinklab.tune_model(planted, tokenizer, tasks=(task, task), **SIZES)
