"""The interventions' plots, each defined once (the PNG files and the report page draw the same
plotly figures): the share of attention at k by layer before and after, the lam curves, and
head-averaged attention maps before and after the strongest experiment of each kind.

The data is ``maps``: head-averaged attention (L, T, T) of the baseline (``"baseline"``) and of
each shown experiment (by label), float16, saved as ``maps.safetensors``; empty when the input was
too long for the recorder to keep patterns. Maps are drawn for the first :data:`MAP_TOKENS`
positions.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Optional

from safetensors.torch import load_file, save_file

from ..core import html
from ..core.atomic import atomic_path
from ..core.figures import GRID_TOP, layer_axis, title
from ..core.text import html_text
from ..scan import Record
from .frame import accuracy_rows
from .report import (
    ACCURACY_COLUMNS,
    INTERVENTION_COLUMNS,
    TRIGGER_INTERVENTION_COLUMNS,
    intervention_rows,
    layer_mean,
    strongest_per_kind,
)

MAP_TOKENS = 96
MAPS_FILE = "maps.safetensors"


def data_from(base_record: Record, records: dict[str, Record], summary: dict) -> dict:
    """Head-averaged attention before and after the strongest experiment of each kind (float16,
    as ``maps.safetensors`` holds it); no maps when the records kept no patterns."""
    if base_record.patterns is None:
        return {"maps": {}}
    shown = {label: records[label] for label in strongest_per_kind(summary["results"])}
    maps = {"baseline": base_record.patterns} | {label: record.patterns for label, record in shown.items()}
    return {"maps": {label: pattern.mean(1).half().cpu().contiguous() for label, pattern in maps.items()}}


def save_data(out: Path, data: dict) -> None:
    if data["maps"]:
        with atomic_path(Path(out) / MAPS_FILE) as tmp:
            save_file(data["maps"], str(tmp))


def read_data(run_dir: Path) -> dict:
    path = Path(run_dir) / MAPS_FILE
    return {"maps": load_file(str(path)) if path.exists() else {}}


def figures(summary: dict, data: dict) -> dict:
    """Every static figure of the run, by file name."""
    if "lab_dir" in summary:  # edits of trigger-lab models: a table only
        return {}
    built = {"share_by_layer.png": _share_by_layer(summary)}
    if _has_lam(summary):
        built["lam_curve.png"] = _lam_curves(summary)
    return built | {f"attention_{i}.png": fig for i, fig in enumerate(_before_after_maps(data).values())}


def sections(summary: dict, data: dict, uid: str, run_dir: Optional[Path] = None) -> list[html.Section]:
    """The report page: the header (``run.json`` when ``run_dir`` is given), the table and the plots."""
    if "lab_dir" in summary:
        return [
            html.Section("Run", html.header("trigger-lab models", {"experiments": len(summary["experiments"])}, run_dir)),
            html.Section("Errors before and after", html.table(summary["results"], TRIGGER_INTERVENTION_COLUMNS)),
        ]
    rows = intervention_rows(summary)
    figures = {
        "input": f"{summary['sequences']} x {summary['tokens']} tokens",
        "baseline ppl": summary["baseline"]["ppl"],
        "experiments": len(rows),
    }
    parts = [
        html.Section("Run", html.header(summary["model"], figures, run_dir)),
        html.Section("Before and after (means over layers)", html.table(rows, INTERVENTION_COLUMNS)),
        html.Section("Share of attention at k by layer (dotted: before)", html.plot(_share_by_layer(summary), f"{uid}-share")),
    ]
    if _has_lam(summary):
        parts.append(
            html.Section("Mean-centred amplification against plain scaling", html.plot(_lam_curves(summary), f"{uid}-lam"))
        )
    if summary.get("accuracy"):
        parts.append(
            html.Section(
                "Accuracy intact and edited (lm-eval, test split, paired)",
                html.table(list(accuracy_rows(summary)), ACCURACY_COLUMNS),
            )
        )
    maps = _before_after_maps(data)
    if maps:
        options = {label: html.plot(fig, f"{uid}-map{i}") for i, (label, fig) in enumerate(maps.items())}
        parts.append(html.Section("Head-averaged attention before and after", html.selector("intervention", options)))
    return parts


def _has_lam(summary: dict) -> bool:
    return any(r["lam"] is not None for r in summary["results"])


def _share_by_layer(summary: dict):
    import plotly.graph_objects as go

    fig = go.Figure()
    base = summary["baseline"]
    for label in strongest_per_kind(summary["results"]):
        r = next(x for x in summary["results"] if x["label"] == label)
        fig.add_trace(go.Scatter(y=r["share_at_k"], mode="lines+markers", name=html_text(label, 50)))
        fig.add_trace(
            go.Scatter(y=base["share_at"][str(r["k"])], mode="lines", line=dict(dash="dot"), name=f"before, k={r['k']}")
        )
    heading = title(html_text(summary["model"], 60), "share of attention at k, before (dotted) and after")
    return fig.update_layout(
        title=heading, xaxis=layer_axis(summary["layers"]), yaxis_title="attention from later queries to k", height=420
    )


def _lam_curves(summary: dict):
    import plotly.graph_objects as go

    kinds: dict[str, list] = defaultdict(list)
    for r in summary["results"]:
        if r["lam"] is not None:
            kinds[f"{r['intervention']['type']} (k={r['k']})"].append((r["lam"], layer_mean(r["share_at_k"])))
    fig = go.Figure(
        [
            go.Scatter(x=[p[0] for p in sorted(pts)], y=[p[1] for p in sorted(pts)], mode="lines+markers", name=html_text(kind))
            for kind, pts in kinds.items()
        ]
    )
    base = summary["baseline"]
    for k in sorted({r["k"] for r in summary["results"] if r["lam"] is not None}):
        fig.add_hline(
            y=layer_mean(base["share_at"][str(k)]), line_dash="dot", line_color="gray", annotation_text=f"baseline at k={k}"
        )
    return fig.update_layout(
        title="Mean-centred amplification against plain scaling",
        xaxis=dict(type="log", title="lam"),
        yaxis_title="share of attention at k (mean over layers)",
        height=380,
    )


def _before_after_maps(data: dict) -> dict:
    """One figure per shown experiment (label -> figure), in the order the maps were saved."""
    maps = data["maps"]
    return {label: _before_after(maps["baseline"], maps[label], label) for label in maps if label != "baseline"}


def _before_after(before, after, label: str):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    n_layers, n = before.shape[0], min(before.shape[-1], MAP_TOKENS)
    layers = sorted({1, n_layers // 3, 2 * n_layers // 3, n_layers - 1} & set(range(n_layers)))
    fig = make_subplots(
        rows=2, cols=len(layers), subplot_titles=[f"{when}, layer {layer}" for when in ("before", "after") for layer in layers]
    )
    for row, maps in enumerate((before, after)):
        for col, layer in enumerate(layers):
            fig.add_trace(
                go.Heatmap(
                    z=maps[layer, :n, :n].float().numpy(),
                    coloraxis="coloraxis",
                    hovertemplate="query %{y}, key %{x}: %{z:.3f}<extra></extra>",
                ),
                row=row + 1,
                col=col + 1,
            )
    fig.update_yaxes(autorange="reversed")
    return fig.update_layout(
        title=title(html_text(label, 60), "head-averaged attention"),
        coloraxis=dict(colorscale="Viridis", cmin=0, cmax=1),
        height=600,
        margin_t=GRID_TOP,
    )
