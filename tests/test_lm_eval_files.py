"""Issue 50: a judge's accuracy in lm-evaluation-harness's own files (``lm_eval_results.json`` and
``samples_<task>_<run>.jsonl``, :mod:`sinklab.accuracy.lm_eval_files`): in single-order mode the
figures are ``lm_eval.simple_evaluate``'s on the same task and split, key for key; with rotations
lm-eval's figures over docs sit beside sinklab's over examples. :func:`files_agree` is the check
each judge's test (tune, intervene --accuracy, compress --accuracy) runs on its run directory."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from conftest import scored_of, write_task
from test_accuracy_rotations import position_lm

import sinklab
from sinklab.accuracy import LM_EVAL_RESULTS, Judged, LmEvalFiles, Scored, evaluate, lm_for, numbered, read_task, sizes_for
from sinklab.accuracy.harness import task_config
from sinklab.accuracy.rotations import rotated_docs
from sinklab.core.errors import SinklabError

#: Choices of different lengths in bytes: acc_norm (per byte) can part from acc.
CHOICES = ("sea", "tree", "river light field cloud", "stone wind")
#: sinklab's figures that name lm-eval's in single-order mode.
LM_EVAL_KEYS = {
    "acc": "acc,none",
    "acc_stderr": "acc_stderr,none",
    "acc_norm": "acc_norm,none",
    "acc_norm_stderr": "acc_norm_stderr,none",
}


def cycled_gold(path: Path) -> Path:
    """The task file at ``path`` with its correct choice cycling through its (sorted) choices, example
    by example, as 0, 1, 0, 2, 0, 1, 0, 3: each choice the answer of a different share of them."""
    data = json.loads(path.read_text())
    for i, example in enumerate(data["examples"]):
        choices = sorted(example["target_scores"])
        gold = (0, 1, 0, 2, 0, 1, 0, 3)[i % 8]
        example["target_scores"] = {c: int(j == gold) for j, c in enumerate(choices)}
    path.write_text(json.dumps(data))
    return path


def read_files(out: Path) -> tuple[dict, dict[str, list[dict]]]:
    """``lm_eval_results.json`` and each entry's samples lines (checked to parse as JSON)."""
    written = json.loads((Path(out) / LM_EVAL_RESULTS).read_text())
    samples = {
        name: [json.loads(line) for line in (Path(out) / entry["samples"]).read_text().splitlines()]
        for name, entry in written["sinklab"]["entries"].items()
    }
    return written, samples


def files_agree(out: Path, figures: dict[str, dict]) -> dict:
    """The run directory ``out`` holds lm-eval's files for exactly the entries of ``figures``
    (entry -> the summary's figures of that scored run: a row or a record), listed in run.json's
    files, and they agree with the summary: sinklab's figures are the summary's, lm-eval's ``acc``
    and ``acc_norm`` are the means of the samples' (one line per doc, ``n-samples`` of them), and
    where one order was asked lm-eval's four figures are sinklab's. Returns the results file."""
    written, samples = read_files(out)
    entries = written["sinklab"]["entries"]
    assert set(written["results"]) == set(entries) == set(written["configs"]) == set(written["n-samples"]) == set(figures)
    listed = json.loads((Path(out) / "run.json").read_text())["files"]
    assert LM_EVAL_RESULTS in listed
    for name, given in figures.items():
        entry, result, lines = entries[name], written["results"][name], samples[name]
        assert entry["samples"] in listed and result["alias"] == name
        n = given["n"] if "n" in given else len(given["correct"])
        assert {key: entry["figures"][key] for key in (*LM_EVAL_KEYS, "acc_strict")} == {
            key: given[key] for key in (*LM_EVAL_KEYS, "acc_strict")
        } and entry["figures"]["n"] == n
        assert len(lines) == written["n-samples"][name]["effective"] == entry["docs"] >= n
        assert result["acc,none"] == pytest.approx(statistics.fmean(line["acc"] for line in lines), abs=1e-12)
        assert result["acc_norm,none"] == pytest.approx(statistics.fmean(line["acc_norm"] for line in lines), abs=1e-12)
        if entry["orders"] == 1:
            assert {ours: result[theirs] for ours, theirs in LM_EVAL_KEYS.items()} == {ours: given[ours] for ours in LM_EVAL_KEYS}
    return written


