"""``sinklab.accuracy``: BIG-bench task files turned into lm-eval tasks and scored on a model object,
what sinklab differentiates through agreeing with what lm-eval scores, and accuracy as a judge of
interventions (task files written here; the BIG-bench download is never used)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import planted_model, write_task
from test_tune import SIZES

import sinklab
from sinklab.accuracy import SIZES as DEFAULT_SIZES
from sinklab.accuracy import evaluate, lm_for, mcnemar, paired_bootstrap, questions, read_task
from sinklab.accuracy.bigbench import task_file
from sinklab.core.errors import SinklabError
from sinklab.intervene import suppress_sink
from sinklab.tune.profile import choice_logliks

SPLITS = {**DEFAULT_SIZES, **SIZES}


@pytest.fixture
def planted(tokenizer):
    return planted_model(tokenizer)


def test_the_prompt_follows_big_benchs_convention_and_bos_comes_first(tmp_path, tokenizer, planted):
    path = write_task(tmp_path / "conv" / "task.json", task_prefix="Decide.\n", append_choices_to_input=True)
    task = read_task(str(path))
    assert (
        task.examples[0].query
        == "\nQ: " + json.loads(path.read_text())["examples"][0]["input"] + "\n  choice: A\n  choice: B\nAnswer:"
    )
    context, continuation = questions(lm_for(planted, tokenizer), task, "test", 1, SPLITS)[0].pairs[0]
    text = tokenizer.decode(context[1:])
    assert context[0] == tokenizer.bos_token_id and text.startswith("Decide.\n\nQ: ") and text.count("Answer:") == 2
    assert tokenizer.decode(continuation) == "A"


def test_what_sinklab_differentiates_is_what_lm_eval_scores(tmp_path, tokenizer, tiny_model_dir):
    loaded = sinklab.load_model(str(tiny_model_dir("llama")))
    task = read_task(str(write_task(tmp_path / "same" / "task.json")))
    lm = lm_for(loaded.model, loaded.tokenizer)
    (scored,) = evaluate(lm, [task], "test", 2, SPLITS)
    with torch.no_grad():
        ours = [choice_logliks(loaded.model, q) for q in questions(lm, task, "test", 2, SPLITS)]
    gold = torch.tensor([float(q[0]) for q in ours])  # gold is A in write_task
    assert torch.allclose(gold, torch.tensor(scored.gold_loglik), atol=1e-4)
    assert scored.correct == tuple(bool(q[0] > q[1]) for q in ours)


def test_the_paired_statistics_on_hand_checked_cases():
    assert mcnemar([False] * 6, [True] * 6) == {"gained": 6, "lost": 0, "p": 2 * 0.5**6}
    assert mcnemar([True, False, True], [True, False, True])["p"] == 1.0
    change = paired_bootstrap([0.0] * 50, [1.0] * 25 + [0.0] * 25)
    assert change["mean"] == 0.5 and change["low"] < 0.5 < change["high"] and change["high"] - change["low"] < 0.4


def test_suppressing_the_planted_sink_moves_the_gold_answer_the_way_the_plant_says(tmp_path, tokenizer, planted):
    """Head 0 of the planted model reads the initial token as evidence for A: without its sink the
    model's log-likelihood of A falls and of B rises; ``intervene --accuracy`` says so, paired."""
    paths = [
        str(write_task(tmp_path / g / "task.json", gold=g, n=60)) for g in ("A", "B")
    ]  # the test split follows 40 validation examples
    result = sinklab.intervene_model(planted, tokenizer, [suppress_sink(0)], tokens=32, accuracy=tuple(paths), accuracy_test=8)
    rows = result.frame("accuracy").set_index("task")
    assert rows.loc["A", "gold_loglik_change"] < 0 < rows.loc["B", "gold_loglik_change"]
    assert (rows["n"] == 8).all() and set(rows["experiment"]) == {suppress_sink(0).label}


def test_unknown_tasks_and_bad_folders_are_one_line_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("SINKLAB_BIGBENCH", str(tmp_path / "empty"))
    with pytest.raises(SinklabError, match="no finished set of task files"):
        task_file("navigate")
    (tmp_path / "bb" / "navigate").mkdir(parents=True)
    (tmp_path / "bb" / ".complete").write_text("x")
    monkeypatch.setenv("SINKLAB_BIGBENCH", str(tmp_path / "bb"))
    with pytest.raises(SinklabError, match="no BIG-bench task named 'navigat'"):
        task_file("navigat")
    with pytest.raises(SinklabError, match="not a BIG-bench task name"):
        task_file("../x")
