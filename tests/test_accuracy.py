"""``sinklab.accuracy``: BIG-bench task files turned into lm-eval tasks and scored on a model object,
what sinklab differentiates through agreeing with what lm-eval scores, and accuracy as a judge of
interventions (task files written here; the BIG-bench download is never used)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import VARIED_CHOICES, planted_model, scored_of, write_task
from test_lm_eval_files import files_agree
from test_tune import SIZES

import sinklab
from sinklab.accuracy import SIZES as DEFAULT_SIZES
from sinklab.accuracy import (
    SUITE,
    check_tasks,
    evaluate,
    lm_for,
    mcnemar,
    paired_bootstrap,
    questions,
    read_task,
    sizes_for,
    task_names,
)
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


def test_the_test_split_is_fixed_by_the_seed_alone_and_repeats_are_dropped(tmp_path):
    """Issue 50: neither the validation count nor the shots move the test examples (every judge of
    every command reads the same ones for a seed), a larger test split holds a smaller one, the seed
    moves them, and an example written twice is kept once (never in two splits)."""
    path = write_task(tmp_path / "fixed" / "task.json", n=60)
    data = json.loads(path.read_text())
    data["examples"] += data["examples"][:10]  # ten repeats
    path.write_text(json.dumps(data))
    task = read_task(str(path))
    assert len(task.examples) == 60
    test = task.splits(0, 5, 10, 8)["test"]
    assert task.splits(0, 9, 30, 8)["test"] == test == task.splits(0, 0, 0, 8)["test"]
    assert task.splits(0, 5, 10, 16)["test"][:8] == test
    assert task.splits(1, 5, 10, 8)["test"] != test
    assert task.splits(0, 5, 10, 8)["train"] == task.splits(0, 5, 30, 8)["train"]  # the pool from the other end
    parts = task.splits(0, 20, 20, 20)
    assert len({e.query for rows in parts.values() for e in rows}) == 60


def test_more_shots_than_the_pool_holds_is_one_line(tmp_path, tokenizer, planted):
    task = read_task(str(write_task(tmp_path / "pool" / "task.json", n=40)))
    with pytest.raises(SinklabError, match="7 shots asked for, but the shot pool holds 5 examples"):
        evaluate(lm_for(planted, tokenizer), [task], "test", 7, sizes_for(0, 8, 8))
    (scored,) = evaluate(lm_for(planted, tokenizer), [task], "test", 7, sizes_for(7, 8, 8))
    assert scored.n == 8


def test_a_users_task_files_are_named_by_their_file_or_explicitly(tmp_path, tokenizer):
    """Two subsets of one task in one folder, or two copies of one task, are told apart (issue 50)."""
    first = write_task(tmp_path / "subsets" / "first.json", n=30, name="navigate")
    second = write_task(tmp_path / "subsets" / "second.json", n=30, name="navigate")
    assert [read_task(str(p)).name for p in (first, second)] == ["first", "second"]
    copies = [write_task(tmp_path / d / "navigate" / "task.json", n=30) for d in ("a", "b")]
    assert read_task(str(copies[0])).name == "navigate"
    with pytest.raises(SinklabError, match="the tasks name navigate twice .*PATH.json:NAME"):
        check_tasks([str(p) for p in copies], tokenizer, sizes_for(0, 8, 8))
    named = check_tasks([f"{copies[0]}:nav-a", f"{copies[1]}:nav-b"], tokenizer, sizes_for(0, 8, 8))
    assert [t.name for t in named] == ["nav-a", "nav-b"]
    with pytest.raises(SinklabError, match="is not letters, digits"):
        read_task(f"{first}:two words")


@pytest.mark.parametrize("choices", [("A", "B"), VARIED_CHOICES], ids=["two-choices", "varied-counts-and-lengths"])
def test_what_sinklab_differentiates_is_what_lm_eval_scores(tmp_path, tokenizer, tiny_model_dir, choices):
    """The profile's log-likelihoods (one right-padded batch of a question's choices) are lm-eval's,
    also where the examples differ in their number of choices and the choices in their length
    (several tokens each, padded to the longest)."""
    loaded = sinklab.load_model(str(tiny_model_dir("llama")))
    task = read_task(str(write_task(tmp_path / "same" / "task.json", choices=choices)))
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


def by_choice_lm(logliks: dict):
    """An lm-eval LM that gives each choice (the continuation) a fixed log-likelihood, whatever
    the prompt and wherever the choice is listed."""
    from lm_eval.api.model import LM

    class ByChoice(LM):
        def loglikelihood(self, requests, disable_tqdm: bool = False):
            return [(logliks[r.args[1]], False) for r in requests]

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            raise NotImplementedError

        def generate_until(self, requests, disable_tqdm: bool = False):
            raise NotImplementedError

    return ByChoice()


#: The answer "A" (1 character) is the likeliest choice of every set of VARIED_CHOICES, but each set
#: holds a longer choice whose log-likelihood per character is higher: BB -1.5, BBBB -0.75, CCC -1
#: against A's -2 (acc_norm divides by the length in characters).
BY_CHOICE = {"A": -2.0, "BB": -3.0, "BBBB": -3.0, "C": -6.0, "DD": -5.0, "CCC": -3.0, "B": -6.0}


@pytest.mark.parametrize("rotations", [1, 0])
def test_an_examples_outcome_is_lm_evals_acc_not_acc_norm(tmp_path, rotations):
    """Choices of different lengths and counts (VARIED_CHOICES) with fixed log-likelihoods: acc
    (the largest log-likelihood) picks the answer A in every example and order, acc_norm (per
    character) a longer wrong choice in every one. The per-example outcomes, scores and the strict
    accuracy are acc's, lm-eval's acc_norm is 0, in one order and in every rotation. Mutation
    caught: per-example ``correct`` read from lm-eval's acc_norm instead of its acc."""
    path = write_task(tmp_path / "lengths" / "task.json", n=30, choices=VARIED_CHOICES, append_choices_to_input=True)
    (scored,) = evaluate(by_choice_lm(BY_CHOICE), [read_task(str(path))], "test", 0, sizes_for(0, 4, 12), rotations=rotations)
    assert scored.n == 12 and scored.rotations == (1 if rotations == 1 else 4)
    assert scored.correct == (True,) * 12 and scored.score == (1.0,) * 12
    assert (scored.acc, scored.acc_strict, scored.acc_norm) == (1.0, 1.0, 0.0)


