"""The stream's interactive report: NLL against position for every policy (hover the curves),
per-token latency along the stream, and the sink-count ablation. NLL curves are binned to about
:data:`POINTS` points (the mean NLL of each bin), since one token's NLL is too noisy to read."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..core import html
from .report import STREAM_COLUMNS, stream_rows

POINTS = 200
CHECK_COLUMNS = [("positions from", "start", "d"), ("to", "end", "d"), ("ppl, one pass", "ppl_one_pass", ".3f"),
                 ("ppl, real cache", "ppl_real_cache", ".3f"), ("max |dNLL|", "max_abs_nll_difference", ".1e")]


def is_run(run_dir: Path) -> bool:
    summary = run_dir / "summary.json"
    return summary.exists() and "policies" in json.loads(summary.read_text())


def columns(run_dirs: list[Path]) -> list[tuple[str, list[html.Section]]]:
    return [(f"stream: {run_dir.name}", sections(run_dir)) for run_dir in run_dirs]


def write(run_dir: Path) -> Path:
    return html.write_page(html.report_path(run_dir), f"sinklab stream {run_dir.name}", columns([run_dir]))


def sections(run_dir: Path) -> list[html.Section]:
    s = json.loads((run_dir / "summary.json").read_text())
    uid = html.dom_id(run_dir)
    check = s.get("one_pass_check") or {}
    figures = {"tokens": s["tokens"], "cache": f"{s['sinks']} sinks + {s['window']} recent", "trained context": s.get("max_positions"),
               **{f"ppl {p}": e["ppl"] for p, e in s["policies"].items()}, "one-pass check, max |dNLL|": check.get("max_abs_nll_difference")}
    parts = [html.Section("Run", html.header(run_dir, s["model"], figures)), html.Section("Policies", html.table(stream_rows(s), STREAM_COLUMNS))]
    if (run_dir / "nll.safetensors").exists():
        parts.append(html.Section(f"NLL against position (means over bins of {max(1, math.ceil(s['tokens'] / POINTS))} positions)", html.plot(_nll(load_file(str(run_dir / "nll.safetensors")), s), f"{uid}-nll", 420)))
    parts.append(html.Section("Per-token latency along the stream", html.plot(_latency(s), f"{uid}-latency", 360)))
    if check.get("by_chunk"):
        title = f"One-pass scores against a real {check['policy']} cache, token by token (tolerance {check['tolerance']:g} nats)"
        parts.append(html.Section(title, html.table(check["by_chunk"], CHECK_COLUMNS)))
    if s.get("ablation"):
        parts.append(html.Section("Sink count at the same cache size", html.plot(_ablation(s), f"{uid}-ablation", 320)))
    return parts


def _binned(positions: torch.Tensor, nll: torch.Tensor) -> tuple[list[float], list[float]]:
    width = max(1, math.ceil(len(nll) / POINTS))
    n = len(nll) // width * width or len(nll)
    if width == 1 or n < width:
        return positions.tolist(), nll.tolist()
    return positions[:n].view(-1, width).float().mean(1).tolist(), nll[:n].view(-1, width).mean(1).tolist()


def _nll(curves: dict, s: dict):
    import plotly.graph_objects as go

    fig = go.Figure()
    for policy in s["policies"]:
        if policy in curves:
            x, y = _binned(curves[f"{policy}.positions"], curves[policy])
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=policy, hovertemplate=f"{policy}<br>position %{{x:.0f}}<br>NLL %{{y:.3f}}<extra></extra>"))
    if s.get("max_positions") and s["max_positions"] < s["tokens"]:
        fig.add_vline(x=s["max_positions"], line_dash="dash", line_color="gray", annotation_text="trained context")
    return fig.update_layout(xaxis_title="position in the stream", yaxis_title="NLL (nats)")


def _latency(s: dict):
    import plotly.graph_objects as go

    fig = go.Figure([go.Scatter(x=[c.get("measured_at", c["start"]) for c in e.get("ms_per_token_by_chunk", [])], y=[c["ms"] for c in e.get("ms_per_token_by_chunk", [])],
                                mode="lines+markers", name=p) for p, e in s["policies"].items()])
    return fig.update_layout(xaxis_title="position in the stream", yaxis=dict(type="log", title="ms per token"))


def _ablation(s: dict):
    import plotly.graph_objects as go

    counts = sorted(s["ablation"], key=int)
    fig = go.Figure(go.Bar(x=[f"{n} sinks" for n in counts], y=[s["ablation"][n]["ppl"] for n in counts]))
    return fig.update_layout(yaxis_title="perplexity", xaxis_title=f"same total cache of {s['sinks'] + s['window']} tokens")
