"""Pretraining's interactive report: loss curves and the sink metrics against the step for every
run, first-token mass by layer, and the comparison table. Several runs (or a ``sinklab compare``
directory) share one set of plots, one line per run."""

from __future__ import annotations

import json
from pathlib import Path

from ..core import html
from ..core.runs import read_jsonl
from .report import EMERGENCE_CURVES
from .results import COLUMNS, run_row

#: Curves against the step (the sink metrics appear in metrics.jsonl from this version on).
CURVES = {**EMERGENCE_CURVES, "dominance_first_max": "largest dominance ratio at position 0"}


def is_run(run_dir: Path) -> bool:
    return (run_dir / "metrics.jsonl").exists() or _compared(run_dir)


def write(run_dir: Path) -> Path:
    return html.write_page(html.report_path(run_dir), f"sinklab pretrain {run_dir.name}", columns([run_dir]))


def columns(run_dirs: list[Path]) -> list[tuple[str, list[html.Section]]]:
    """One column for all the runs (a compare directory stands for the runs it compared)."""
    runs = [Path(d) for run_dir in run_dirs for d in _runs_of(run_dir)]
    finished = {d: json.loads((d / "summary.json").read_text()) for d in runs if (d / "summary.json").exists()}
    metrics = {d: read_jsonl(d / "metrics.jsonl") for d in runs}
    uid = html.dom_id(run_dirs[0])
    parts = [html.Section("Runs", html.header(run_dirs[0], None, {"runs": len(runs), "finished": len(finished)}) if len(run_dirs) == 1 else "")]
    if finished:
        parts.append(html.Section("Comparison", html.table([run_row(str(d), s, metrics[d]) for d, s in finished.items()], COLUMNS)))
    for n, (key, title) in enumerate(CURVES.items()):
        if any(key in row for rows in metrics.values() for row in rows):
            parts.append(html.Section(title[0].upper() + title[1:] + " against the step", html.plot(_curves(metrics, key, title), f"{uid}-curve{n}", 360)))
    if finished:
        parts.append(html.Section("First-token mass by layer (end of training)", html.plot(_by_layer(finished), f"{uid}-layers", 360)))
    name = run_dirs[0].name if len(run_dirs) == 1 else f"{len(runs)} runs"
    return [(f"pretraining: {name}", parts)]


def _runs_of(run_dir: Path) -> list[Path]:
    return [Path(d) for d in json.loads((run_dir / "summary.json").read_text()).get("run_dirs", [])] if _compared(run_dir) else [run_dir]


def _compared(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a comparison of pretraining runs (``sinklab compare`` or ``sinklab sweep``)."""
    summary = run_dir / "summary.json"
    head = summary.read_text(encoding="utf-8", errors="replace")[:200] if summary.exists() else ""
    return '"pretrain-compare"' in head or '"pretrain-sweep"' in head


def _curves(metrics: dict, key: str, title: str):
    import plotly.graph_objects as go

    fig = go.Figure([go.Scatter(x=[r["step"] for r in rows if key in r], y=[r[key] for r in rows if key in r], mode="lines+markers", name=html.esc(d.name))
                     for d, rows in metrics.items()])
    return fig.update_layout(xaxis_title="step", yaxis_title=title)


def _by_layer(finished: dict):
    import plotly.graph_objects as go

    fig = go.Figure([go.Scatter(y=s["first_token_mass_by_layer"], mode="lines+markers", name=html.esc(d.name)) for d, s in finished.items()])
    return fig.update_layout(xaxis_title="layer", yaxis=dict(range=[0, 1.02], title="first-token mass"))
