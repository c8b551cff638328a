"""The leaderboard page and its figures: models side by side, task by task.

Figures (plotly, the same for the page and the PNGs): the first-token mass and the sink's value
norm through depth for every model (depth as a fraction, so models of different depths line up),
and the dependence and payoff ratios as grouped bars. The page: a sortable leaderboard of each
task's headline metric, then every metric of every task with its spread, group by group.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..core import html
from ..core.figures import LEGEND_BELOW, series_style, styled, title
from ..core.text import html_text
from .frame import headline_column, leaderboard_rows, metric_rows
from .task import TASKS


def model_style(index: int) -> dict:
    """A model's colour, marker and dash in every figure (:func:`~sinklab.core.figures.series_style`).
    Markers shrink with the model's place, so the curves of two models that measured the same (one
    model from two machines) both show: the later one's smaller markers lie on the earlier one's."""
    return {**series_style(index), "size": max(5, 11 - 2 * index)}


def figures(summary: dict) -> dict:
    """Every figure of the leaderboard that has something to draw, by file name: each task's
    profile through depth (its ``profile``) and each group's ratios as bars (its tasks' ``ratios``),
    in the suite's order."""
    tasks = [(name, TASKS[name]) for name in summary["tasks"] if name in TASKS]
    found = {f"{name}.png": _profile(summary, *task.profile) for name, task in tasks if task.profile}
    for group in summary["groups"]:
        bars = [(name, metric) for name, task in tasks if task.group == group for metric in task.ratios]
        found[f"{group}.png"] = _bars(summary, group, bars) if bars else None
    return {name: fig for name, fig in found.items() if fig is not None}


def _profile(summary: dict, profile: str, axis: str):
    """One per-layer curve per model that has it, against depth as a fraction."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, results in enumerate(summary["models"]):
        curve = next((e["profiles"][profile] for e in results["tasks"].values() if profile in e.get("profiles", {})), None)
        if curve:
            style = model_style(i)
            fig.add_trace(go.Scatter(
                x=[k / max(len(curve) - 1, 1) for k in range(len(curve))], y=curve, mode="lines+markers",
                name=html_text(results["label"]), line={"color": style["color"], "dash": style["dash"]},
                marker={"color": style["color"], "symbol": style["symbol"], "size": style["size"]},
            ))  # fmt: skip
    if not fig.data:
        return None
    fig.update_layout(title=title(f"{axis} through depth"), xaxis_title="layer / (layers - 1)", yaxis_title=axis)
    return styled(fig.update_layout(legend=LEGEND_BELOW))


def _bars(summary: dict, group: str, bars: list):
    """One bar per model for each (task, metric) ratio it measured, grouped; 1 is no effect."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, results in enumerate(summary["models"]):
        cells = [(f"{t}/{m}", results["tasks"].get(t, {}).get("metrics", {}).get(m)) for t, m in bars]
        shown = [(x, metric["value"]) for x, metric in cells if metric is not None]
        if shown:
            bar = go.Bar(x=[x for x, _ in shown], y=[y for _, y in shown], name=html_text(results["label"]))
            fig.add_trace(bar.update(marker_color=model_style(i)["color"]))
    if not fig.data:
        return None
    fig.add_hline(y=1.0, line_dash="dot")
    fig.update_layout(barmode="group", title=title(summary["groups"][group], "ratios; 1 = no effect"), legend=LEGEND_BELOW)
    return styled(fig)


LEAD_COLUMNS = [("model", "label", "s"), ("dtype", "dtype", "s"), ("device", "device", "s")]
METRIC_COLUMNS = [
    ("model", "label", "s"), ("task", "task", "s"), ("v", "version", "d"), ("metric", "metric", "s"), ("value", "value", ".4g"),
    ("spread", "spread", ".3g"), ("n", "n", "d"), ("over", "over", "s"), ("better", "better", "s"),
]  # fmt: skip


def leaderboard_columns(summary: dict) -> list:
    headlines = [(headline_column(n, c), headline_column(n, c), ".4g") for n, c in summary["tasks"].items()]
    return [*LEAD_COLUMNS, *headlines, ("wall s", "wall_s", ".0f")]


#: The leaderboard's marks for a cell with no number, and what each means (the page's legend).
NOT_RUN, NOT_APPLICABLE, NONE_FOUND = "not run", "n/a", "none found"
MARKS = {
    NOT_RUN: "the task was not run on the model (its results hold no such task)",
    NOT_APPLICABLE: "the task does not apply to the model as defined (the results file says why)",
    NONE_FOUND: "measured, and nothing met the task's thresholds (e.g. no massive activation)",
}


def headline_cell(results: dict, name: str, card: dict):
    """A model's leaderboard cell for a task: the headline value, or the mark saying why there is none."""
    entry = results["tasks"].get(name)
    if entry is None:
        return NOT_RUN
    if entry.get("not_applicable"):
        return NOT_APPLICABLE
    return _value_or_mark(entry["metrics"].get(card["headline"], {}).get("value"))


def shown_rows(summary: dict) -> list[dict]:
    """The leaderboard's rows as the page shows them: a mark of :data:`MARKS` where a number is missing."""
    rows = list(leaderboard_rows(summary))
    for row, results in zip(rows, summary["models"]):
        for name, card in summary["tasks"].items():
            row[headline_column(name, card)] = headline_cell(results, name, card)
    return rows


def marks_legend() -> str:
    return "<p class='note'>" + "; ".join(f"<b>{html.esc(m)}</b>: {html.esc(why)}" for m, why in MARKS.items()) + ".</p>"


def sections(summary: dict, data: dict, uid: str, run_dir: Optional[Path] = None) -> list[html.Section]:
    models = ", ".join(r["label"] for r in summary["models"])
    keys = {"suite": summary["suite"], "limit": summary["limit"] or "full", "models": models}
    parts = [
        html.Section("Run", html.header(None, keys, run_dir)),
        html.Section(
            "Leaderboard (click a header to sort)",
            html.sortable_table(shown_rows(summary), leaderboard_columns(summary)) + marks_legend(),
        ),
        html.Section("Tasks", html.table(task_rows(summary), TASK_COLUMNS)),
    ]
    for name, fig in figures(summary).items():
        parts.append(html.Section(name.removesuffix(".png").replace("_", " "), html.plot(fig, f"{uid}-{name[:-4]}")))
    rows = [{**r, "value": _value_or_mark(r["value"])} for r in metric_rows(summary) if "@" not in r["metric"]]
    for group, heading in summary["groups"].items():  # each press cell's metrics ("@") are in metrics.csv
        mine = [r for r in rows if r["group"] == group]
        if mine:
            note = "<p class='note'>-: no spread, count or direction for this metric.</p>"
            parts.append(html.Section(f"Every metric: {heading}", html.sortable_table(mine, METRIC_COLUMNS) + note))
    return parts


def _value_or_mark(value):
    return NONE_FOUND if value is None else value


TASK_COLUMNS = [
    ("task", "task", "s"),
    ("v", "version", "d"),
    ("group", "group", "s"),
    ("what", "title", "s"),
    ("paper", "paper", "s"),
]


def task_rows(summary: dict) -> list[dict]:
    return [{"task": name, **card, "group": summary["groups"][card["group"]]} for name, card in summary["tasks"].items()]


PAGE = html.RunPage("bench", "bench", lambda run_dir: {}, sections)
write_page = PAGE.write
