"""Figures and tables: model-supplied text is escaped before it reaches a plot (the page's and the
PNG's, one figure); PNGs are written through kaleido, and a run without a working browser still
finishes, says why and writes its page; a run's data goes to its files and back unchanged, and a
page can be drawn from a result in memory; ``sinklab report`` on a damaged summary is one line."""

import json
import os
import shutil
import stat
import struct
import threading
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import plotly.graph_objects as go
import pytest
import torch
from browser import require_chromium
from conftest import one_line_error

from sinklab import cli
from sinklab.adapt import page as adapt_page
from sinklab.adapt import plots as adapt_plots
from sinklab.core import figures
from sinklab.core.text import format_table, html_text, safe_text
from sinklab.intervene import page as intervene_page
from sinklab.intervene import plots as intervene_plots
from sinklab.pretrain import plots as pretrain_plots
from sinklab.scan import SCAN, ScanConfig, compare_page
from sinklab.scan import page as scan_page
from sinklab.scan import plots as scan_plots
from sinklab.scan.inputs import InputSpec
from sinklab.stream import page as stream_page
from sinklab.stream import plots as stream_plots

HOSTILE = "</script><b onmouseover=alert(1)>$\\alpha$</b>&amp;"
#: The markup sinklab's own figure text may hold; anything else with a "<" came from a string that was not escaped.
OWN_MARKUP = ("<br>", "<extra>", "</extra>")


def test_safe_text_escapes_mathtext_and_control_characters():
    hostile = "$\\frac{1}{0}$\n\x1b[31mred\ttab" + "x" * 100
    out = safe_text(hostile, limit=40)
    assert "$" not in out.replace("\\$", "")  # every dollar is escaped
    assert "\n" not in out and "\x1b" not in out and "\t" not in out
    assert len(out) <= 40


def test_format_table_aligns_and_marks_missing_values():
    table = format_table([{"a": 1.23456, "b": None, "c": True}], [("A", "a", ".2f"), ("B", "b", ""), ("C", "c", "")])
    lines = table.splitlines()
    assert lines[0].split() == ["A", "B", "C"] and lines[2].split() == ["1.23", "-", "yes"]


@pytest.fixture(scope="module")
def scan_run(tiny_model_dir, tmp_path_factory):
    """One finished ``sinklab scan`` of the tiny Llama (record, tokens, figures, page)."""
    out = tmp_path_factory.mktemp("scan") / "run"
    assert (
        cli.main(
            ["scan", str(tiny_model_dir("llama")), "--random-tokens", "--max-tokens", "16", "--batch", "2", "--out", str(out)]
        )
        == 0
    )
    return out


