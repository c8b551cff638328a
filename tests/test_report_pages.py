"""The bench leaderboard page and the compress page as a reader meets them (issue 39): each missing
number says why it is missing, the leaderboard fits a 1,400 px window and scrolls in a narrower
one with its model column in view, a model keeps its colour in every figure, two models that
measured the same both show, the default model has one label however it was named; the compress
figures' titles clear their subtitles, the ratio axis spans 0..1, equal points stay apart, and the
statements say what their best and worst range over without rounding a small change to 0."""

import json
from pathlib import Path

import pytest
from browser import chromium, layout_problems, require_chromium, visit

import sinklab
from sinklab.bench import GROUPS, SUITES, TASKS, BenchConfig
from sinklab.bench import plots as bench_plots
from sinklab.bench.frame import model_label
from sinklab.compress import page as compress_page
from sinklab.compress import plots as compress_plots
from sinklab.compress import report as compress_report
from sinklab.compress.summary import CELL_GROUP, paired
from sinklab.core.errors import SinklabError
from sinklab.core.figures import GRID_TOP

CARD = ("version", "group", "title", "paper", "headline")  # what a bench summary says of a task
PUBLISHED = Path(__file__).parent.parent / "benchmarks" / "leaderboard" / "sinks-v1"
SMOLLM2, BYTES = PUBLISHED / "smollm2-135m-instruct.json", PUBLISHED / "sinklab-bytes-llama.json"


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module's pages; its absence skips, except on CI."""
    require_chromium()
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def leaderboard():
    """A leaderboard of the whole suite from the published files (read as they are, whatever task
    versions this sinklab is at): SmolLM2 twice (the same model from two machines, as --compare
    labels it) and the bytes model without its w8a8_prefix task (not run)."""
    smollm2, partial = json.loads(SMOLLM2.read_text()), json.loads(BYTES.read_text())
    del partial["tasks"]["w8a8_prefix"]
    models = [{**smollm2, "label": f"smollm2 [{i}: {SMOLLM2}]"} for i in (0, 2)]
    models.insert(1, partial)
    cards = {name: {key: getattr(TASKS[name], key) for key in CARD} for name in SUITES["sinks-v1"]}
    return {"suite": "sinks-v1", "limit": None, "groups": GROUPS, "tasks": cards, "models": models, "sources": None}


def test_each_missing_leaderboard_number_says_why(leaderboard, tmp_path):
    """Not run, not applicable and measured-but-none-found are three marks, each in the legend.
    Mutation tried: the old page's "-" for both a task not run and nothing found."""
    rows = bench_plots.shown_rows(leaderboard)
    assert rows[1]["w8a8_prefix/prefix_gain"] == "not run"
    assert rows[1]["streaming/ppl_ratio_sinks_0"] == "n/a"
    assert rows[1]["massive_activation/value"] == "none found"
    assert rows[0]["massive_activation/value"] == pytest.approx(24930, rel=1e-3)
    page = bench_plots.PAGE.write_result(tmp_path / "board.html", leaderboard, {}).read_text()
    for mark in bench_plots.MARKS:
        assert f"<b>{mark}</b>:" in page and f">{mark}</td>" in page


def test_a_model_keeps_its_colour_in_every_figure_and_identical_models_both_show(leaderboard):
    """The bytes model has no kv_2bit gain: the third model's colour must not shift in the payoff
    bars. The two SmolLM2 copies draw the same curve: their markers and dashes differ, and the
    later one's markers are smaller, so both show."""
    figures = bench_plots.figures(leaderboard)
    assert {"first_token_mass.png", "dependence.png", "payoff.png"} <= set(figures)
    colours = {}
    for fig in figures.values():
        for trace in fig.data:
            colour = trace.marker.color
            assert colours.setdefault(trace.name, colour) == colour, f"{trace.name} changes colour"
    assert len(set(colours.values())) == 3
    payoff = {x for trace in figures["payoff.png"].data for x in trace.x}  # every task's declared ratios, drawn
    assert payoff == {"kv_2bit/ppl_ratio_gain", "w8a8_prefix/prefix_gain"}
    first, _, copy = figures["first_token_mass.png"].data
    assert list(first.y) == list(copy.y)
    assert first.marker.symbol != copy.marker.symbol and first.line.dash != copy.line.dash
    assert first.marker.size > copy.marker.size


