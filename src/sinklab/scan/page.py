"""The scan's report page, from a run directory or from a result in memory: its sections (the
figures of :mod:`.plots`, the tables of :mod:`.page_tables`) and, under the first-token-mass heatmap,
the attention map of the head clicked, drawn in the page's script.

Hover massive activations for their layer, position, dimension, value and token. Attention maps
(kept by the scanner for inputs of at most 256 tokens) are shown for the first :data:`MAP_TOKENS`
positions, stored as bytes (weights clipped to [0, 1], 1/255 resolution), so that the page stays small.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Optional

import torch

from ..core import html
from ..core.runs import SUMMARY
from ..core.text import html_text
from . import page_tables, plots

MAP_TOKENS = 96


def sections(summary: dict, data: dict, uid: str, run_dir: Optional[Path] = None) -> list[html.Section]:
    """The report page: the header (``run.json`` when ``run_dir`` is given) and the scan's sections."""
    strings = data["tokens"]["strings"]

    def plot(name: str) -> str:
        return html.plot(plots.FIGURES[name](summary, data), f"{uid}-{name.split('.')[0]}")

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
        html.Section("Scanned tokens (sequence 0)", page_tables.token_table(strings[:1], plots.MAX_POINTS)),
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
    body = html.plot(plots.FIGURES["first_token_mass.png"](summary, data), f"{uid}-mass")
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


PAGE = html.RunPage("scan", "scan", plots.read_data, sections)
columns, write, write_page = PAGE.columns, PAGE.write, PAGE.write_result


def is_run(run_dir: Path) -> bool:
    return (run_dir / plots.RECORD_FILE).exists() and (run_dir / SUMMARY).exists()