def _strings(obj):
    """Every string inside a figure's JSON (titles, names, hover templates, text, tick labels)."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _strings(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _strings(value)


def _unescaped(figs: dict) -> list[str]:
    found = []
    for name, fig in figs.items():
        for text in _strings(fig.to_plotly_json()):
            stripped = text
            for markup in OWN_MARKUP:
                stripped = stripped.replace(markup, "")
            if "<" in stripped or HOSTILE in text:
                found.append(f"{name}: {text[:80]}")
    return found


def test_every_figure_escapes_model_token_label_and_run_names(scan_run):
    """The strings a model, tokenizer or user supplies (model name, token strings, intervention
    label, run names) reach every figure escaped, in the figure the PNG and the page both draw.
    Mutations caught (each alone): html_text dropped from the stream NLL title, from the scan's
    massive-activation hover tokens, from the pretraining legend names, from the intervention
    labels of the before/after maps."""
    summary = {**json.loads((scan_run / "summary.json").read_text()), "model": HOSTILE}
    data = scan_plots.read_data(scan_run)
    data["tokens"]["strings"] = [[HOSTILE] * len(row) for row in data["tokens"]["strings"]]
    summary["massive_activations"] = [{"layer": 0, "position": 1, "dim": 3, "value": 500.0, "sequences": 2}]
    maps = torch.rand(3, 8, 8)
    intervene = (
        {
            "model": HOSTILE,
            "layers": 3,
            "baseline": {"share_at": {"2": [0.1, 0.2, 0.3]}},
            "results": [
                {"label": HOSTILE, "lam": None, "k": 2, "share_at_k": [0.3, 0.2, 0.1], "intervention": {"type": "mask_self"}}
            ],
        },
        {"maps": {"baseline": maps, HOSTILE: maps}},
    )
    stream = (
        {
            "model": HOSTILE,
            "tokens": 20,
            "sinks": 2,
            "window": 6,
            "max_positions": 10,
            "ablation": {"0": {"ppl": 3.0}, "2": {"ppl": 2.0}},
            "policies": {"sink": {"ms_per_token_by_chunk": [{"start": 0, "ms": 1.0}]}},
        },
        {"nll": {"sink": torch.rand(19), "sink.positions": torch.arange(1, 20)}},
    )
    adapt = (
        {"model": HOSTILE, "max_abs_activation": {"fp": {"bos": [1.0, 9.0]}, "w8a8": {"prefix": [1.0, 2.0]}}},
        {"metrics": [{"step": 1, "kl": 0.5, "lm": 2.0, "ramp": 0.5}]},
    )
    metrics = {HOSTILE: [{"step": 10, "val_loss": 3.0, "first_token_mass_mean": 0.5}]}
    built = {
        **scan_plots.figures(summary, data),
        **{f"intervene {k}": v for k, v in intervene_plots.figures(*intervene).items()},
        **{f"stream {k}": v for k, v in stream_plots.figures(*stream).items()},
        **{f"adapt {k}": v for k, v in adapt_plots.figures(*adapt).items()},
        **{
            f"pretrain {k}": v
            for k, v in pretrain_plots.compare_figures(metrics, {HOSTILE: {"first_token_mass_by_layer": [0.1, 0.9]}}).items()
        },
        **{
            f"compare {k}": v
            for k, v in compare_page.figures(
                {"models": [{"label": HOSTILE, "model": HOSTILE, "layers": 2, "first_token_mass_by_layer": [0.1, 0.9]}]}
            ).items()
        },
    }
    assert len(built) == 17
    assert _unescaped(built) == []
    shown = [text for fig in built.values() for text in _strings(fig.to_plotly_json()) if html_text(HOSTILE, 30)[:20] in text]
    assert len(shown) >= 8  # the names are there, escaped, not dropped


def test_styled_sets_the_template_as_plotly_validates_it():
    """styled() gives a figure its template without plotly validating a copy again (30 ms a
    figure): the figure's JSON must be what plotly's own validated assignment gives, and one
    figure's template must not be another's. Mutations tried: assigning plotly's registered
    template unvalidated (its traces' defaults come out in another order); leaving validation
    off after the assignment (an invalid later update is accepted)."""
    from plotly.subplots import make_subplots

    def figure():
        fig = make_subplots(rows=1, cols=2, subplot_titles=["a", "b"])
        fig.add_trace(go.Heatmap(z=[[0, 1], [1, 0]]), 1, 1)
        return fig.add_trace(go.Scatter(y=[1, 3, 2]), 1, 2).update_layout(margin={"l": 5})

    ours = figures.styled(figure(), height=300)
    plotlys = figure().update_layout(template=figures.TEMPLATE, margin={"r": 20, "t": 80, "b": 50}, height=300)
    assert ours.to_json() == plotlys.to_json()
    ours.layout.template.layout.font.size = 99
    assert figures.styled(figure()).layout.template.layout.font.size is None
    with pytest.raises(ValueError):
        ours.update_layout(height="tall")


def _png_size(path: Path) -> tuple[int, int]:
    with open(path, "rb") as fh:
        head = fh.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def _reset_browser(monkeypatch):
    """This test's own kaleido state (the process's browser comes back after the test)."""
    monkeypatch.setattr(figures, "_browser", None)
    monkeypatch.setattr(figures, "_unavailable", None)
    monkeypatch.setattr(figures, "_start_failure", None)


def test_save_images_writes_pngs_of_the_figures_size(tmp_path, monkeypatch, with_images):
    """One batch, each file atomically: a figure that sets its size gets it, one that does not
    gets the default. Mutation caught: the opts width taken from STATIC_WIDTH always (the wide
    figure comes out 900 px)."""
    require_chromium()
    _reset_browser(monkeypatch)
    wide = go.Figure(go.Heatmap(z=[[0, 1], [1, 0]])).update_layout(title=html_text(HOSTILE), width=1234, height=321)
    plain = go.Figure(go.Scatter(y=[1, 3, 2]))
    images = figures.save_images({"wide.png": wide, "plain.png": plain}, tmp_path)
    assert images == figures.Images(["wide.png", "plain.png"])
    assert _png_size(tmp_path / "wide.png") == (1234, 321)
    assert _png_size(tmp_path / "plain.png") == (figures.STATIC_WIDTH, figures.STATIC_HEIGHT)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.png", "wide.png"]  # no temporary file left


def test_a_run_without_a_browser_finishes_warns_once_and_records_why(scan_run, tmp_path, monkeypatch, with_images):
    """No browser where BROWSER_PATH points: the scan still exits 0 with its page, its run.json
    lists no figure and says why, one warning is shown, and a second export does not try again.
    Mutations caught: ChromeNotFoundError let through (the run fails with a traceback); the
    reason not recorded (``figures_skipped`` missing); the failure not remembered (a second
    warning)."""
    _reset_browser(monkeypatch)
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-browser"))
    model = json.loads((scan_run / "config.json").read_text())["model"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert (
            cli.main(["scan", model, "--random-tokens", "--max-tokens", "16", "--batch", "2", "--out", str(tmp_path / "run")])
            == 0
        )
        again = figures.save_images({"x.png": go.Figure()}, tmp_path)
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert not [f for f in info["files"] if f.endswith(".png")] and "no-such-browser" in info["figures_skipped"]
    assert again == figures.Images([], info["figures_skipped"])
    assert [str(w.message) for w in caught if "PNG" in str(w.message)] == [
        f"no PNG figures written: {info['figures_skipped']}; report.html still shows every plot"
    ]
    assert (tmp_path / "run" / "report.html").exists() and not list((tmp_path / "run").glob("*.png"))


def test_a_run_starts_its_browser_in_the_background_and_a_failed_start_is_the_exports(
    scan_run, tmp_path, monkeypatch, with_images
):
    """The pipeline warms the browser up before measuring, so its start overlaps the measurement
    (the browser is made in the warm-up thread, not by the export after it); a background start
    that fails is reported once, by the export, with its reason, and not retried. Mutations caught:
    warm_up not called by the pipeline (the export's own thread makes the browser); the background
    failure dropped (the export tries again and succeeds here, the reason lost)."""

    class Drawn:
        pid = os.getpid()

        def render(self, jobs, timeout):
            for job in jobs:
                Path(job["path"]).write_bytes(b"png")

        def close(self):
            pass

    def failing():
        raise figures.BrowserUnavailable("no Chrome or Chromium found (test)")

    _reset_browser(monkeypatch)
    starts = []
    monkeypatch.setattr(figures, "_Browser", lambda: starts.append(threading.current_thread().name) or Drawn())
    model = json.loads((scan_run / "config.json").read_text())["model"]
    assert cli.main(["scan", model, "--random-tokens", "--max-tokens", "16", "--batch", "2", "--out", str(tmp_path / "run")]) == 0
    assert starts == ["sinklab-browser-start"] and list((tmp_path / "run").glob("*.png"))
    _reset_browser(monkeypatch)
    monkeypatch.setattr(figures, "_Browser", failing)
    figures.warm_up()
    deadline = time.monotonic() + 10
    while figures._start_failure is None and time.monotonic() < deadline:
        time.sleep(0.01)
    starts.clear()
    monkeypatch.setattr(figures, "_Browser", lambda: starts.append("retried") or Drawn())
    with pytest.warns(UserWarning, match=r"no Chrome or Chromium found \(test\)"):
        assert figures.save_images({"x.png": go.Figure()}, tmp_path).skipped == "no Chrome or Chromium found (test)"
    assert not starts


def test_images_turned_off_start_no_browser_and_say_why(tmp_path, monkeypatch):
    """SINKLAB_IMAGES=off: no PNG, no browser started (none is needed), the reason returned for
    the run's records. Mutation tried: checking the variable after the browser starts."""
    _reset_browser(monkeypatch)
    monkeypatch.setenv("SINKLAB_IMAGES", "Off ")
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-browser"))  # starting one would fail and say so
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        images = figures.save_images({"x.png": go.Figure()}, tmp_path)
    assert images == figures.Images([], "PNG figures turned off (SINKLAB_IMAGES=Off )") and figures._browser is None
    assert not list(tmp_path.iterdir())


def test_a_hung_browser_is_given_up_and_killed(tmp_path, monkeypatch, with_images):
    """A "browser" that starts and never answers, then a real one that does not draw in time: each
    is given up after its timeout, with the reason, and no process of the hung one is left.
    Mutations caught: no timeout on the start (the fake's own exit 30 s later is reported as a
    failed start, not a hang); neither killing the abandoned browser's process group nor closing it
    through kaleido (its process still runs). Either alone suffices here: removing only the kill
    is not caught, since kaleido's close kills a browser that does not answer."""
    require_chromium()
    fake = tmp_path / "chromium"
    fake.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'pid'}\nexec sleep 30\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    _reset_browser(monkeypatch)
    monkeypatch.setenv("BROWSER_PATH", str(fake))
    start_timeout = figures.START_TIMEOUT_S
    monkeypatch.setattr(figures, "START_TIMEOUT_S", 3.0)
    with pytest.warns(UserWarning, match="did not start within 3 s"):
        assert figures.save_images({"x.png": go.Figure()}, tmp_path).skipped == "the browser did not start within 3 s"
    pid, deadline = int((tmp_path / "pid").read_text()), time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:  # SIGKILL is delivered, not awaited
        time.sleep(0.1)
    assert not _running(pid), "the hung browser was left running"
    _reset_browser(monkeypatch)
    monkeypatch.delenv("BROWSER_PATH")
    monkeypatch.setattr(figures, "START_TIMEOUT_S", start_timeout)  # a real browser may start slowly on a loaded machine
    monkeypatch.setattr(figures, "BATCH_BASE_S", 0.0)
    monkeypatch.setattr(figures, "SECONDS_PER_FIGURE", 0.001)
    with pytest.warns(UserWarning, match="did not draw them"):
        assert "did not draw them" in figures.save_images({"y.png": go.Figure()}, tmp_path).skipped
    assert not (tmp_path / "y.png").exists() and not list(tmp_path.glob(".y.png*"))


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_scan_data_round_trips_and_a_page_draws_from_memory(tiny_model_dir, tmp_path):
    """The data a scan keeps (its record's tensors and the first sequences' tokens) is what its
    run directory gives back, and a page of a result in memory needs no run directory. Mutation
    caught: save_data writing the record in float16 (read_data no longer gives the same tensors)."""
    cfg = ScanConfig(model=str(tiny_model_dir("llama")), inputs=InputSpec(random_tokens=True, tokens=16, batch=2))
    result = SCAN.measure(cfg)
    summary, data = result.summary, result.data
    assert (
        data["record"]["column0"].shape == (3, 4, 16) and len(data["tokens"]["ids"]) == 2 and len(data["tokens"]["ids"][0]) == 16
    )
    scan_plots.save_data(tmp_path, data)
    back = scan_plots.read_data(tmp_path)
    assert back["tokens"] == data["tokens"] and back["record"].keys() == data["record"].keys()
    assert all(torch.equal(back["record"][key], value) for key, value in data["record"].items())
    page = scan_page.write_page(tmp_path / "memory.html", summary, data)
    text = page.read_text()
    assert "a result in memory" in text and text.count('class="plot"') == 6 and str(tmp_path) not in text