def test_chance_is_the_mean_over_the_examples_of_one_over_their_choices(tmp_path):
    """Test examples with 2, 4 and 3 choices: the chance level is the mean of 1/2, 1/4 and 1/3 over
    the examples scored (hand-counted from the split), not 1 over the first example's count, in one
    order and under every rotation (where an example's docs are its rotations). Mutation caught:
    chance read from the first example only."""
    path = write_task(tmp_path / "counts" / "task.json", n=30, choices=VARIED_CHOICES, append_choices_to_input=True)
    task = read_task(str(path))
    counts = [len(e.choices) for e in task.splits(0, 0, 0, 12)["test"]]
    expected = sum(1 / c for c in counts) / len(counts)
    assert sorted(set(counts)) == [2, 3, 4] and abs(expected - 1 / counts[0]) > 0.01
    assert task.chance == pytest.approx((1 / 2 + 1 / 4 + 1 / 3) / 3)  # all 30 examples: ten of each
    for rotations in (1, 0):
        (scored,) = evaluate(by_choice_lm(BY_CHOICE), [task], "test", 0, sizes_for(0, 4, 12), rotations=rotations)
        assert scored.chance == pytest.approx(expected)


def test_the_suite_rule_on_hand_checked_cases():
    from sinklab.accuracy import Scored, above_chance, clearly_above_chance

    assert above_chance([True] * 7 + [False] * 3, 0.5) == pytest.approx(176 / 1024)
    assert above_chance([True] * 10, 0.5) == pytest.approx(0.5**10)

    def scored(right: int, n: int, chance: float) -> Scored:
        outcomes = (True,) * right + (False,) * (n - right)
        return scored_of("t", outcomes, chance)

    assert clearly_above_chance(scored(30, 40, 0.5))  # p = 0.0011
    assert not clearly_above_chance(scored(26, 40, 0.5))  # p = 0.04: above chance, not clearly
    assert not clearly_above_chance(scored(12, 40, 0.25))  # p = 0.2
    assert not clearly_above_chance(scored(401, 1000, 0.38))  # p = 0.091 (and only 0.021 above chance)


def test_the_suite_rule_needs_its_margin_beside_the_binomial_test():
    """420 right of 1,000 at chance 0.38: the exact one-sided binomial p is 0.0052 (below ALPHA
    0.01), but 0.42 is only 0.04 above chance, inside the 0.05 margin; 440 of 1,000 (p = 6e-5, 0.06
    above) passes both. Mutation caught: the rule without its margin (p alone keeps 420/1000)."""
    from sinklab.accuracy import above_chance, clearly_above_chance
    from sinklab.accuracy.suite import ALPHA, MARGIN

    def scored(right: int):
        return scored_of("t", (True,) * right + (False,) * (1000 - right), 0.38)

    assert (ALPHA, MARGIN) == (0.01, 0.05)
    assert above_chance(scored(420).correct, 0.38) == pytest.approx(0.0052308, rel=1e-4)
    assert not clearly_above_chance(scored(420))  # p < ALPHA, inside the margin
    assert above_chance(scored(440).correct, 0.38) < 1e-4 and clearly_above_chance(scored(440))


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
    paired = {
        "acc_change": {"mean": 0.1, "low": -0.2, "high": 0.3, "p_sign_flip": 0.2},
        "mcnemar": {"p": 0.04},
        "gold_loglik_change": {"mean": -1.5},
        "gold_logprob_change": {"mean": -0.5},
    }
    assert verdict_columns(paired) == {
        "acc_change": 0.1,
        "acc_change_low": -0.2,
        "acc_change_high": 0.3,
        "sign_flip_p": 0.2,
        "mcnemar_p": 0.04,
        "gold_loglik_change": -1.5,
        "gold_logprob_change": -0.5,
    }


def test_suppressing_the_planted_sink_moves_the_gold_answer_the_way_the_plant_says(tmp_path, tokenizer, planted):
    """Head 0 of the planted model reads the initial token as evidence for A: without its sink the
    model's log-likelihood of A falls and of B rises; ``intervene --accuracy`` says so, paired."""
    paths = [
        str(write_task(tmp_path / g / "task.json", gold=g, n=60)) for g in ("A", "B")
    ]  # the test split follows 40 validation examples
    result = sinklab.intervene_model(
        planted, tokenizer, [suppress_sink(0)], tokens=32, accuracy=tuple(paths), accuracy_test=8, out=tmp_path / "run"
    )
    rows = result.frame("accuracy").set_index("task")
    assert rows.loc["A", "gold_loglik_change"] < 0 < rows.loc["B", "gold_loglik_change"]
    assert (rows["n"] == 8).all() and set(rows["experiment"]) == {suppress_sink(0).label}
    judged = json.loads((tmp_path / "run" / "summary.json").read_text())["accuracy"]
    runs = {f"{r['task']}|intact": r["intact"] for r in judged} | {f"{r['task']}|{r['experiment']}": r["edited"] for r in judged}
    assert len(runs) == 4 and files_agree(tmp_path / "run", runs)  # lm-eval's files of every scored run (issue 50)


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
