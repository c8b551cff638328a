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
from ..core.figures import styled, title
from ..core.text import html_text
from .frame import headline_column, leaderboard_rows, metric_rows

#: Per-layer curves drawn: profile name -> (figure file, y-axis title).
PROFILES = {
    "first_token_mass_by_layer": ("first_token_mass.png", "first-token mass"),
    "value_norm_ratio_by_layer": ("sink_value_norm.png", "value norm at 0 / others'"),
}
#: Bars drawn: group -> (figure file, [(task, metric), ...]) of ratios (1: no effect).
BARS = {
    "dependence": (
        "dependence.png",
        [("suppressed_sink", "ppl_ratio"), ("streaming", "ppl_ratio_sinks_0"), ("streaming", "ppl_ratio_sinks_1"),
         ("streaming", "ppl_ratio_sinks_4")],
    ),
    "payoff": ("payoff.png", [("kv_2bit", "ppl_ratio_gain"), ("w8a8_prefix", "prefix_gain")]),
}  # fmt: skip


def figures(summary: dict) -> dict:
    import plotly.graph_objects as go

    found = {}
    for profile, (name, axis) in PROFILES.items():
        fig = go.Figure()
        for results in summary["models"]:
            curve = next((e["profiles"][profile] for e in results["tasks"].values() if profile in e.get("profiles", {})), None)
            if curve:
                depth = [i / max(len(curve) - 1, 1) for i in range(len(curve))]
                fig.add_trace(go.Scatter(x=depth, y=curve, mode="lines+markers", name=html_text(results["label"])))
        if fig.data:
            fig.update_layout(title=title(f"{axis} through depth"), xaxis_title="layer / (layers - 1)", yaxis_title=axis)
            found[name] = styled(fig)
    for group, (name, bars) in BARS.items():
        fig = go.Figure()
        for results in summary["models"]:
            cells = [(f"{t}/{m}", results["tasks"].get(t, {}).get("metrics", {}).get(m)) for t, m in bars]
            shown = [(x, metric["value"]) for x, metric in cells if metric is not None]
            if shown:
                fig.add_trace(go.Bar(x=[x for x, _ in shown], y=[y for _, y in shown], name=html_text(results["label"])))
        if fig.data:
            fig.add_hline(y=1.0, line_dash="dot")
            fig.update_layout(barmode="group", title=title(summary["groups"][group], "ratios; 1 = no effect"))
            found[name] = styled(fig)
    return found


LEAD_COLUMNS = [("model", "label", "s"), ("dtype", "dtype", "s"), ("device", "device", "s")]
METRIC_COLUMNS = [
    ("model", "label", "s"), ("task", "task", "s"), ("v", "version", "d"), ("metric", "metric", "s"), ("value", "value", ".4g"),
    ("spread", "spread", ".3g"), ("n", "n", "d"), ("over", "over", "s"), ("better", "better", "s"),
]  # fmt: skip


def leaderboard_columns(summary: dict) -> list:
    headlines = [(headline_column(n, c), headline_column(n, c), ".4g") for n, c in summary["tasks"].items()]
    return [*LEAD_COLUMNS, *headlines, ("wall s", "wall_s", ".0f")]


def shown_rows(summary: dict) -> list[dict]:
    """The leaderboard's rows with ``n/a`` where a task did not apply to the model."""
    rows = list(leaderboard_rows(summary))
    for row, results in zip(rows, summary["models"]):
        for name, card in summary["tasks"].items():
            if results["tasks"].get(name, {}).get("not_applicable"):
                row[headline_column(name, card)] = "n/a"
    return rows


def sections(summary: dict, data: dict, uid: str, run_dir: Optional[Path] = None) -> list[html.Section]:
    models = ", ".join(r["label"] for r in summary["models"])
    keys = {"suite": summary["suite"], "limit": summary["limit"] or "full", "models": models}
    parts = [
        html.Section("Run", html.header(None, keys, run_dir)),
        html.Section(
            "Leaderboard (click a header to sort)",
            html.sortable_table(shown_rows(summary), leaderboard_columns(summary))
            + "<p class='note'>n/a: the task does not apply to the model as defined (the results file says why); "
            "-: measured, nothing found (e.g. no massive activation over the thresholds).</p>",
        ),
        html.Section("Tasks", html.table(task_rows(summary), TASK_COLUMNS)),
    ]
    for name, fig in figures(summary).items():
        parts.append(html.Section(name.removesuffix(".png").replace("_", " "), html.plot(fig, f"{uid}-{name[:-4]}")))
    rows = [r for r in metric_rows(summary) if "@" not in r["metric"]]  # each press cell's: in metrics.csv
    for group, heading in summary["groups"].items():
        mine = [r for r in rows if r["group"] == group]
        if mine:
            parts.append(html.Section(f"Every metric: {heading}", html.sortable_table(mine, METRIC_COLUMNS)))
    return parts


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