def test_intervene_stream_and_adapt_data_round_trip_and_draw_from_memory(tmp_path):
    """The other capabilities' data (maps, NLL curves, training rows) goes to its documented file
    and back unchanged (the maps in float16, as maps.safetensors has always held them), and each
    page draws from a summary and data in memory. Mutations caught: the maps kept in float32; the
    stream positions left out of nll.safetensors."""
    maps = torch.rand(3, 4, 8, 8)
    records = {"baseline": SimpleNamespace(patterns=maps), "mask_self k=2": SimpleNamespace(patterns=maps.flip(-1))}
    results = [
        {
            "label": "mask_self k=2",
            "lam": None,
            "k": 2,
            "share_at_k": [0.3, 0.2, 0.1],
            "share_at_0": [0.5] * 3,
            "ppl": 9.0,
            "intervention": {"type": "mask_self"},
        }
    ]
    intervene = {
        "model": "m",
        "layers": 3,
        "tokens": 8,
        "sequences": 2,
        "results": results,
        "baseline": {"share_at": {"2": [0.1, 0.2, 0.3]}, "share_at_0": [0.5] * 3, "ppl": 8.0},
    }
    stream = {
        "model": "m",
        "tokens": 20,
        "sinks": 2,
        "window": 6,
        "max_positions": 10,
        "policies": {"sink": {"ppl": 3.0, "ppl_by_chunk": [{"ppl": 3.0}], "ms_per_token_by_chunk": [{"start": 0, "ms": 1.0}]}},
    }
    adapt = {
        "model": "m",
        "method": "sink_prefix",
        "exact_check": 0.0,
        "ppl": {"fp": {"bos": 10.0}},
        "max_abs_activation": {"fp": {"bos": [1.0, 9.0]}},
    }
    cases = [
        (
            intervene_page,
            intervene_plots,
            intervene,
            intervene_plots.data_from(records["baseline"], {"mask_self k=2": records["mask_self k=2"]}, intervene),
            2,
        ),
        (stream_page, stream_plots, stream, stream_plots.data_from({"sink": (torch.arange(1, 20), torch.rand(19))}), 2),
        (adapt_page, adapt_plots, adapt, adapt_plots.data_from([{"step": 1, "kl": 0.5, "lm": 2.0, "ramp": 0.5, "loss": 1.0}]), 1),
    ]
    for page, plots, summary, data, n_plots in cases:
        out = tmp_path / page.PAGE.command
        out.mkdir()
        plots.save_data(out, data)
        back = plots.read_data(out)
        assert back.keys() == data.keys()
        for key, value in data.items():
            if isinstance(value, dict):
                assert value.keys() == back[key].keys() and all(torch.equal(back[key][k], v) for k, v in value.items()), page
            else:
                assert back[key] == value, page
        text = page.write_page(out / "memory.html", summary, data).read_text()
        assert text.count('class="plot"') == n_plots, page
    assert {value.dtype for value in intervene_plots.read_data(tmp_path / "intervene")["maps"].values()} == {torch.float16}


