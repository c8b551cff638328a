"""``sinklab scan MODEL MODEL ...``: one scan per model and a comparison of them."""

import html
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import images_on, numbers_close, one_line_error

from sinklab import cli
from sinklab.core import pipeline
from sinklab.scan import SCAN, InputSpec, MetricSettings, ScanConfig, compare_rows

INPUTS = ["--random-tokens", "--tokens", "12", "--batch", "2"]
#: Thresholds low enough that tiny random models have sinks, massive activations and super
#: neurons, so that every compared figure is a real one (not None against None).
LOW = MetricSettings(eps=0.1, massive_absolute=0.01, massive_relative=1.5, super_min_ratio=2.0, super_min_activation=0.01)
THRESHOLDS = ["--eps", "0.1", "--massive-abs", "0.01", "--massive-rel", "1.5", "--super-ratio", "2", "--super-min", "0.01"]


@pytest.fixture(scope="module")
def compared(tiny_model_dir, tmp_path_factory):
    """Two tiny models of different depths (llama: 3 layers, gpt2) compared in one command."""
    models = [str(tiny_model_dir("llama")), str(tiny_model_dir("gpt2"))]
    out = tmp_path_factory.mktemp("compare") / "cmp"
    with images_on():  # the page test checks a PNG
        assert cli.main(["scan", *models, *INPUTS, *THRESHOLDS, "--out", str(out)]) == 0
    return models, out, json.loads((out / "summary.json").read_text())


def test_each_model_in_the_comparison_equals_its_own_scan(compared, tmp_path):
    """Mutation tried: the first entry of ``massive_activations`` as the largest (that list is
    ordered by layer first) fails the massive-activation check."""
    models, out, summary = compared
    assert summary["kind"] == "scan-compare" and [entry["model"] for entry in summary["models"]] == models == [
        entry["label"] for entry in summary["models"]
    ]
    alone = ScanConfig(inputs=InputSpec(random_tokens=True, tokens=12, batch=2), settings=LOW)
    for i, (model, entry) in enumerate(zip(models, summary["models"])):
        own = pipeline.run(SCAN, replace(alone, model=model), out=tmp_path / str(i)).summary
        top = max(own["massive_activations"], key=lambda e: abs(e["value"]))
        assert entry["sink_rate"] == own["sink_rate"] and entry["sink_start_layer"] == own["sink_start_layer"]
        assert entry["first_token_mass_by_layer"] == own["first_token_mass_by_layer"] and entry["layers"] == own["layers"]
        assert entry["bos_prepended"] == own["bos_prepended"] is True
        assert entry["largest_massive_activation"] == {key: top[key] for key in ("value", "layer", "dim", "position")}
        assert entry["super_neurons"] and entry["sink_start_layer"] is not None
        assert [(n["layer"], n["neuron"]) for n in entry["super_neurons"]] == [
            (n["layer"], n["neuron"]) for n in own["super_neurons"]
        ]
        assert (out / entry["run"] / "report.html").exists()  # a model's scan opens alone
    assert summary["models"][0]["layers"] != summary["models"][1]["layers"]
    rows = list(compare_rows(summary))
    assert len(rows) == sum(entry["layers"] for entry in summary["models"])
    assert rows[-1] == {
        "model": models[1],
        "dtype": "float32",
        "device": "cpu",
        "label": models[1],
        "layer": summary["models"][1]["layers"] - 1,
        "first_token_mass": summary["models"][1]["first_token_mass_by_layer"][-1],
    }


def test_the_page_shows_both_models_escaped(compared):
    """Mutation tried: leaving the per-model columns out of compare_page.columns (the second
    model's name is no longer on the page)."""
    models, out, summary = compared
    page = (out / "report.html").read_text()
    assert all(html.escape(model) in page for model in models)
    assert page.count("<h1>scan: ") == 2 and "<h1>scan comparison: cmp</h1>" in page
    assert (out / "first_token_mass_by_layer.png").stat().st_size > 0


def test_the_page_escapes_a_hostile_model_name(compared):
    """A model's label (the name a user gave it) is text in the table and in the plot's legend
    (plotly renders some markup).
    Mutation tried: dropping html_text from the legend names in compare_page._mass_by_layer."""
    from sinklab.scan import compare_page

    _, out, summary = compared
    hostile = "<script>alert(1)</script>"
    entries = [{**summary["models"][0], "label": hostile}, summary["models"][1]]
    run, table, plot = (section.body for section in compare_page.sections(out, {**summary, "models": entries}))
    assert html.escape(hostile, quote=False) in table and hostile not in table
    assert "\\u0026lt;script\\u0026gt;" in plot and "\\u003cscript" not in plot


def test_the_same_command_again_reuses_every_finished_scan(compared, capsys):
    """A finished comparison is a no-op; one killed before its comparison reuses both finished
    scans. Mutation tried: overwrite=True in compare.scan_one's pipeline.run (the models' summaries
    are rewritten)."""
    models, out, _ = compared
    scans = sorted((out / "models").glob("*/summary.json"))
    written = {path: path.stat().st_mtime_ns for path in [*scans, out / "summary.json"]}
    argv = ["scan", *models, *INPUTS, *THRESHOLDS, "--out", str(out)]
    assert cli.main(argv) == 0 and "holds this run, finished" in capsys.readouterr().out
    assert {path: path.stat().st_mtime_ns for path in written} == written
    (out / "summary.json").unlink()  # killed after the scans, before the comparison
    assert cli.main(argv) == 0
    assert {path: path.stat().st_mtime_ns for path in scans} == {path: written[path] for path in scans}
    assert json.loads((out / "summary.json").read_text())["kind"] == "scan-compare"


def test_a_bad_model_among_several_is_a_one_line_error_naming_it(tiny_model_dir, tmp_path, capsys):
    """Mutation tried: dropping the model from the message in compare.scan_one."""
    assert cli.main(["scan", str(tiny_model_dir("llama")), "/no/such/model", *INPUTS, "--out", str(tmp_path / "cmp")]) == 2
    one_line_error(capsys, "model '/no/such/model': no such model")
    assert list((tmp_path / "cmp" / "models").glob("0-*/summary.json"))  # the first model's scan is kept for a rerun


@pytest.mark.integration
def test_a_comparison_through_submitit_equals_the_pools(compared, tmp_path):
    """Each model's scan as a job of submitit's local executor (subprocesses, Slurm's pickling
    path) gives the pool's entries. Mutation tried: compare.measure handing its jobs to
    LOCAL instead of its launcher (no submitit job is written). Dropping PortableJob's chdir passes
    here, as submitit's local workers start in the submitting directory: test_launchers checks it."""
    models, _, summary = compared
    (tmp_path / "launcher.json").write_text(json.dumps({"launcher": "slurm", "cluster": "local", "time": 10}))
    (tmp_path / "work").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        # a relative PYTHONPATH (PYTHONPATH=src) would name another folder from the workers' directory
        mp.setenv(
            "PYTHONPATH", os.pathsep.join(str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
        )
        mp.chdir(tmp_path / "work")
        assert (
            cli.main(
                ["scan", *models, *INPUTS, *THRESHOLDS, "--out", "cmp", "--launcher-config", str(tmp_path / "launcher.json")]
            )
            == 0
        )
        assert json.loads(Path("cmp/summary.json").read_text())["models"] == numbers_close(summary["models"])
        assert len(list(Path("cmp/launcher").glob("*_submitted.pkl"))) == len(models)
