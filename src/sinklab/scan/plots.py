"""The scan's plots, each defined once: the PNG files of a run directory and the report page
(:mod:`.page`) are drawn from the same plotly figures (:data:`FIGURES`), built from a summary and the
scan's data.

The data is what a scan keeps beside its summary: ``record`` (the :class:`~.recorder.Record`'s
tensors, float32, e.g. ``column0`` (L, H, T): the mean attention each query row puts on position 0)
and ``tokens`` (ids and token strings of the first sequences), saved as ``record.safetensors`` and
``tokens.json``. Position curves are binned to at most :data:`MAX_POINTS` points (the maximum of
each bin for |h|, the mean for the rest), so that a long scan's page stays small.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..core.atomic import atomic_path, write_json
from ..core.figures import GRID_TOP, LEGEND_BELOW, layer_axis, title
from ..core.text import html_text
from .recorder import Record

MAX_POINTS = 1024
RECORD_FILE, TOKENS_FILE = "record.safetensors", "tokens.json"


def data_from(record: Record, tokens: dict) -> dict:
    """The scan's data from its record and the ids and strings of its first sequences
    (``scan.run.scanned_tokens``): tensors float32 on the CPU, as ``record.safetensors`` holds them."""
    tensors = {key: value for key, value in vars(record).items() if isinstance(value, torch.Tensor)}
    tensors.update({f"column{k}": value for k, value in record.columns.items()})
    return {"record": {key: value.detach().float().cpu().contiguous() for key, value in tensors.items()}, "tokens": tokens}


def save_data(out: Path, data: dict) -> None:
    """``record.safetensors`` (no pickle) and ``tokens.json``, each written atomically."""
    with atomic_path(Path(out) / RECORD_FILE) as tmp:
        save_file(data["record"], str(tmp))
    write_json(Path(out) / TOKENS_FILE, data["tokens"])


def read_data(run_dir: Path) -> dict:
    """The data :func:`save_data` wrote (a run without ``tokens.json`` has no token strings)."""
    tokens = Path(run_dir) / TOKENS_FILE
    return {
        "record": load_file(str(Path(run_dir) / RECORD_FILE)),
        "tokens": json.loads(tokens.read_text()) if tokens.exists() else {"ids": [], "strings": []},
    }


def figures(summary: dict, data: dict) -> dict:
    """Every static figure of the scan, by file name."""
    built = {name: build(summary, data) for name, build in FIGURES.items()}
    return {name: fig for name, fig in built.items() if fig is not None}


def _title(s: dict, what: str) -> dict:
    return title(html_text(s["model"], 60), what)


def _first_token_mass(s: dict, data: dict):
    import plotly.graph_objects as go

    fig = go.Figure(
        go.Heatmap(
            z=s["first_token_mass"],
            zmin=0,
            zmax=1,
            colorscale="Viridis",
            colorbar=dict(title="mass"),
            hovertemplate="layer %{y}, head %{x}<br>first-token mass %{z:.3f}<extra></extra>",
        )
    )
    return fig.update_layout(
        title=_title(s, f"mean attention on position 0, T = {s['tokens']}"),
        xaxis=dict(title="head", dtick=1),
        yaxis=layer_axis(s["layers"]),
        height=420,
    )


def _sink_share(s: dict, data: dict):
    import plotly.graph_objects as go

    layers, rate = list(range(s["layers"])), s["sink_rate"]
    fig = go.Figure(
        [
            go.Bar(x=layers, y=s["sink_share_by_layer"], name=f"heads with alpha_{rate['k']} > {rate['eps']:g}", opacity=0.6),
            go.Scatter(x=layers, y=s["first_token_mass_by_layer"], name="mean first-token mass", mode="lines+markers"),
        ]
    )
    return fig.update_layout(
        title=_title(s, f"Sink_{rate['k']}^{rate['eps']:g} = {rate['value']:.2f}"),
        xaxis=layer_axis(s["layers"]),
        yaxis=dict(range=[0, 1.05]),
        legend=LEGEND_BELOW,
        height=360,
    )


def _binned(values: torch.Tensor, reduce: str) -> tuple[list[int], torch.Tensor]:
    """(..., T) -> at most MAX_POINTS columns: the first position of each bin and its max or mean."""
    T = values.shape[-1]
    width = max(1, -(-T // MAX_POINTS))
    pad = (-T) % width
    padded = torch.nn.functional.pad(values, (0, pad), value=float("nan"))
    bins = padded.reshape(*values.shape[:-1], -1, width)
    reduced = bins.nan_to_num(float("-inf")).amax(-1) if reduce == "max" else bins.nanmean(-1)
    return list(range(0, T, width)), reduced


def _massive_activations(s: dict, data: dict):
    import plotly.graph_objects as go

    positions, peak = _binned(data["record"]["max_abs"].double(), "max")
    fig = go.Figure(
        go.Heatmap(
            z=peak.clamp_min(1e-3).log10().float().numpy(),
            x=positions,
            colorscale="Magma",
            colorbar=dict(title="log10 max|h|"),
            hovertemplate="layer %{y}, position %{x}<br>log10 max|h| %{z:.2f}<extra></extra>",
        )
    )
    hits, strings = s["massive_activations"], data["tokens"]["strings"]
    if hits:
        first = strings[0] if strings else []
        text = [
            f"layer {e['layer']}, position {e['position']}, dim {e['dim']}"
            f"<br>value {e['value']:.1f} in {e['sequences']} sequence(s)"
            f"<br>token (sequence 0): {html_text(first[e['position']], 30) if e['position'] < len(first) else '?'}"
            for e in hits
        ]
        fig.add_trace(
            go.Scatter(
                x=[e["position"] for e in hits],
                y=[e["layer"] for e in hits],
                mode="markers",
                name="massive activations",
                marker=dict(color="cyan", size=8, line=dict(color="black", width=1)),
                text=text,
                hovertemplate="%{text}<extra></extra>",
            )
        )
    return fig.update_layout(
        title=_title(s, "largest |h| of the residual stream; markers: massive activations"),
        xaxis_title="position",
        yaxis=layer_axis(s["layers"]),
        showlegend=False,
        height=420,
    )


def _dominance_ratio(s: dict, data: dict):
    import plotly.graph_objects as go

    fig = go.Figure(
        [
            go.Scatter(y=s["dominance_ratio_first"], name="first token", mode="lines+markers"),
            go.Scatter(y=s["dominance_ratio_rest"], name="other positions (mean)", mode="lines+markers"),
        ]
    )
    return fig.update_layout(
        title=_title(s, "dimension disparity (dominance ratio)"),
        xaxis=layer_axis(s["layers"]),
        yaxis=dict(type="log", title="max|h| / mean|h|"),
        height=340,
    )


def _variance_by_position(s: dict, data: dict):
    import plotly.graph_objects as go

    if not s.get("variance_by_position"):
        return None
    positions, variance = _binned(torch.tensor(s["variance_by_position"], dtype=torch.float64), "mean")
    n = variance.shape[0]
    fig = go.Figure(
        [
            go.Scatter(x=positions, y=variance[layer].tolist(), name=f"layer {layer}")
            for layer in sorted({0, n // 4, n // 2, 3 * n // 4, n - 1})
        ]
    )
    return fig.update_layout(
        title=_title(s, "variance of the attention output by position"),
        xaxis_title="position",
        yaxis=dict(type="log", title="variance across sequences"),
        height=360,
    )


def _attention(s: dict, data: dict):
    """Head-averaged attention patterns of a few layers side by side (a PNG; the page shows each head)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    patterns = data["record"].get("patterns")
    if patterns is None:
        return None
    n = patterns.shape[0]
    layers = sorted({0, 1, n // 2, n - 1} & set(range(n)))
    fig = make_subplots(1, len(layers), subplot_titles=[f"layer {layer}" for layer in layers], horizontal_spacing=0.06)
    for col, layer in enumerate(layers, start=1):
        fig.add_trace(
            go.Heatmap(
                z=patterns[layer].mean(0).float().numpy(),
                coloraxis="coloraxis",
                hovertemplate="query %{y}, key %{x}: %{z:.3f}<extra></extra>",
            ),
            1,
            col,
        )
    fig.update_yaxes(autorange="reversed").update_yaxes(title_text="query", col=1).update_xaxes(title_text="key")
    return fig.update_layout(
        title=_title(s, "mean attention (heads averaged)"),
        coloraxis=dict(colorscale="Viridis", cmin=0, cmax=1),
        width=max(900, 300 * len(layers)),
        height=420,
        margin_t=GRID_TOP,
    )


#: Every figure of a scan, by file name: ``build(summary, data)``, None where it does not apply.
FIGURES = {
    "first_token_mass.png": _first_token_mass,
    "sink_share.png": _sink_share,
    "massive_activations.png": _massive_activations,
    "dominance_ratio.png": _dominance_ratio,
    "variance_by_position.png": _variance_by_position,
    "attention.png": _attention,
}
