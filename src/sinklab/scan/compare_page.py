"""The comparison's page: the cross-model table and the first-token mass by layer (one line per
model; the same figure is the comparison's PNG), then each model's own scan report side by side."""

from __future__ import annotations

from pathlib import Path

from ..core import html
from ..core.figures import LEGEND_BELOW, layer_axis
from ..core.text import html_text
from . import page

KIND = "scan-compare"
FIGURE = "first_token_mass_by_layer.png"


def is_run(run_dir: Path) -> bool:
    return (html.read_summary(run_dir) or {}).get("kind") == KIND


def figures(summary: dict) -> dict:
    """The comparison's static figure, by file name."""
    return {FIGURE: _mass_by_layer(summary)}


def columns(run_dirs: list[Path]) -> list[tuple[str, list[html.Section]]]:
    """Per comparison: its own column, then one column per model (the model's scan report)."""
    result = []
    for run_dir in run_dirs:
        summary = html.read_summary(run_dir)
        result.append((f"scan comparison: {run_dir.name}", sections(run_dir, summary)))
        result += page.columns([run_dir / entry["run"] for entry in summary["models"]])
    return result


def write(run_dir: Path) -> Path:
    return html.write_page(html.report_path(run_dir), f"sinklab scan comparison {run_dir.name}", columns([run_dir]))


def sections(run_dir: Path, summary: dict) -> list[html.Section]:
    uid = html.dom_id(run_dir)
    return [
        html.Section("Run", html.header(None, {"models": len(summary["models"])}, run_dir)),
        html.Section("Models", html.table([table_row(entry) for entry in summary["models"]], table_columns(summary["settings"]))),
        html.Section("First-token attention mass by layer", html.plot(_mass_by_layer(summary), f"{uid}-by-layer")),
    ]


def table_columns(settings: dict) -> list[tuple[str, str, str]]:
    """(header, key, format) of the cross-model table, on the page and in the terminal."""
    return [
        ("model", "label", "s"),
        ("layers", "layers", "d"),
        (f"Sink_{settings['sink_k']}^{settings['eps']:g}", "sink", ".3f"),
        ("sink from layer", "sink_start_layer", "s"),
        ("largest massive activation", "massive", "s"),
        ("super neurons", "super", "d"),
        ("BOS prepended", "bos", "s"),
    ]


def table_row(entry: dict) -> dict:
    """An entry of summary.json as a row of :func:`table_columns` (text escaped where it is shown)."""
    top = entry["largest_massive_activation"]
    return {
        "label": entry["label"],
        "layers": entry["layers"],
        "sink": entry["sink_rate"]["value"],
        "sink_start_layer": "none" if entry["sink_start_layer"] is None else str(entry["sink_start_layer"]),
        "massive": f"{top['value']:.1f} (layer {top['layer']}, dim {top['dim']})" if top else "none",
        "super": len(entry["super_neurons"]),
        "bos": "yes" if entry["bos_prepended"] else "no",
    }


def _mass_by_layer(summary: dict):
    import plotly.graph_objects as go

    fig = go.Figure(
        [
            go.Scatter(y=entry["first_token_mass_by_layer"], name=html_text(entry["label"], 40), mode="lines+markers")
            for entry in summary["models"]
        ]
    )
    return fig.update_layout(
        title="First-token attention mass by layer",
        xaxis=layer_axis(max(entry["layers"] for entry in summary["models"])),
        yaxis=dict(title="mean first-token mass", range=[0, 1.05]),
        legend=LEGEND_BELOW,
        height=400,
    )