def test_the_default_model_has_one_label_however_it_was_named(tmp_path):
    """Left out on the command line (None) or named ``smollm2`` in a notebook: one label, so one
    run refuses both and --compare reads a results file of either spelling under the same name."""
    assert model_label(None) == model_label("smollm2") == "smollm2" and model_label("a/b") == "a/b"
    with pytest.raises(SinklabError, match="named twice"):
        BenchConfig(models=(None, "smollm2"))
    for name, model, label in (("old", None, "default"), ("new", "smollm2", "smollm2")):  # the command line's, the notebook's
        results = json.loads(SMOLLM2.read_text())
        results["tasks"] = {"sink_rate": results["tasks"]["sink_rate"]}  # a task at this sinklab's version
        (tmp_path / f"{name}.json").write_text(json.dumps({**results, "model": model, "label": label}))
    labels = list(sinklab.compare_bench([tmp_path / "old.json", tmp_path / "new.json"]).frame().label)
    assert [label.split(" [")[0] for label in labels] == ["smollm2", "smollm2"]


def resized(page, width: int) -> None:
    """The loaded page in a window ``width`` px wide, once its plots have redrawn (one load serves both widths)."""
    page.set_viewport_size({"width": width, "height": 900})
    page.wait_for_timeout(500)


LEADERBOARD_BOX = """() => { const w = document.querySelectorAll('section')[1].querySelector('.wide');
  w.scrollLeft = w.scrollWidth; const first = w.querySelector('tbody td').getBoundingClientRect();
  return {fits: w.scrollWidth <= w.clientWidth + 1, left: first.left - w.getBoundingClientRect().left}; }"""