def test_single_order_files_are_lm_evals_simple_evaluate_key_for_key(tmp_path, tiny_model_dir):
    """The untouched model in single-order mode (``rotations=1``): sinklab's judge (lm-eval's
    ``evaluate`` inside :func:`~sinklab.accuracy.evaluate`) and ``lm_eval.simple_evaluate``, given the
    same task configuration (:func:`~sinklab.accuracy.harness.task_config`), shots and fewshot seed,
    agree on every figure, count and configuration, and line by line on the samples. Mutation tried:
    writing ``acc_norm,none`` in place of ``acc,none`` (the two differ on this task)."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    loaded = sinklab.load_model(str(tiny_model_dir("llama", positions=1024)))
    task = read_task(str(cycled_gold(write_task(tmp_path / "long" / "task.json", n=40, choices=CHOICES, gold="sea"))))
    lm, shots, seed, sizes = lm_for(loaded.model, loaded.tokenizer), 2, 3, sizes_for(2, 0, 16)
    (scored,) = evaluate(lm, [task], "test", shots, sizes, seed, rotations=1)
    files = LmEvalFiles((Judged(task.name, "untouched", scored),), "tiny", seed, 1, 2)
    assert files.write(tmp_path) == ["samples_long_untouched.jsonl", LM_EVAL_RESULTS]
    ours, samples = read_files(tmp_path)

    parts = task.splits(seed, **sizes)
    docs = {part: rotated_docs(rows, 1) if part == "test" else [e.as_doc() for e in rows] for part, rows in parts.items()}
    theirs = simple_evaluate(
        model=lm, tasks=[task_config(task, docs, "test")], num_fewshot=shots, fewshot_random_seed=seed, log_samples=True,
        task_manager=TaskManager(include_defaults=False),
    )  # fmt: skip
    (name,) = theirs["results"]
    entry = "long|untouched"
    result = ours["results"][entry]
    for key in ("acc,none", "acc_stderr,none", "acc_norm,none", "acc_norm_stderr,none", "sample_len", "name"):
        assert result[key] == theirs["results"][name][key], key
    assert 0 < result["acc,none"] < 1 and result["acc,none"] != result["acc_norm,none"]  # figures a swap would show
    assert result["alias"] == entry and theirs["results"][name]["alias"] == name
    for part in ("configs", "versions", "n-shot", "higher_is_better", "n-samples"):
        assert ours[part][entry] == json.loads(json.dumps(theirs[part][name])), part
    assert ours["n-shot"][entry] == shots and ours["n-samples"][entry] == {"original": 16, "effective": 16}
    assert ours["config"]["fewshot_seed"] == theirs["config"]["fewshot_seed"] == seed
    assert [line for line in samples[entry]] == json.loads(json.dumps(theirs["samples"][name]))
    assert {key for key in ("doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "acc", "acc_norm")} <= set(
        samples[entry][0]
    )
    added = ours["sinklab"]
    assert (added["split"], added["split_rule"], added["seed"], added["rotations"]) == ("test", 2, 3, 1)
    assert added["entries"][entry]["figures"] == json.loads(json.dumps(scored.row()))
    assert Scored.from_record(added["entries"][entry]["scored"]) == scored  # the paired verdict can be recomputed


def test_with_rotations_lm_evals_figures_are_over_docs_and_sinklabs_over_examples(tmp_path):
    """Every order of three listed choices, judged by a model that always picks the first listed:
    lm-eval's ``acc,none`` and ``n-samples`` count docs (an example per order: right in one of its
    three), sinklab's figures beside them count examples (each right in 1/3 of its orders: no spread,
    none right under every order); neither overwrites the other. Mutation tried: sinklab's figures
    written into ``results`` (its standard error over examples, 0, is not lm-eval's over docs)."""
    path = write_task(tmp_path / "listed" / "task.json", n=30, choices=("A", "B", "C"), append_choices_to_input=True)
    (scored,) = evaluate(position_lm(), [read_task(str(path))], "test", 0, sizes_for(0, 0, 12))
    LmEvalFiles((Judged("listed", "intact", scored),), "planted", 0, 0, 2).write(tmp_path)
    written, samples = read_files(tmp_path)
    result, entry = written["results"]["listed|intact"], written["sinklab"]["entries"]["listed|intact"]
    assert entry["orders"] == 3 and written["n-samples"]["listed|intact"]["effective"] == 36 == len(samples["listed|intact"])
    assert result["acc,none"] == pytest.approx(statistics.fmean(line["acc"] for line in samples["listed|intact"]))
    assert entry["figures"]["acc"] == scored.acc and entry["figures"]["n"] == 12
    over_docs = statistics.stdev(line["acc"] for line in samples["listed|intact"]) / 36**0.5
    assert result["acc_stderr,none"] == pytest.approx(over_docs) and entry["figures"]["acc_stderr"] == scored.acc_stderr
    assert scored.acc == pytest.approx(1 / 3) and scored.acc_stderr == 0 == scored.acc_strict < result["acc_stderr,none"]
    assert {s["doc"]["shift"] for s in samples["listed|intact"]} == {0, 1, 2}


def test_entries_and_files_are_named_apart_and_unscored_runs_are_refused(tmp_path):
    """Two runs of one task are two entries; a label given twice is numbered; a samples file's name
    keeps letters, digits, ``.``, ``_`` and ``-`` of its entry; a Scored that lm-eval's evaluator
    did not make has no output to write (one line)."""
    assert numbered(["a", "b", "a", "a"]) == ["a", "b", "a #2", "a #3"]
    bare = scored_of("nav", [True, False])
    with pytest.raises(SinklabError, match=r"^nav\|tuned: its scores carry no lm-eval output"):
        LmEvalFiles((Judged("nav", "tuned", bare),), "m", 0, 0, 2).write(tmp_path)
    with pytest.raises(SinklabError, match=r"two scored runs are named alike: nav\|x, nav\|x"):
        LmEvalFiles((Judged("nav", "x", bare), Judged("nav", "x", bare)), "m", 0, 0, 2).layout()
    runs = (("a/b", "suppress_sink (score bias -inf at 0)"), ("a/b", "dense:0/0"), ("a_b", "dense_0_0"))
    files = LmEvalFiles(tuple(Judged(task, run, bare) for task, run in runs), "m", 0, 0, 2).samples_files()
    assert list(files.values()) == [
        "samples_a_b_suppress_sink_score_bias_-inf_at_0.jsonl",
        "samples_a_b_dense_0_0.jsonl",
        "samples_a_b_dense_0_0-2.jsonl",
    ]
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_num_fewshot_is_lm_evals_spelling_of_tunes_shots():
    from sinklab import cli

    parse = cli.build_parser().parse_args
    assert parse(["tune", "--num-fewshot", "3"]).shots == parse(["tune", "--num_fewshot", "3"]).shots == 3
    (action,) = [a for a in cli.build_parser()._subparsers._group_actions[0].choices["tune"]._actions if a.dest == "shots"]
    assert "--num-fewshot, --num_fewshot: lm-eval's spelling, accepted as an alias" in action.help
