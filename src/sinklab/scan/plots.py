"""The scan's plots, each defined once: the PNG files of a run directory and the report page are
drawn from the same plotly figures (:data:`FIGURES`), built from a summary and the scan's data.

The data is what a scan keeps beside its summary: ``record`` (the :class:`~.recorder.Record`'s
tensors, float32, e.g. ``column0`` (L, H, T): the mean attention each query row puts on position 0)
and ``tokens`` (ids and token strings of the first sequences), saved as ``record.safetensors`` and
``tokens.json``. On the page, click a layer x head cell of the first-token-mass heatmap to see that
head's mean attention map with the scanned tokens on both axes; hover massive activations for their
layer, position, dimension, value and token.

Caps, so that a long scan's page stays small: attention maps (kept by the scanner for inputs of at
most 256 tokens) are shown for the first :data:`MAP_TOKENS` positions, stored as bytes (weights
clipped to [0, 1], 1/255 resolution); position curves are binned to at most :data:`MAX_POINTS`
points (the maximum of each bin for |h|, the mean for the rest).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Optional

import torch
from safetensors.torch import load_file, save_file

from ..core import html
from ..core.figures import GRID_TOP, LEGEND_BELOW, layer_axis, title
from ..core.runs import atomic_path, write_json
from ..core.text import html_text
from . import page_tables
from .recorder import Record

MAP_TOKENS = 96
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


def sections(summary: dict, data: dict, uid: str, run_dir: Optional[Path] = None) -> list[html.Section]:
    """The report page: the header (``run.json`` when ``run_dir`` is given) and the scan's sections."""
    strings = data["tokens"]["strings"]

    def plot(name: str) -> str:
        return html.plot(FIGURES[name](summary, data), f"{uid}-{name.split('.')[0]}")

    return [
        html.Section("Run", html.header(summary["model"], key_figures(summary), run_dir)),
        html.Section("First-token attention mass (click a cell)", _mass_and_maps(summary, data, uid)),
        html.Section("Sink share by layer", plot("sink_share.png")),
        html.Section("Massive activations (hover for details)", plot("massive_activations.png")),
        html.Section("Dominance ratio", plot("dominance_ratio.png")),
        *(
            [html.Section("Variance of the attention output by position", plot("variance_by_position.png"))]
            if summary.get("variance_by_position")
            else []
        ),
        html.Section("Super neurons", page_tables.super_neurons(summary)),
        html.Section("Secondary sinks", page_tables.secondary_sinks(summary)),
        html.Section("Scanned tokens (sequence 0)", page_tables.token_table(strings[:1], MAX_POINTS)),
    ]


def key_figures(s: dict) -> dict:
    top = s["massive_activations"][0] if s["massive_activations"] else None
    return {
        "input": (
            f"{s['sequences']} x {s['tokens']} tokens "
            f"({s['inputs']['kind']}, BOS {'prepended' if s['bos_prepended'] else 'not prepended'})"
        ),
        "loss / ppl": f"{s['loss']:.3f} / {s['ppl']:.1f}",
        f"Sink_{s['sink_rate']['k']}^{s['sink_rate']['eps']:g}": f"{s['sink_rate']['value']:.3f}",
        "sink share >= 0.5 from layer": s["sink_start_layer"],
        "largest massive activation": f"{top['value']:.1f} (layer {top['layer']}, position {top['position']}, dim {top['dim']})"
        if top
        else "none",
        "super neurons": len(s["super_neurons"]),
    }


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


def _encoded_maps(patterns: torch.Tensor) -> list[list[str]]:
    """(L, H, T, T) weights as base64 bytes per head, the first MAP_TOKENS positions."""
    n = min(patterns.shape[-1], MAP_TOKENS)
    as_bytes = (patterns[..., :n, :n].clamp(0, 1) * 255).round().to(torch.uint8)
    return [
        [base64.b64encode(as_bytes[layer, head].numpy().tobytes()).decode() for head in range(as_bytes.shape[1])]
        for layer in range(as_bytes.shape[0])
    ]


def _mass_and_maps(summary: dict, data: dict, uid: str) -> str:
    """The first-token-mass heatmap and, under it, the map of the head clicked (drawn in the page's script)."""
    body = html.plot(_first_token_mass(summary, data), f"{uid}-mass")
    record = data["record"]
    if "patterns" not in record:
        return body + "<p class='note'>Per-head attention maps are kept for scans of at most 256 tokens.</p>"
    maps = _encoded_maps(record["patterns"])
    n = min(record["patterns"].shape[-1], MAP_TOKENS)
    labels = [[f"{i}: {html_text(t, 24)}" for i, t in enumerate(row[:n])] for row in data["tokens"]["strings"]]
    shown = labels or [[str(i) for i in range(n)]]
    detail = f'<div class="plot" id="{uid}-map"></div>'
    choose = ""
    if len(shown) > 1:
        options = "".join(f'<option value="{i}">sequence {i}</option>' for i in range(len(shown)))
        choose = f"<label class='note'>token labels from <select id='{uid}-seq'>{options}</select></label>"
    script = html.when_laid_out(f"""
var maps={html.script_json(maps)}, labels={html.script_json(shown)},\
 gd=document.getElementById('{uid}-mass'), out='{uid}-map', cur=[0,0];
function draw(l,h){{cur=[l,h];var raw=atob(maps[l][h]), n=Math.round(Math.sqrt(raw.length)), z=[];
 for(var i=0;i<n;i++){{var row=[];for(var j=0;j<n;j++)row.push(raw.charCodeAt(i*n+j)/255);z.push(row);}}
 var sel=document.getElementById('{uid}-seq'), lab=labels[sel?+sel.value:0].slice(0,n), idx=lab.map(function(_,i){{return i;}});
 Plotly.react(out,[{{type:'heatmap',z:z,x:idx,y:idx,zmin:0,zmax:1,colorscale:'Viridis',\
customdata:z.map(function(r,i){{return r.map(function(_,j){{return [lab[i],lab[j]];}});}}),
  hovertemplate:'query %{{customdata[0]}}<br>key %{{customdata[1]}}<br>weight %{{z:.3f}}<extra></extra>'}}],
  {{title:{{text:'layer '+l+', head '+h+': mean attention over the scanned sequences'}},height:560,template:'plotly_white',
   xaxis:{{title:{{text:'key'}},tickvals:idx,ticktext:lab,tickfont:{{size:8}},constrain:'domain'}},yaxis:{{title:{{text:'query'}},autorange:'reversed',scaleanchor:'x',tickvals:idx,ticktext:lab,tickfont:{{size:8}},constrain:'domain'}},
   margin:{{l:140,r:20,t:50,b:140}}}},{html.script_json(html.PLOT_CONFIG)});}}
var sel=document.getElementById('{uid}-seq'); if(sel)sel.onchange=function(){{draw(cur[0],cur[1]);}};
gd.on('plotly_click',function(ev){{var p=ev.points[0];draw(p.y,p.x);}});
var m={html.script_json(summary["first_token_mass"])}, best=[0,0];
m.forEach(function(r,l){{r.forEach(function(v,h){{if(v>m[best[0]][best[1]])best=[l,h];}});}}); draw(best[0],best[1]);
""")
    note = (
        f"<p class='note'>Maps of the first {n} of {summary['tokens']} positions at 1/255 resolution; "
        "the head with the largest first-token mass is shown first.</p>"
    )
    return body + choose + detail + note + script
