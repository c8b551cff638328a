"""``sinklab.accuracy``: BIG-bench task files turned into lm-eval tasks and scored on a model object,
what sinklab differentiates through agreeing with what lm-eval scores, and accuracy as a judge of
interventions (task files written here; the BIG-bench download is never used)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import planted_model, write_task
from test_tune import SIZES

import sinklab
from sinklab.accuracy import SIZES as DEFAULT_SIZES
from sinklab.accuracy import SUITE, evaluate, lm_for, mcnemar, paired_bootstrap, questions, read_task, task_names
from sinklab.accuracy.bigbench import task_file
from sinklab.accuracy.paired import BOOTSTRAP_DRAWS, verdict_columns
from sinklab.core.errors import SinklabError
from sinklab.intervene import suppress_sink
from sinklab.tune.profile import choice_logliks

SPLITS = {**DEFAULT_SIZES, **SIZES}


@pytest.fixture
def planted(tokenizer):
    return planted_model(tokenizer)


def test_the_prompt_follows_big_benchs_convention_and_bos_comes_first(tmp_path, tokenizer, planted):
    """BIG-bench's prompt: the task prefix once, then shots and the query joined by the task's
    separator; choices listed sorted then permuted per example (a stable order that is not the
    file's, which here always puts the answer first), the answer's index following it."""
    path = write_task(
        tmp_path / "conv" / "task.json", choices=("A", "B", "C"), task_prefix="Decide.\n", append_choices_to_input=True,
        few_shot_example_separator=" || ",
    )  # fmt: skip
    task, raw = read_task(str(path)), json.loads(path.read_text())["examples"]
    for example, given in zip(task.examples, raw):
        listed = "".join("\n  choice: " + c for c in example.choices)
        assert example.query == "\nQ: " + given["input"] + listed + "\nAnswer:" and example.choices[example.gold] == "A"
    assert read_task(str(path)) == task and {e.gold for e in task.examples} == {0, 1, 2}
    context, continuation = questions(lm_for(planted, tokenizer), task, "test", 1, SPLITS)[0].pairs[0]
    text = tokenizer.decode(context[1:])
    assert context[0] == tokenizer.bos_token_id and text.startswith("Decide.\n\nQ: ") and text.count(" || ") == 1
    assert text.count("Answer:") == 2 and len(continuation) == 1


def test_the_splits_are_disjoint_and_a_tuning_reads_the_validation_split(tmp_path, tokenizer, planted):
    task = read_task(str(write_task(tmp_path / "s" / "task.json", n=40)))
    splits = task.splits(3, 5, 10, 20)
    inputs = {part: [e.query for e in rows] for part, rows in splits.items()}
    assert sum(len(v) for v in inputs.values()) == len(set().union(*inputs.values())) == 35
    asked = questions(lm_for(planted, tokenizer), task, "validation", 0, {"shots": 5, "validation": 10, "test": 20}, seed=3)
    assert [tokenizer.decode(q.pairs[0][0][1:]) for q in asked] == inputs["validation"]


def test_what_sinklab_differentiates_is_what_lm_eval_scores(tmp_path, tokenizer, tiny_model_dir):
    loaded = sinklab.load_model(str(tiny_model_dir("llama")))
    task = read_task(str(write_task(tmp_path / "same" / "task.json")))
    lm = lm_for(loaded.model, loaded.tokenizer)
    (scored,) = evaluate(lm, [task], "test", 2, SPLITS)
    with torch.no_grad():
        asked = questions(lm, task, "test", 2, SPLITS)
        ours = [choice_logliks(loaded.model, q) for q in asked]
    gold = torch.tensor([float(q[a.gold]) for q, a in zip(ours, asked)])
    assert torch.allclose(gold, torch.tensor(scored.gold_loglik), atol=1e-4)
    assert scored.correct == tuple(bool(int(q.argmax()) == a.gold) for q, a in zip(ours, asked))


def test_chance_and_the_standard_error_are_the_tasks_own(tmp_path, tokenizer, planted):
    """Three choices: chance 1/3; lm-eval's standard error of acc is sqrt(p (1 - p) / (n - 1))."""
    task = read_task(str(write_task(tmp_path / "three" / "task.json", choices=("A", "B", "C"), gold="B", n=60)))
    (scored,) = evaluate(lm_for(planted, tokenizer), [task], "test", 0, SPLITS)
    assert scored.chance == pytest.approx(1 / 3) and scored.n == 8
    assert scored.acc_stderr == pytest.approx((scored.acc * (1 - scored.acc) / (scored.n - 1)) ** 0.5)


def test_the_suite_rule_on_hand_checked_cases():
    from sinklab.accuracy import Scored, above_chance, clearly_above_chance

    assert above_chance([True] * 7 + [False] * 3, 0.5) == pytest.approx(176 / 1024)
    assert above_chance([True] * 10, 0.5) == pytest.approx(0.5**10)

    def scored(right: int, n: int, chance: float) -> Scored:
        outcomes = (True,) * right + (False,) * (n - right)
        return Scored("t", "validation", 0, chance, right / n, 0.0, right / n, 0.0, outcomes, (0.0,) * n, (0.0,) * n)

    assert clearly_above_chance(scored(30, 40, 0.5))  # p = 0.0011
    assert not clearly_above_chance(scored(26, 40, 0.5))  # p = 0.04: above chance, not clearly
    assert not clearly_above_chance(scored(12, 40, 0.25))  # p = 0.2
    assert not clearly_above_chance(scored(401, 1000, 0.38))  # p < 0.01, but only 0.021 above chance


def test_the_paired_statistics_on_hand_checked_cases():
    assert mcnemar([False] * 6, [True] * 6) == {"gained": 6, "lost": 0, "p": 2 * 0.5**6}
    assert mcnemar([True, False, True], [True, False, True])["p"] == 1.0
    change = paired_bootstrap([0.0] * 50, [1.0] * 25 + [0.0] * 25)
    # the mean of 50 draws of 0 or 1 at p = 1/2: standard error 0.071, a 95 % interval of about +-0.14
    assert change["mean"] == 0.5 and 0.22 < change["high"] - change["low"] < 0.34
    # the interval is the 2.5th and 97.5th percentiles of the seeded resampled means, around the mean
    diff = np.array([1.0] * 25 + [0.0] * 25)
    means = diff[np.random.default_rng(0).integers(0, 50, size=(BOOTSTRAP_DRAWS, 50))].mean(axis=1)
    assert (change["low"], change["high"]) == tuple(np.quantile(means, [0.025, 0.975]))
    assert change["low"] < change["mean"] < change["high"]


def test_a_verdicts_columns_keep_each_figure_in_its_own_place():
    """Mutation caught: ``acc_change_low`` reading the interval's high end."""
    paired = {"acc_change": {"mean": 0.1, "low": -0.2, "high": 0.3}, "mcnemar": {"p": 0.04}, "gold_loglik_change": {"mean": -1.5}}
    assert verdict_columns(paired) == {
        "acc_change": 0.1,
        "acc_change_low": -0.2,
        "acc_change_high": 0.3,
        "mcnemar_p": 0.04,
        "gold_loglik_change": -1.5,
    }


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


def test_the_bench_reads_dependence_and_payoff_from_the_judges_runs(tmp_path, tokenizer, planted):
    """sinks-v2's accuracy tasks read what the judges wrote: on the planted model (gold B, the sink
    not needed) suppressing the sink costs no accuracy; ZeroTuning's gain is tuned minus untouched."""
    from sinklab.bench import TASKS

    path = str(write_task(tmp_path / "B" / "task.json", gold="B", n=60))
    judged = sinklab.intervene_model(planted, tokenizer, [suppress_sink(0)], tokens=32, accuracy=(path,), accuracy_test=8)
    dependence = TASKS["accuracy_dependence"].read(judged)["metrics"]
    assert dependence["acc_intact"]["value"] == 1.0 and dependence["acc_ratio"]["value"] == 1.0
    assert dependence["gold_loglik_change"]["value"] > 0
    tuned = sinklab.tune_model(planted, tokenizer, tasks=(path,), mode="unsupervised", **SIZES)
    payoff = TASKS["zerotuning_payoff"].read(tuned)["metrics"]
    row = tuned.frame().iloc[0]
    assert payoff["acc_gain"]["value"] == pytest.approx(row["acc_tuned"] - row["acc_untouched"])


def test_only_the_task_files_of_the_sdist_are_kept(tmp_path):
    """What fetch keeps of the bigbench sdist: every benchmark_tasks/**/task.json at its task's path
    (subtasks included), nothing else; a path that climbs out of the folder is refused."""
    import io
    import tarfile

    from sinklab.accuracy.bigbench import _extract_task_files

    def sdist(path, members):
        with tarfile.open(path, "w:gz") as tar:
            for name, text in members.items():
                data = text.encode()
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return path

    root = "bigbench-1.0.0/bigbench/benchmark_tasks/"
    good = sdist(
        tmp_path / "a.tar.gz",
        {root + "navigate/task.json": "{}", root + "abc/sub/task.json": "[]", root + "navigate/README.md": "x"},
    )
    _extract_task_files(good, tmp_path / "out")
    kept = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert kept == ["abc/sub/task.json", "navigate/task.json"] and not (tmp_path / "out" / "navigate" / "README.md").exists()
    bad = sdist(tmp_path / "b.tar.gz", {root + "../../evil/task.json": "{}"})
    with pytest.raises(SinklabError, match="unsafe path"):
        _extract_task_files(bad, tmp_path / "out2")


def test_suite_in_a_task_list_stands_for_the_suites_tasks():
    """``--accuracy suite`` (intervene, compress) and ``--tasks suite,navigate`` (tune): the suite's
    tasks in its place, the other names kept in order."""
    assert task_names("suite") == SUITE and task_names(" navigate , suite,snarks,") == ("navigate", *SUITE, "snarks")
