"""``sinklab bench`` as a user runs it: models by folder and by .gguf file, one job per (model, task)
kept and resumed, one results file per model valid against its schema, the leaderboard as tables,
CSV and a page, ``--compare`` across runs, and the notebook function giving the command's results.
(What each task measures is tested on planted models in ``test_bench_tasks.py``.)"""

from __future__ import annotations

import csv
import json
import shutil

import pytest
from conftest import one_line_error

import sinklab
from sinklab import cli
from sinklab.bench import TASKS
from sinklab.core.errors import SinklabError
from sinklab.core.schemas import validate

TASK_ARGS = ["--tasks", "sink_rate,suppressed_sink", "--limit", "quick", "--quiet"]


@pytest.fixture(scope="module")
def two_models(tiny_model_dir, tmp_path_factory):
    """Two tiny model folders, the second under a name a page must escape."""
    odd = tmp_path_factory.mktemp("odd") / "<i>qwen</i>"
    shutil.copytree(tiny_model_dir("qwen2"), odd)
    return [str(tiny_model_dir("llama")), str(odd)]


@pytest.fixture(scope="module")
def bench_run(two_models, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "run"
    assert cli.main(["bench", *two_models, *TASK_ARGS, "--out", str(out)]) == 0
    return out


def results_files(out):
    return sorted((out / "results").glob("*.json"))


def test_one_results_file_per_model_valid_against_its_schema(bench_run, two_models):
    """Each file holds what the issue lists: task versions and configurations, sinklab's version
    and commit, the model's revision, dtype and device, seeds, wall time, metrics with spreads.
    Mutation tried: a task entry without its configuration fails the schema."""
    files = results_files(bench_run)
    assert len(files) == 2
    for path, model in zip(files, two_models):
        results = json.loads(path.read_text())
        validate(results)
        assert results["model"] == model and results["dtype"] == "float32" and results["device"] == "cpu"
        assert results["versions"]["sinklab"] == sinklab.__version__ and "torch" in results["versions"]
        assert set(results["tasks"]) == {"sink_rate", "suppressed_sink"}
        assert results["seeds"] == {"sink_rate": 0, "suppressed_sink": 0}
        entry = results["tasks"]["sink_rate"]
        assert entry["version"] == TASKS["sink_rate"].version and entry["config"]["inputs"]["tokens"] == 64
        assert entry["metrics"]["sink_rate"]["n"] == 3 * 4 if "llama" in model else True  # tiny llama: 3 layers x 4 heads
        broken = {**results, "tasks": {"sink_rate": {k: v for k, v in entry.items() if k != "config"}}}
        with pytest.raises(SinklabError, match="config"):
            validate(broken)


def test_the_leaderboard_as_frames_csv_and_a_sortable_escaped_page(bench_run):
    result = sinklab.load_result(bench_run)
    board = result.frame()
    assert board.equals(result.frame("leaderboard")) and len(board) == 2
    assert {"sink_rate/sink_rate", "suppressed_sink/ppl_ratio", "wall_s"} <= set(board.columns)
    metrics = result.frame("metrics")
    assert set(metrics.task) == {"sink_rate", "suppressed_sink"} and {"value", "spread", "n", "better"} <= set(metrics.columns)
    with open(bench_run / "leaderboard.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert float(rows[0]["suppressed_sink/ppl_ratio"]) == pytest.approx(board["suppressed_sink/ppl_ratio"][0])
    page = (bench_run / "report.html").read_text()
    assert "sinklabSort(this)" in page and "&lt;i&gt;qwen&lt;/i&gt;" in page and "<i>qwen</i>" not in page


def test_finished_jobs_are_kept_and_reused_and_a_changed_task_is_measured_again(bench_run, two_models, tmp_path):
    """A run with one more task measures only that task; a kept job whose configuration no longer
    matches the task's (edited here, as a sinklab whose task changed would find it) is measured
    again. (A run that would drop a model, a task or the --limit is refused: test_bench_out.py.)"""
    out = tmp_path / "run"
    shutil.copytree(bench_run, out)
    before = json.loads(results_files(out)[0].read_text())["tasks"]["sink_rate"]
    args = ["bench", *two_models, "--limit", "quick", "--quiet", "--out", str(out), "--tasks", "sink_rate,suppressed_sink"]
    assert cli.main([*args[:-1], f"{args[-1]},first_token_mass"]) == 0
    after = json.loads(results_files(out)[0].read_text())
    assert after["tasks"]["sink_rate"] == before and "first_token_mass" in after["tasks"]
    job = next(p for p in (out / "jobs").glob("*/sink_rate.json") if json.loads(p.read_text())["model"] == two_models[0])
    kept = json.loads(job.read_text())
    kept["entry"]["config"]["inputs"]["batch"] += 1
    job.write_text(json.dumps(kept))
    assert cli.main([*args[:-1], f"{args[-1]},first_token_mass,sink_value_norm"]) == 0
    again = json.loads(results_files(out)[0].read_text())["tasks"]["sink_rate"]
    assert again["config"] == before["config"] and again["wall_s"] != before["wall_s"]


def test_compare_merges_runs_and_refuses_results_that_do_not_line_up(bench_run, tmp_path, capsys):
    other = tmp_path / "elsewhere"
    shutil.copytree(bench_run, other)
    for path in results_files(other):  # measured again elsewhere: the same values, its own wall time
        path.write_text(json.dumps({**json.loads(path.read_text()), "wall_s": 1.0}))
    merged = tmp_path / "merged"
    assert cli.main(["bench", "--compare", str(bench_run), str(other), "--out", str(merged), "--quiet"]) == 0
    board = sinklab.load_result(merged).frame("leaderboard")
    assert len(board) == 4 and board.label.str.endswith(f"{other}]").sum() == 2
    assert sinklab.compare_bench([bench_run]).frame("leaderboard").shape[0] == 2

    path = results_files(other)[0]
    results = json.loads(path.read_text())
    results["tasks"]["sink_rate"]["version"] += 1
    path.write_text(json.dumps(results))
    assert cli.main(["bench", "--compare", str(bench_run), str(other), "--out", str(tmp_path / "m2"), "--quiet"]) == 2
    assert "measured at version 1, 2; this sinklab's is 1" in one_line_error(capsys, "sink_rate")
    with pytest.raises(SinklabError, match="measured at version 2; this sinklab's is 1"):
        sinklab.compare_bench([path])  # alone it agrees with itself, but not with this sinklab's task
    del results["seeds"]
    path.write_text(json.dumps(results))
    assert cli.main(["bench", "--compare", str(other), "--out", str(tmp_path / "m3"), "--quiet"]) == 2
    assert "seeds" in one_line_error(capsys, "schema")


def test_bad_input_is_one_line(capsys, two_models, tmp_path):
    assert cli.main(["bench", two_models[0], "--tasks", "sink_rate,nope", "--out", str(tmp_path / "a"), "--quiet"]) == 2
    one_line_error(capsys, "nope", "sinks-v1")
    assert cli.main(["bench", two_models[0], "--compare", str(tmp_path), "--out", str(tmp_path / "b"), "--quiet"]) == 2
    one_line_error(capsys, "--compare")
    assert cli.main(["bench", "--compare", str(tmp_path / "missing"), "--out", str(tmp_path / "c"), "--quiet"]) == 2
    one_line_error(capsys, "missing")
    assert not (tmp_path / "a").exists() or not (tmp_path / "a" / "summary.json").exists()
    missing = str(tmp_path / "no-such-model")  # a model that does not load is an error, never "not applicable"
    assert cli.main(["bench", missing, "--tasks", "sink_rate", "--limit", "quick", "--out", str(tmp_path / "d"), "--quiet"]) == 2
    one_line_error(capsys, "no-such-model")
    assert not (tmp_path / "d" / "summary.json").exists()


def test_the_notebook_function_gives_the_commands_metrics(bench_run, two_models):
    """``sinklab.bench_models`` runs the same configuration in memory: every metric equal."""
    in_memory = sinklab.bench_models(two_models[:1], tasks=("sink_rate", "suppressed_sink"), limit="quick")
    written = json.loads(results_files(bench_run)[0].read_text())
    for name, entry in in_memory.summary["models"][0]["tasks"].items():
        assert entry["metrics"] == written["tasks"][name]["metrics"] and entry["config"] == written["tasks"][name]["config"]


def test_a_gguf_file_is_a_model_like_any_other(tmp_path):
    """The default model's .gguf named explicitly (what a user with another .gguf does)."""
    gguf = sinklab.default_gguf_path()
    result = sinklab.bench_models([str(gguf)], tasks=("sink_rate",), limit="quick", out=tmp_path / "gguf")
    results = json.loads(results_files(tmp_path / "gguf")[0].read_text())
    assert results["model"] == str(gguf) and results["model_name"] == gguf.name
    assert result.frame("leaderboard")["sink_rate/sink_rate"][0] > 0.5  # SmolLM2 sinks (0.74 in BENCHMARKS.md)


def test_a_task_the_model_cannot_run_as_defined_says_why_and_the_others_still_count(two_models, tmp_path):
    """The tiny llama has 128 positions: the quick stream (1,024 tokens) does not apply. Mutation
    tried: the positions check removed (the stream runs past them and reports a ratio)."""
    out = tmp_path / "na"
    assert (
        cli.main(["bench", two_models[0], "--tasks", "sink_rate,streaming", "--limit", "quick", "--quiet", "--out", str(out)])
        == 0
    )
    results = json.loads(results_files(out)[0].read_text())
    streaming = results["tasks"]["streaming"]
    assert streaming["not_applicable"] == "it reads 1024 positions and the model has 128" and streaming["metrics"] == {}
    assert results["tasks"]["sink_rate"]["not_applicable"] is None and results["tasks"]["sink_rate"]["metrics"]
    board = sinklab.load_result(out).frame()
    assert board["streaming/ppl_ratio_sinks_0"].isna().all() and board["sink_rate/sink_rate"].notna().all()
    assert ">n/a</td>" in (out / "report.html").read_text()


def test_a_kept_job_is_not_reused_for_another_model_saved_at_the_same_path(tiny_model_dir, tmp_path):
    """A run with one more task reuses the kept jobs of the same model files only. (The same
    command on a finished run reads it back, as every command does with its --out.)"""
    model, out = tmp_path / "model", tmp_path / "run"
    shutil.copytree(tiny_model_dir("llama"), model)
    args = ["bench", str(model), "--limit", "quick", "--quiet", "--out", str(out), "--tasks"]
    assert cli.main([*args, "sink_rate"]) == 0
    first = json.loads(results_files(out)[0].read_text())["tasks"]["sink_rate"]
    assert cli.main([*args, "sink_rate,first_token_mass"]) == 0
    assert json.loads(results_files(out)[0].read_text())["tasks"]["sink_rate"] == first  # the same files: reused
    shutil.rmtree(model)
    shutil.copytree(tiny_model_dir("qwen2"), model)
    assert cli.main([*args, "sink_rate,first_token_mass,sink_value_norm"]) == 0
    second = json.loads(results_files(out)[0].read_text())["tasks"]["sink_rate"]
    assert second["wall_s"] != first["wall_s"]  # measured again (mutation: no fingerprint: read back)


def test_each_task_records_where_it_ran(bench_run):
    from sinklab.core.provenance import source_revision

    results = json.loads(results_files(bench_run)[0].read_text())
    here = source_revision()
    for entry in results["tasks"].values():
        assert entry["where"]["git"] == here and entry["where"]["versions"]["sinklab"] == sinklab.__version__
    assert results["git"] == here


def test_compare_refuses_other_suites_limits_settings_and_unknown_tasks(bench_run, tmp_path, capsys):
    def edited(name, change):
        run = tmp_path / name
        shutil.copytree(bench_run, run)
        path = results_files(run)[0]
        results = json.loads(path.read_text())
        change(results)
        path.write_text(json.dumps(results))
        return run

    full = edited("full", lambda r: r.update(limit=None))
    assert cli.main(["bench", "--compare", str(bench_run), str(full), "--out", str(tmp_path / "o1"), "--quiet"]) == 2
    one_line_error(capsys, "different limits")
    other = edited("other", lambda r: r["tasks"]["sink_rate"]["config"]["inputs"].update(batch=2))
    assert cli.main(["bench", "--compare", str(bench_run), str(other), "--out", str(tmp_path / "o2"), "--quiet"]) == 2
    one_line_error(capsys, "sink_rate ran with different settings")
    unknown = edited("unknown", lambda r: r["tasks"].update(mystery=r["tasks"]["sink_rate"]))
    assert cli.main(["bench", "--compare", str(unknown), "--out", str(tmp_path / "o3"), "--quiet"]) == 2
    one_line_error(capsys, "mystery is not known")


def test_the_published_leaderboard_files_validate_and_merge():
    """benchmarks/leaderboard/sinks-v1/ (BENCHMARKS.md 12) stays readable by this sinklab; sinks-v2's
    superseded file is refused."""
    from pathlib import Path

    files = sorted((Path(__file__).parent.parent / "benchmarks" / "leaderboard" / "sinks-v1").glob("*.json"))
    assert len(files) == 2
    board = sinklab.compare_bench(files).frame()
    rates = dict(zip(board.label, board["sink_rate/sink_rate"]))
    assert rates == {"smollm2": pytest.approx(0.7556, abs=1e-4), "runs/sinklab-bytes-llama": 0.0}
    # sinks-v2's file was judged on splits drawn by rule 1 (issue 50): superseded, and refused beside today's tasks
    (v2,) = (Path(__file__).parent.parent / "benchmarks" / "leaderboard" / "superseded" / "sinks-v2-split-rule-1").glob("*.json")
    with pytest.raises(SinklabError, match="task accuracy_dependence was measured at version 1; this sinklab's is 3"):
        sinklab.compare_bench([v2])


@pytest.mark.integration
def test_the_jobs_run_through_an_engine_and_give_the_pools_results(bench_run, two_models, tmp_path):
    """One job per (model, task) through submitit (its local cluster: the Slurm path, here), the
    same metrics as the local pool's run, each job's provenance from its own process. One task:
    each job more costs a process's start and torch's import, and launch()'s handling of several
    jobs has its own tests (test_launchers)."""
    config = tmp_path / "launcher.json"
    config.write_text(json.dumps({"launcher": "slurm", "cluster": "local", "timeout_min": 10}))
    out = tmp_path / "slurm"
    one_task = ["--tasks", "sink_rate", *TASK_ARGS[2:]]
    assert cli.main(["bench", two_models[0], *one_task, "--out", str(out), "--launcher-config", str(config)]) == 0
    assert len(list((out / "launcher").glob("*"))) > 0  # submitit's logs: the jobs ran as its array
    through = json.loads(results_files(out)[0].read_text())["tasks"]
    pooled = json.loads(results_files(bench_run)[0].read_text())["tasks"]
    assert list(through) == ["sink_rate"]
    assert {name: entry["metrics"] for name, entry in through.items()} == {name: pooled[name]["metrics"] for name in through}
