"""The scan's interactive report: click a layer x head cell of the first-token-mass heatmap to see
that head's mean attention map with the scanned tokens on both axes; hover massive activations for
their layer, position, dimension, value and token.

Caps, so that a long scan's page stays small: attention maps (kept by the scanner for inputs of at
most 256 tokens) are shown for the first :data:`MAP_TOKENS` positions, stored as bytes (weights
clipped to [0, 1], 1/255 resolution); position curves are binned to at most :data:`MAX_POINTS`
points (the maximum of each bin for |h|, the mean for the rest).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..core import html
from ..core.text import html_text

MAP_TOKENS = 96
MAX_POINTS = 1024
SUMMARY, RECORD, TOKENS = "summary.json", "record.safetensors", "tokens.json"


def is_run(run_dir: Path) -> bool:
    return (run_dir / RECORD).exists() and (run_dir / SUMMARY).exists()


def columns(run_dirs: list[Path]) -> list[tuple[str, list[html.Section]]]:
    return [(f"scan: {run_dir.name}", sections(run_dir)) for run_dir in run_dirs]


def write(run_dir: Path) -> Path:
    return html.write_page(html.report_path(run_dir), f"sinklab scan {run_dir.name}", columns([run_dir]))


def sections(run_dir: Path) -> list[html.Section]:
    summary = json.loads((run_dir / SUMMARY).read_text())
    record = load_file(str(run_dir / RECORD))
    tokens = json.loads((run_dir / TOKENS).read_text()) if (run_dir / TOKENS).exists() else {"strings": []}
    labels = [[f"{i}: {html_text(t, 24)}" for i, t in enumerate(row)] for row in tokens["strings"]]
    uid = html.dom_id(run_dir)
    return [
        html.Section("Run", html.header(run_dir, summary["model"], _key_figures(summary))),
        html.Section("First-token attention mass (click a cell)", _mass_and_maps(summary, record, labels, uid)),
        html.Section("Sink share by layer", html.plot(_sink_share(summary), f"{uid}-share", 320)),
        html.Section("Massive activations (hover for details)", html.plot(_massive(summary, record, tokens["strings"]), f"{uid}-massive", 420)),
        html.Section("Dominance ratio", html.plot(_dominance(summary), f"{uid}-dominance", 320)),
        *([html.Section("Variance of the attention output by position", html.plot(_variance(summary), f"{uid}-variance", 340))] if summary.get("variance_by_position") else []),
        html.Section("Super neurons", _super_neurons(summary)),
        html.Section("Secondary sinks", _secondary(summary)),
        html.Section("Scanned tokens (sequence 0)", _token_table(tokens["strings"][:1])),
    ]


def _key_figures(s: dict) -> dict:
    top = s["massive_activations"][0] if s["massive_activations"] else None
    return {
        "input": f"{s['sequences']} x {s['tokens']} tokens ({s['inputs']['kind']}, BOS {'prepended' if s['bos_prepended'] else 'not prepended'})",
        "loss / ppl": f"{s['loss']:.3f} / {s['ppl']:.1f}",
        f"Sink_{s['sink_rate']['k']}^{s['sink_rate']['eps']:g}": f"{s['sink_rate']['value']:.3f}",
        "sink share >= 0.5 from layer": s["sink_start_layer"],
        "largest massive activation": f"{top['value']:.1f} (layer {top['layer']}, position {top['position']}, dim {top['dim']})" if top else "none",
        "super neurons": len(s["super_neurons"]),
    }


def _encoded_maps(patterns: torch.Tensor) -> list[list[str]]:
    """(L, H, T, T) weights as base64 bytes per head, the first MAP_TOKENS positions."""
    n = min(patterns.shape[-1], MAP_TOKENS)
    as_bytes = (patterns[..., :n, :n].clamp(0, 1) * 255).round().to(torch.uint8)
    return [[base64.b64encode(as_bytes[layer, head].numpy().tobytes()).decode() for head in range(as_bytes.shape[1])] for layer in range(as_bytes.shape[0])]


def _mass_and_maps(summary: dict, record: dict, labels: list[list[str]], uid: str) -> str:
    import plotly.graph_objects as go

    mass = go.Figure(go.Heatmap(z=summary["first_token_mass"], zmin=0, zmax=1, colorscale="Viridis", colorbar=dict(title="mass"),
                                hovertemplate="layer %{y}, head %{x}<br>first-token mass %{z:.3f}<extra></extra>"))
    mass.update_layout(title="mean attention on position 0 (queries from --min-query)", xaxis=dict(title="head", dtick=1), yaxis=dict(title="layer", dtick=1))
    body = html.plot(mass, f"{uid}-mass", 420)
    if "patterns" not in record:
        return body + "<p class='note'>Per-head attention maps are kept for scans of at most 256 tokens.</p>"
    maps = _encoded_maps(record["patterns"])
    n = min(record["patterns"].shape[-1], MAP_TOKENS)
    shown = [row[:n] for row in labels] or [[str(i) for i in range(n)]]
    detail = f'<div class="plot" id="{uid}-map"></div>'
    choose = ""
    if len(shown) > 1:
        options = "".join(f'<option value="{i}">sequence {i}</option>' for i in range(len(shown)))
        choose = f"<label class='note'>token labels from <select id='{uid}-seq'>{options}</select></label>"
    script = f"""<script>(function(){{
var maps={html.script_json(maps)}, labels={html.script_json(shown)}, gd=document.getElementById('{uid}-mass'), out='{uid}-map', cur=[0,0];
function draw(l,h){{cur=[l,h];var raw=atob(maps[l][h]), n=Math.round(Math.sqrt(raw.length)), z=[];
 for(var i=0;i<n;i++){{var row=[];for(var j=0;j<n;j++)row.push(raw.charCodeAt(i*n+j)/255);z.push(row);}}
 var sel=document.getElementById('{uid}-seq'), lab=labels[sel?+sel.value:0].slice(0,n), idx=lab.map(function(_,i){{return i;}});
 Plotly.react(out,[{{type:'heatmap',z:z,x:idx,y:idx,zmin:0,zmax:1,colorscale:'Viridis',customdata:z.map(function(r,i){{return r.map(function(_,j){{return [lab[i],lab[j]];}});}}),
  hovertemplate:'query %{{customdata[0]}}<br>key %{{customdata[1]}}<br>weight %{{z:.3f}}<extra></extra>'}}],
  {{title:{{text:'layer '+l+', head '+h+': mean attention over the scanned sequences'}},height:560,template:'plotly_white',
   xaxis:{{title:{{text:'key'}},tickvals:idx,ticktext:lab,tickfont:{{size:8}},constrain:'domain'}},yaxis:{{title:{{text:'query'}},autorange:'reversed',scaleanchor:'x',tickvals:idx,ticktext:lab,tickfont:{{size:8}},constrain:'domain'}},
   margin:{{l:140,r:20,t:50,b:140}}}},{html.script_json(html.PLOT_CONFIG)});}}
var sel=document.getElementById('{uid}-seq'); if(sel)sel.onchange=function(){{draw(cur[0],cur[1]);}};
gd.on('plotly_click',function(ev){{var p=ev.points[0];draw(p.y,p.x);}});
var m={html.script_json(summary["first_token_mass"])}, best=[0,0];
m.forEach(function(r,l){{r.forEach(function(v,h){{if(v>m[best[0]][best[1]])best=[l,h];}});}}); draw(best[0],best[1]);
}})();</script>"""
    note = f"<p class='note'>Maps of the first {n} of {summary['tokens']} positions at 1/255 resolution; the head with the largest first-token mass is shown first.</p>"
    return body + choose + detail + note + script


def _sink_share(s: dict):
    import plotly.graph_objects as go

    layers = list(range(s["layers"]))
    fig = go.Figure([go.Bar(x=layers, y=s["sink_share_by_layer"], name=f"heads with alpha_{s['sink_rate']['k']} > {s['sink_rate']['eps']:g}", opacity=0.6),
                     go.Scatter(x=layers, y=s["first_token_mass_by_layer"], name="mean first-token mass", mode="lines+markers")])
    return fig.update_layout(xaxis_title="layer", yaxis=dict(range=[0, 1.05]), legend=dict(orientation="h"))


def _binned(values: torch.Tensor, reduce: str) -> tuple[list[int], torch.Tensor]:
    """(..., T) -> at most MAX_POINTS columns: the first position of each bin and its max or mean."""
    T = values.shape[-1]
    width = max(1, -(-T // MAX_POINTS))
    pad = (-T) % width
    padded = torch.nn.functional.pad(values, (0, pad), value=float("nan"))
    bins = padded.reshape(*values.shape[:-1], -1, width)
    reduced = bins.nan_to_num(float("-inf")).amax(-1) if reduce == "max" else bins.nanmean(-1)
    return list(range(0, T, width)), reduced


def _massive(s: dict, record: dict, strings: list[list[str]]):
    import plotly.graph_objects as go

    positions, peak = _binned(record["max_abs"].double(), "max")
    fig = go.Figure(go.Heatmap(z=peak.clamp_min(1e-3).log10().tolist(), x=positions, colorscale="Magma", colorbar=dict(title="log10 max|h|"),
                               hovertemplate="layer %{y}, position %{x}<br>log10 max|h| %{z:.2f}<extra></extra>"))
    hits = s["massive_activations"]
    if hits:
        first = strings[0] if strings else []
        text = [f"layer {e['layer']}, position {e['position']}, dim {e['dim']}<br>value {e['value']:.1f} in {e['sequences']} sequence(s)"
                f"<br>token (sequence 0): {html_text(first[e['position']], 30) if e['position'] < len(first) else '?'}" for e in hits]
        fig.add_trace(go.Scatter(x=[e["position"] for e in hits], y=[e["layer"] for e in hits], mode="markers", name="massive activations",
                                 marker=dict(color="cyan", size=8, line=dict(color="black", width=1)), text=text, hovertemplate="%{text}<extra></extra>"))
    return fig.update_layout(title="largest |h| of the residual stream; markers: massive activations", xaxis_title="position", yaxis_title="layer", showlegend=False)


def _dominance(s: dict):
    import plotly.graph_objects as go

    fig = go.Figure([go.Scatter(y=s["dominance_ratio_first"], name="first token", mode="lines+markers"),
                     go.Scatter(y=s["dominance_ratio_rest"], name="other positions (mean)", mode="lines+markers")])
    return fig.update_layout(xaxis_title="layer", yaxis=dict(type="log", title="max|h| / mean|h|"))


def _variance(s: dict):
    import plotly.graph_objects as go

    positions, variance = _binned(torch.tensor(s["variance_by_position"], dtype=torch.float64), "mean")
    n = variance.shape[0]
    fig = go.Figure([go.Scatter(x=positions, y=variance[layer].tolist(), name=f"layer {layer}") for layer in sorted({0, n // 4, n // 2, 3 * n // 4, n - 1})])
    return fig.update_layout(xaxis_title="position", yaxis=dict(type="log", title="variance across sequences"))


def _super_neurons(s: dict) -> str:
    rows = [{**n, "writes": ", ".join(f"{w['dim']} ({w['magnitude']:.0f})" for w in n.get("writes_to", []))} for n in s["super_neurons"]]
    if not rows:
        return "<p class='note'>none above the thresholds</p>"
    return html.table(rows, [("layer", "layer", "d"), ("neuron", "neuron", "d"), ("mean |a| at 0", "act_first", ".1f"),
                             ("mean |a| elsewhere", "act_rest_mean", ".3f"), ("ratio", "ratio", ".0f"), ("writes to dims (magnitude)", "writes", "s")])


def _secondary(s: dict) -> str:
    rows = [{**e, "token": " | ".join(e["tokens"])} for e in s["secondary_sinks"]]
    if not rows:
        return "<p class='note'>none</p>"
    return html.table(rows, [("position", "position", "d"), ("mean alpha", "alpha_mean", ".3f"), ("tokens there (first sequences)", "token", "s")])


def _token_table(strings: list[list[str]]) -> str:
    if not strings:
        return "<p class='note'>not recorded</p>"
    shown = strings[0][:MAX_POINTS]
    return html.table([{"position": i, "token": t} for i, t in enumerate(shown)], [("position", "position", "d"), ("token", "token", "s")])
