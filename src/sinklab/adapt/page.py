"""The adapt run's interactive report: the perplexity table, and the largest linear-layer input by
layer for every setting and condition (pick the setting in the legend)."""

from __future__ import annotations

import json
from pathlib import Path

from ..core import html
from ..core.runs import read_jsonl
from .report import BEFORE_AFTER_COLUMNS, CONDITION_LABELS, before_after_rows, ppl_columns, ppl_rows


def is_run(run_dir: Path) -> bool:
    summary = run_dir / "summary.json"
    return summary.exists() and json.loads(summary.read_text()).get("method") in ("sink_prefix", "finetune")


def columns(run_dirs: list[Path]) -> list[tuple[str, list[html.Section]]]:
    return [(f"adapt: {run_dir.name}", sections(run_dir)) for run_dir in run_dirs]


def write(run_dir: Path) -> Path:
    return html.write_page(html.report_path(run_dir), f"sinklab adapt {run_dir.name}", columns([run_dir]))


def sections(run_dir: Path) -> list[html.Section]:
    s = json.loads((run_dir / "summary.json").read_text())
    uid = html.dom_id(run_dir)
    figures = {"method": s["method"], "exact check, max |logit difference|": s.get("exact_check")}
    if "search" in s:
        figures["searched prefix"] = " | ".join(s["search"]["strings"])
    parts = [html.Section("Run", html.header(run_dir, s["model"], figures))]
    if "before" in s:
        parts.append(html.Section(f"{s['mitigation']} after {s['steps']} steps: the original with BOS against the adapted model without", html.table(before_after_rows(s), BEFORE_AFTER_COLUMNS)))
        if (run_dir / "metrics.jsonl").exists():
            parts.append(html.Section("Training loss", html.plot(_losses(read_jsonl(run_dir / "metrics.jsonl")), f"{uid}-loss", 340)))
    if "ppl" in s:
        parts.append(html.Section("Perplexity on held-out text, and the largest input of any quantized linear layer", html.table(ppl_rows(s), ppl_columns(s))))
        if "ppl_outside" in s:
            parts.append(html.Section(f"The same on text of another domain ({s['outside_corpus']}), which fitting the training text cannot help",
                                      html.table(ppl_rows(s, "_outside"), ppl_columns(s))))
        parts.append(html.Section("Largest |input| of the linear layers, by layer", html.plot(_maxima(s), f"{uid}-maxima", 420)))
    return parts


def _maxima(s: dict):
    import plotly.graph_objects as go

    fig = go.Figure()
    for setting, by_condition in s["max_abs_activation"].items():
        for condition, values in by_condition.items():
            label = f"{setting}, {CONDITION_LABELS.get(condition, condition)}"
            fig.add_trace(go.Scatter(y=values, mode="lines+markers", name=label, visible=True if setting == "fp" else "legendonly",
                                     hovertemplate=f"{html.esc(label)}<br>layer %{{x}}<br>max |x| %{{y:.1f}}<extra></extra>"))
    return fig.update_layout(xaxis_title="layer", yaxis=dict(type="log", title="largest |input| of its linear layers"))


def _losses(rows: list[dict]):
    import plotly.graph_objects as go

    steps = [r["step"] for r in rows]
    fig = go.Figure([go.Scatter(x=steps, y=[r[key] for r in rows], mode="lines", name=key) for key in ("kl", "lm")])
    fig.add_trace(go.Scatter(x=steps, y=[r["ramp"] for r in rows], mode="lines", name="ramp", yaxis="y2", line=dict(dash="dot")))
    return fig.update_layout(xaxis_title="step", yaxis=dict(type="log", title="nats"), yaxis2=dict(title="ramp", overlaying="y", side="right", range=[0, 1.05]))
