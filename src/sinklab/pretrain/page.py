"""Pretraining's interactive report: loss curves and the sink metrics against the step for every
run, the sink and outlier figures by layer, and the comparison table (the plots are :mod:`.plots`' figures).
Several runs (or a ``sinklab compare`` directory) share one set of plots, one line per run."""

from __future__ import annotations

import json
from pathlib import Path

from ..core import html
from ..core.atomic import read_jsonl
from . import plots
from .results import COLUMNS, run_row


def is_run(run_dir: Path) -> bool:
    return (run_dir / "metrics.jsonl").exists() or _compared(run_dir)


def write(run_dir: Path) -> Path:
    return html.write_page(html.report_path(run_dir), f"sinklab pretrain {run_dir.name}", columns([run_dir]))


def columns(run_dirs: list[Path]) -> list[tuple[str, list[html.Section]]]:
    """One column for all the runs (a compare directory stands for the runs it compared)."""
    runs = [Path(d) for run_dir in run_dirs for d in _runs_of(run_dir)]
    finished = {d: summary for d in runs if (summary := html.read_summary(d)) is not None}
    metrics = {d: read_jsonl(d / "metrics.jsonl") for d in runs}
    by_name = {d.name: rows for d, rows in metrics.items()}
    uid = html.dom_id(run_dirs[0])
    parts = [
        html.Section(
            "Runs", html.header(None, {"runs": len(runs), "finished": len(finished)}, run_dirs[0]) if len(run_dirs) == 1 else ""
        )
    ]
    if finished:
        parts.append(
            html.Section("Comparison", html.table([run_row(str(d), s, metrics[d]) for d, s in finished.items()], COLUMNS))
        )
    for n, key in enumerate(plots.present_curves(by_name)):
        parts.append(
            html.Section(
                plots.CURVES[key][0].upper() + plots.CURVES[key][1:] + " against the step",
                html.plot(plots.curve_figure(by_name, key), f"{uid}-curve{n}"),
            )
        )
    if finished:
        parts.append(
            html.Section(
                "By layer, at the end of training",
                html.plot(plots.by_layer_figure({d.name: finished.get(d) for d in runs}), f"{uid}-layers"),
            )
        )
    name = run_dirs[0].name if len(run_dirs) == 1 else f"{len(runs)} runs"
    return [(f"pretraining: {name}", parts)]


def _runs_of(run_dir: Path) -> list[Path]:
    return (
        [Path(d) for d in json.loads((run_dir / "summary.json").read_text()).get("run_dirs", [])]
        if _compared(run_dir)
        else [run_dir]
    )


def _compared(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a comparison of pretraining runs (``sinklab compare`` or ``sinklab sweep``)."""
    return (html.read_summary(run_dir) or {}).get("kind") in ("pretrain-compare", "pretrain-sweep")
