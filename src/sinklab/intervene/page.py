"""The interventions' interactive report: per-layer share of attention at k before and after each
intervention, the lam curves, head-averaged attention maps before and after (an experiment
selector), and the trigger-model table. Maps show the first :data:`MAP_TOKENS` positions."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from safetensors.torch import load_file

from ..core import html
from . import report

MAP_TOKENS = 96


def is_run(run_dir: Path) -> bool:
    summary = run_dir / "summary.json"
    if not summary.exists():
        return False
    keys = json.loads(summary.read_text())
    return "baseline" in keys and "results" in keys or "lab_dir" in keys


def columns(run_dirs: list[Path]) -> list[tuple[str, list[html.Section]]]:
    return [(f"interventions: {run_dir.name}", sections(run_dir)) for run_dir in run_dirs]


def write(run_dir: Path) -> Path:
    return html.write_page(html.report_path(run_dir), f"sinklab intervene {run_dir.name}", columns([run_dir]))


def sections(run_dir: Path) -> list[html.Section]:
    summary = json.loads((run_dir / "summary.json").read_text())
    if "lab_dir" in summary:
        return [html.Section("Run", html.header(run_dir, "trigger-lab models", {"experiments": len(summary["experiments"])})),
                html.Section("Errors before and after", html.table(summary["results"], report.TRIGGER_INTERVENTION_COLUMNS))]
    uid, rows = html.dom_id(run_dir), report.intervention_rows(summary)
    figures = {"input": f"{summary['sequences']} x {summary['tokens']} tokens", "baseline ppl": summary["baseline"]["ppl"], "experiments": len(rows)}
    parts = [
        html.Section("Run", html.header(run_dir, summary["model"], figures)),
        html.Section("Before and after (means over layers)", html.table(rows, report.INTERVENTION_COLUMNS)),
        html.Section("Share of attention at k by layer (dotted: before)", html.plot(_share_by_layer(summary), f"{uid}-share", 420)),
    ]
    if any(r["lam"] is not None for r in summary["results"]):
        parts.append(html.Section("Mean-centred amplification against plain scaling", html.plot(_lam_curves(summary), f"{uid}-lam", 380)))
    if (run_dir / "maps.safetensors").exists():
        maps = load_file(str(run_dir / "maps.safetensors"))
        options = {label: html.plot(_before_after(maps["baseline"], maps[label], label), f"{uid}-map{i}", 520) for i, label in enumerate(k for k in maps if k != "baseline")}
        parts.append(html.Section("Head-averaged attention before and after", html.selector("intervention", options)))
    return parts


def _share_by_layer(summary: dict):
    import plotly.graph_objects as go

    fig = go.Figure()
    base = summary["baseline"]
    for label in report.strongest_per_kind(summary["results"]):
        r = next(x for x in summary["results"] if x["label"] == label)
        fig.add_trace(go.Scatter(y=r["share_at_k"], mode="lines+markers", name=html.esc(label)))
        fig.add_trace(go.Scatter(y=base["share_at"][str(r["k"])], mode="lines", line=dict(dash="dot"), name=f"before, k={r['k']}"))
    return fig.update_layout(xaxis_title="layer", yaxis_title="attention from later queries to k")


def _lam_curves(summary: dict):
    import plotly.graph_objects as go

    kinds: dict[str, list] = defaultdict(list)
    for r in summary["results"]:
        if r["lam"] is not None:
            kinds[f"{r['intervention']['type']} (k={r['k']})"].append((r["lam"], sum(r["share_at_k"]) / len(r["share_at_k"])))
    fig = go.Figure([go.Scatter(x=[p[0] for p in sorted(pts)], y=[p[1] for p in sorted(pts)], mode="lines+markers", name=kind) for kind, pts in kinds.items()])
    return fig.update_layout(xaxis=dict(type="log", title="lam"), yaxis_title="share of attention at k (mean over layers)")


def _before_after(before, after, label: str):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    n_layers, n = before.shape[0], min(before.shape[-1], MAP_TOKENS)
    layers = sorted({1, n_layers // 3, 2 * n_layers // 3, n_layers - 1} & set(range(n_layers)))
    fig = make_subplots(rows=2, cols=len(layers), subplot_titles=[f"{when}, layer {layer}" for when in ("before", "after") for layer in layers])
    for row, maps in enumerate((before, after)):
        for col, layer in enumerate(layers):
            fig.add_trace(go.Heatmap(z=maps[layer, :n, :n].float().tolist(), coloraxis="coloraxis", hovertemplate="query %{y}, key %{x}: %{z:.3f}<extra></extra>"), row=row + 1, col=col + 1)
    fig.update_yaxes(autorange="reversed")
    return fig.update_layout(title=html.esc(label), coloraxis=dict(colorscale="Viridis", cmin=0, cmax=1))
