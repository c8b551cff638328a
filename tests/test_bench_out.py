"""What a bench run directory and ``--compare`` may never do silently (issue 39): drop what a run
measured, leave a refused comparison's ``--out`` claimed ("running"), merge one model's different
values at one task version, or refuse a file without naming it."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import one_line_error

import sinklab
from sinklab import cli
from sinklab.core.errors import SinklabError

QUICK = ["--limit", "quick", "--quiet"]


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return str(tiny_model_dir("llama"))


@pytest.fixture(scope="module")
def two_tasks(model, tmp_path_factory):
    """A finished quick run of two tasks on the tiny llama."""
    out = tmp_path_factory.mktemp("bench") / "run"
    assert cli.main(["bench", model, "--tasks", "sink_rate,suppressed_sink", *QUICK, "--out", str(out)]) == 0
    return out


def snapshot(run) -> dict:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def results_file(run):
    return next((run / "results").glob("*.json"))


def test_a_run_that_would_drop_a_task_is_refused_and_the_directory_kept(two_tasks, model, tmp_path):
    """bench_models(tasks=("sink_rate",)) on a finished two-task run returned in 0.3 s and rewrote
    results/, leaderboard.csv, summary.json and report.html down to one task. Now: refused in one
    line naming what it would drop and --overwrite, every file as it was; so are another --limit
    and a model left out."""
    run = tmp_path / "run"
    shutil.copytree(two_tasks, run)
    before = snapshot(run)
    with pytest.raises(SinklabError, match=r"would drop results of \(tasks measured there and left out now: suppressed_sink\)"):
        sinklab.bench_models([model], tasks=("sink_rate",), limit="quick", out=run)
    with pytest.raises(SinklabError, match="limit: 'quick' there, None now.*--overwrite"):
        sinklab.bench_models([model], tasks=("sink_rate", "suppressed_sink"), out=run)
    with pytest.raises(SinklabError, match="models measured there and left out now"):
        sinklab.bench_models([None], tasks=("sink_rate", "suppressed_sink"), limit="quick", out=run)
    assert snapshot(run) == before


def test_a_run_that_adds_a_task_reuses_what_was_measured_and_overwrite_replaces(two_tasks, model, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(two_tasks, run)
    kept = json.loads(results_file(run).read_text())["tasks"]
    args = ["bench", model, "--tasks", "sink_rate,suppressed_sink,first_token_mass", *QUICK, "--out", str(run)]
    assert cli.main(args) == 0
    grown = json.loads(results_file(run).read_text())["tasks"]
    assert set(grown) == {"sink_rate", "suppressed_sink", "first_token_mass"}
    assert {name: grown[name] for name in kept} == kept  # measured once, kept as measured
    assert cli.main(["bench", model, "--tasks", "sink_rate", *QUICK, "--out", str(run)]) == 2
    one_line_error(capsys, "tasks measured there and left out now", "suppressed_sink", "first_token_mass", "--overwrite")
    assert cli.main(["bench", model, "--tasks", "sink_rate", *QUICK, "--out", str(run), "--overwrite"]) == 0
    assert set(json.loads(results_file(run).read_text())["tasks"]) == {"sink_rate"}


def edited(run, tmp_path, name, change):
    """A copy of the bench run ``run`` whose results file ``change`` edited."""
    copy = tmp_path / name
    shutil.copytree(run, copy)
    path = results_file(copy)
    results = json.loads(path.read_text())
    change(results)
    path.write_text(json.dumps(results))
    return copy


def bump_version(results):
    results["tasks"]["sink_rate"]["version"] += 1


def other_limit(results):
    results["limit"] = None


def other_settings(results):
    results["tasks"]["sink_rate"]["config"]["inputs"]["batch"] = 2


def unknown_task(results):
    results["tasks"]["mystery"] = results["tasks"]["sink_rate"]


def no_seeds(results):
    del results["seeds"]


def bad_value(results):
    results["tasks"]["sink_rate"]["metrics"]["sink_rate"]["value"] = "high"


@pytest.mark.parametrize("change", [bump_version, other_limit, other_settings, unknown_task, no_seeds, bad_value])
def test_a_refused_comparison_names_a_file_and_leaves_out_untouched(change, two_tasks, tmp_path, capsys):
    """Every refused --compare left config.json and a run.json saying "running" in --out (8 of 8
    refusals tried); a value the schema refuses was reported without its file."""
    other = edited(two_tasks, tmp_path, "other", change)
    out = tmp_path / "merged"
    assert cli.main(["bench", "--compare", str(two_tasks), str(other), "--out", str(out), "--quiet"]) == 2
    one_line_error(capsys, str(other))
    assert not out.exists()


def test_one_model_with_two_values_at_one_task_version_is_refused_naming_both_files(two_tasks, tmp_path, capsys):
    """The same model (name, revision, dtype, device) and task at the same version with values 4 %
    apart (the kv_2bit case) cannot mix; identical results, or values within rounding, still merge."""
    moved = edited(two_tasks, tmp_path, "moved", lambda r: r["tasks"]["suppressed_sink"]["metrics"]["ppl_ratio"].update(
        value=r["tasks"]["suppressed_sink"]["metrics"]["ppl_ratio"]["value"] * 1.04))  # fmt: skip
    out = tmp_path / "merged"
    assert cli.main(["bench", "--compare", str(two_tasks), str(moved), "--out", str(out), "--quiet"]) == 2
    line = one_line_error(capsys, "task suppressed_sink (version 1)", str(results_file(two_tasks)), str(results_file(moved)))
    assert "different values" in line and not out.exists()
    rounded = edited(two_tasks, tmp_path, "rounded", lambda r: r["tasks"]["suppressed_sink"]["metrics"]["ppl_ratio"].update(
        value=r["tasks"]["suppressed_sink"]["metrics"]["ppl_ratio"]["value"] * (1 + 1e-6)))  # fmt: skip
    assert len(sinklab.compare_bench([two_tasks, rounded]).frame("leaderboard")) == 2
    other_device = edited(moved, tmp_path, "gpu", lambda r: r.update(device="cuda:0"))
    assert len(sinklab.compare_bench([two_tasks, other_device]).frame("leaderboard")) == 2  # another model identity


@pytest.mark.parametrize("config", [{"config_version": 2, "model": None, "inputs": {"tokens": 64}}, [1, 2]])
def test_a_directory_of_another_kind_of_run_is_refused_as_such(config, model, tmp_path):
    """A scan run's directory was said to hold "a bench run ... (suite is not recorded there)", and a
    config.json holding a list gave an AttributeError traceback: both are refused in one line as
    not a bench run, the directory as it was."""
    run = tmp_path / "scan"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(config))
    (run / "run.json").write_text(json.dumps({"status": "finished"}))
    before = snapshot(run)
    with pytest.raises(SinklabError, match="holds a run that is not a sinklab bench run .*choose another --out"):
        sinklab.bench_models([model], tasks=("sink_rate",), limit="quick", out=run)
    assert snapshot(run) == before


def test_one_file_named_twice_or_copied_is_refused_and_results_files_have_one_suffix(two_tasks, tmp_path, capsys):
    """``--compare b1 b1`` merged one file as two models, and so did a copy of it; merged files of
    one model measured twice were written as ``...-moved09.json.json``."""
    copy = tmp_path / "copy"
    shutil.copytree(two_tasks, copy)
    for second in (two_tasks, copy, results_file(two_tasks)):
        out = tmp_path / "merged"
        assert cli.main(["bench", "--compare", str(two_tasks), str(second), "--out", str(out), "--quiet"]) == 2
        one_line_error(capsys, "holds the same results as", "name it once")
        assert not out.exists()
    gpu = edited(two_tasks, tmp_path, "gpu", lambda r: r.update(device="cuda:0"))
    merged = tmp_path / "merged"
    assert (
        cli.main(["bench", "--compare", str(results_file(two_tasks)), str(results_file(gpu)), "--out", str(merged), "--quiet"])
        == 0
    )
    names = [p.name for p in (merged / "results").iterdir()]
    assert len(names) == 2 and not [name for name in names if name.endswith(".json.json")], names


def test_a_label_from_a_results_file_reaches_the_terminal_escaped(two_tasks, tmp_path, capsys):
    """The leaderboard printed after --compare took each model's label from its results file raw."""
    evil = edited(two_tasks, tmp_path, "evil", lambda r: r.update(model="tiny\x1b[2J"))
    assert cli.main(["bench", "--compare", str(evil), "--out", str(tmp_path / "merged"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "tiny\\x1b[2J" in out
