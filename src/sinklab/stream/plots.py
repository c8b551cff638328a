"""The stream's plots, each defined once (the PNG files and the report page draw the same plotly
figures): NLL against position for every policy, per-token latency along the stream, and the
sink-count ablation.

The data is ``nll``: every policy's per-position NLL (``<policy>``, nats, float32) and the
positions it was scored at (``<policy>.positions``), saved as ``nll.safetensors``. NLL curves are
drawn as means over bins of about 1/:data:`POINTS` of the stream, since one token's NLL is too
noisy to read.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import torch
from safetensors.torch import load_file, save_file

from ..core import html
from ..core.atomic import atomic_path
from ..core.figures import title
from ..core.text import html_text
from .report import STREAM_COLUMNS, policy_rows

POINTS = 200
CURVES_FILE = "nll.safetensors"
CHECK_COLUMNS = [
    ("positions from", "start", "d"),
    ("to", "end", "d"),
    ("ppl, one pass", "ppl_one_pass", ".3f"),
    ("ppl, real cache", "ppl_real_cache", ".3f"),
    ("max |dNLL|", "max_abs_nll_difference", ".1e"),
]


def data_from(curves: dict) -> dict:
    """The curves (policy -> (positions, NLL)) as ``nll.safetensors`` holds them."""
    nll = {}
    for policy, (positions, values) in curves.items():
        nll[policy], nll[f"{policy}.positions"] = values.float().cpu().contiguous(), positions.long().cpu().contiguous()
    return {"nll": nll}


def save_data(out: Path, data: dict) -> None:
    with atomic_path(Path(out) / CURVES_FILE) as tmp:
        save_file(data["nll"], str(tmp))


def read_data(run_dir: Path) -> dict:
    path = Path(run_dir) / CURVES_FILE
    return {"nll": load_file(str(path)) if path.exists() else {}}


def figures(summary: dict, data: dict) -> dict:
    """Every static figure of the run, by file name."""
    built = {"nll_by_position.png": _nll(summary, data), "latency_by_position.png": _latency(summary)}
    return built | ({"sink_count_ablation.png": _ablation(summary)} if summary.get("ablation") else {})


def sections(summary: dict, data: dict, uid: str, run_dir: Optional[Path] = None) -> list[html.Section]:
    """The report page: the header (``run.json`` when ``run_dir`` is given), tables and plots."""
    s = summary
    check = s.get("one_pass_check") or {}
    figures = {
        "tokens": s["tokens"],
        "cache": f"{s['sinks']} sinks + {s['window']} recent",
        "trained context": s.get("max_positions"),
        **{f"ppl {p}": e["ppl"] for p, e in s["policies"].items()},
        "one-pass check, max |dNLL|": check.get("max_abs_nll_difference"),
    }
    parts = [
        html.Section("Run", html.header(s["model"], figures, run_dir)),
        html.Section("Policies", html.table(policy_rows(s), STREAM_COLUMNS)),
    ]
    if data["nll"]:
        parts.append(
            html.Section(
                f"NLL against position (means over bins of {_bin_width(s['tokens'])} positions)",
                html.plot(_nll(s, data), f"{uid}-nll"),
            )
        )
    parts.append(html.Section("Per-token latency along the stream", html.plot(_latency(s), f"{uid}-latency")))
    if check.get("by_chunk"):
        title = f"One-pass scores against a real {check['policy']} cache, token by token (tolerance {check['tolerance']:g} nats)"
        parts.append(html.Section(title, html.table(check["by_chunk"], CHECK_COLUMNS)))
    if s.get("ablation"):
        parts.append(html.Section("Sink count at the same cache size", html.plot(_ablation(s), f"{uid}-ablation")))
    return parts


def _bin_width(tokens: int) -> int:
    return max(1, math.ceil(tokens / POINTS))


def _binned(positions: torch.Tensor, nll: torch.Tensor) -> tuple[list[float], list[float]]:
    width = max(1, math.ceil(len(nll) / POINTS))
    n = len(nll) // width * width or len(nll)
    if width == 1 or n < width:
        return positions.tolist(), nll.tolist()
    return positions[:n].view(-1, width).float().mean(1).tolist(), nll[:n].view(-1, width).mean(1).tolist()


def _nll(s: dict, data: dict):
    import plotly.graph_objects as go

    curves, fig = data["nll"], go.Figure()
    for policy in s["policies"]:
        if policy in curves:
            x, y = _binned(curves[f"{policy}.positions"], curves[policy])
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    mode="lines",
                    name=policy,
                    hovertemplate=f"{policy}<br>position %{{x:.0f}}<br>NLL %{{y:.3f}}<extra></extra>",
                )
            )
    if s.get("max_positions") and s["max_positions"] < s["tokens"]:
        fig.add_vline(x=s["max_positions"], line_dash="dash", line_color="gray", annotation_text="trained context")
    heading = title(html_text(s["model"], 60), f"NLL along the stream, {s['sinks']} sinks + {s['window']} recent tokens")
    return fig.update_layout(title=heading, xaxis_title="position in the stream", yaxis_title="NLL (nats, bin means)", height=420)


def _latency(s: dict):
    import plotly.graph_objects as go

    fig = go.Figure(
        [
            go.Scatter(
                x=[c.get("measured_at", c["start"]) for c in e.get("ms_per_token_by_chunk", [])],
                y=[c["ms"] for c in e.get("ms_per_token_by_chunk", [])],
                mode="lines+markers",
                name=p,
            )
            for p, e in s["policies"].items()
        ]
    )
    return fig.update_layout(
        title="Per-token latency along the stream",
        xaxis_title="position in the stream",
        yaxis=dict(type="log", title="ms per token"),
        height=360,
    )


def _ablation(s: dict):
    import plotly.graph_objects as go

    counts = sorted(s["ablation"], key=int)
    fig = go.Figure(go.Bar(x=[f"{n} sinks" for n in counts], y=[s["ablation"][n]["ppl"] for n in counts]))
    return fig.update_layout(
        title="Sink count at the same cache size",
        yaxis_title="perplexity",
        xaxis_title=f"same total cache of {s['sinks'] + s['window']} tokens",
        height=340,
    )