def settled(page, script: str, expected, timeout_ms: int = 10_000):
    """What ``script`` returns once it returns ``expected``, or after ``timeout_ms`` what it returns
    then: a resize's reflow and the plots' redraw can take longer than :func:`resized` waits on a
    loaded machine (seen once in CI under two test workers), and a layout that never gets there still fails."""
    seen = page.evaluate(script)
    for _ in range(timeout_ms // 200):
        if seen == expected:
            break
        page.wait_for_timeout(200)
        seen = page.evaluate(script)
    return seen


def test_the_leaderboard_fits_1400_px_and_scrolls_narrower_with_the_models_in_view(leaderboard, browser, tmp_path):
    """Every column of the full suite shows in a 1,400 px window (the headers break at ``/`` and
    ``_``); in a 700 px one the table scrolls inside its section and, scrolled to its end, still
    shows which model each row is. Mutations tried: headers that do not break (cut off at 1,400
    px); no sticky first column (the model scrolls away)."""
    seen = visit(browser, bench_plots.PAGE.write_result(tmp_path / "board.html", leaderboard, {}), 1400)
    for width, fits in ((1400, True), (700, False)):
        resized(seen.page, width)
        assert seen.problems() == [] and layout_problems(seen.page) == []
        expected = {"fits": fits, "left": 0}
        assert settled(seen.page, LEADERBOARD_BOX, expected) == expected, f"at {width} px"


def compress_summary() -> dict:
    """Two presses at one ratio, keeping 0 or 1 sink, with the same passkey accuracy (equal
    points) and perplexities 0.005 % apart; KIVI with and without the sink protected."""
    text = "shakespeare"

    def cell(ppl, **where):
        passkey = {"accuracy": 0.5, "logprob_mean": -1.0, "logprobs": [-1.0, -1.0]}
        return {**where, "context": 400, "kept_fraction": 0.5, "bytes_ratio": 0.5, "sinks": [[0]], "ppl": {text: ppl},
                "ppl_ratio": {text: ppl / 10.0}, "passkey": passkey}  # fmt: skip

    cells = [
        cell(10.0 + 0.0005 * k, policy=p, kind="press", ratio=0.5, bits=None, keep_sinks=k)
        for p in ("snapkv", "knorm")
        for k in (0, 1)
    ]
    cells += [cell(10.1, policy="kivi", kind="quantizer", ratio=None, bits=2, keep_sinks=k) for k in (0, 1)]
    return {
        "kind": "compress", "model": "<b>tiny</b>", "presses": ["snapkv", "knorm"], "ratios": [0.5], "keep_sinks": [0, 1],
        "quantizers": ["kivi"], "contexts": [400], "tasks": ["ppl", "passkey"],
        "dense": {"400": {"ppl": {text: 10.0}, "passkey": {"accuracy": 0.5, "logprob_mean": -1.0}}},
        "cells": cells, "sink_effect": paired(cells, CELL_GROUP, "keep_sinks"),
    }  # fmt: skip


def test_the_ratio_axis_spans_zero_to_one_and_equal_points_stay_apart():
    """One ratio used: plotly alone centres the axis on it (-0.5..1.5). The two kept-sink settings
    score the same accuracy: their points are dodged apart, with their own markers, and hover
    shows the true ratio."""
    fig = compress_plots.figures(compress_summary())["passkey_accuracy.png"]
    assert tuple(fig.layout.xaxis.range) == (-0.05, 1.05) and list(fig.layout.xaxis.tickvals) == [0, 0.5, 1]
    assert tuple(fig.layout.yaxis.range) == (-0.05, 1.05) and fig.layout.margin.t >= GRID_TOP
    none, one = fig.data[:2]
    assert none.y == one.y and none.x != one.x and abs(none.x[0] - one.x[0]) < 0.05
    assert none.customdata == one.customdata == (0.5,) and none.marker.symbol != one.marker.symbol


def test_the_statements_say_what_they_range_over_and_keep_small_changes():
    lines = compress_report.statements(compress_summary())
    assert lines[0] == (
        "snapkv: best and worst over 1 pair of cells on the same inputs: keep sinks 1 against 0; ratio 0.5; "
        "context 400 tokens; perplexity on text shakespeare"
    )
    assert "changes perplexity by +0.005% at best" in lines[1] and "+0.0%" not in " ".join(lines)
    assert any(line.startswith("kivi: protecting sinks changes perplexity by 0% at best") for line in lines)
    assert compress_report._percent(-5.2e-5) == "-0.0052%" and compress_report._percent(0.019) == "+1.9%"


def test_a_long_statement_is_shown_whole_on_the_page(monkeypatch):
    """The page cut each statement at 600 characters with no notice (a grid of many ratios and
    contexts lists more cells than that)."""
    long = "changes perplexity by " + ", ".join(f"+{k}% (ratio 0.{k})" for k in range(60)) + " END"
    monkeypatch.setattr(compress_report, "family_statements", lambda s: {"snapkv": ["scope " * 120 + "SCOPE END", long]})
    shown = compress_page._statements_html(compress_summary())
    assert len(long) > 600 and "SCOPE END" in shown and " END</li>" in shown and "…" not in shown


def test_the_compress_figures_titles_clear_their_subtitles(browser, tmp_path):
    """At 1,400 and 700 px no panel title (a press, a quantizer's metric) overlaps the figure's
    title or subtitle. Mutation tried: the default top margin (the titles overlap)."""
    report = compress_page.PAGE.write_result(tmp_path / "compress.html", compress_summary(), {})
    overlaps = """() => Array.from(document.querySelectorAll('.plot')).flatMap(p => {
      const box = e => e.getBoundingClientRect(), heads = Array.from(p.querySelectorAll('.g-gtitle text')).map(box);
      return Array.from(p.querySelectorAll('.annotation-text')).map(box).filter(a => heads.some(h =>
        Math.min(a.bottom, h.bottom) - Math.max(a.top, h.top) > 0 && Math.min(a.right, h.right) - Math.max(a.left, h.left) > 0))
        .map(() => p.id); })"""
    assert "&lt;b&gt;tiny&lt;/b&gt;" in report.read_text() and "<b>tiny</b>" not in report.read_text()
    seen = visit(browser, report, 1400)
    for width in (1400, 700):
        resized(seen.page, width)
        assert seen.problems() == [] and seen.unrendered_plots() == [] and layout_problems(seen.page) == []
        assert seen.page.evaluate(overlaps) == [], f"at {width} px"