@pytest.fixture(scope="module")
def damaged(scan_run, tmp_path_factory):
    """A copy of the finished scan whose summary.json is replaced by ``content``."""

    def make(name: str, content: bytes) -> Path:
        run = tmp_path_factory.mktemp("damaged") / name
        shutil.copytree(scan_run, run)
        (run / "summary.json").write_bytes(content)
        return run

    return make


@pytest.mark.parametrize(
    "name, content, needle",
    [
        ("truncated", b'{"kind": "scan", "model": "x", "lay', "cannot be read"),
        ("list", b"[]", "holds a JSON list"),
        ("kind-only", b'{"kind": "scan"}', "has no 'model'"),
        ("binary", bytes(range(128, 192)) + b"\xff\xfe", "cannot be read"),  # fixed bytes: test ids must not change between runs
    ],
)
def test_report_on_a_damaged_summary_is_one_line(damaged, capsys, name, content, needle):
    """``sinklab report`` on a damaged summary.json: exit status 2 and one line naming the file.
    Mutations caught: json.loads without the object hook that makes a missing key one line (the
    kind-only summary: a KeyError traceback); no except around the read (truncated and binary: a
    JSONDecodeError or UnicodeDecodeError traceback); no check that it is an object (the list)."""
    run = damaged(name, content)
    assert cli.main(["report", str(run)]) == 2
    assert str(run / "summary.json") in one_line_error(capsys, needle)


def test_report_on_a_summary_without_its_run_says_so(tmp_path, capsys):
    """A folder holding only ``{"kind": "scan"}`` as summary.json is an incomplete run, not one
    without a summary. Mutation tried: kind_of without reading the summary (the old "no
    summary.json" line, about a file that is there)."""
    (tmp_path / "summary.json").write_text('{"kind": "scan"}')
    assert cli.main(["report", str(tmp_path)]) == 2
    one_line_error(capsys, "summary.json (kind 'scan') is there, but not the files its report reads")
