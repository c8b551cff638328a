"""The plots of ``sinklab adapt``, each defined once (the PNG files and the report page draw the
same plotly figures): the largest input of the linear layers by layer for every setting and
condition (full precision shown, the rest a click on the legend away), and the training losses of a
fine-tuning run.

A sink-prefix run plots its summary alone (its data is empty); a fine-tuning run's data is
``metrics``, the rows of its ``metrics.jsonl`` (written while it trains).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..core import html
from ..core.atomic import read_jsonl, write_jsonl
from ..core.figures import layer_axis, title
from ..core.text import html_text
from .report import BEFORE_AFTER_COLUMNS, CONDITION_LABELS, before_after_rows, ppl_columns, ppl_rows

METRICS_FILE = "metrics.jsonl"


def data_from(metrics: Optional[list[dict]] = None) -> dict:
    """A run's data: nothing for a sink-prefix run, the training rows of a fine-tuning run."""
    return {} if metrics is None else {"metrics": metrics}


def save_data(out: Path, data: dict) -> None:
    if "metrics" in data:
        write_jsonl(Path(out) / METRICS_FILE, data["metrics"])


def read_data(run_dir: Path) -> dict:
    path = Path(run_dir) / METRICS_FILE
    return data_from(read_jsonl(path) if path.exists() else None)


def figures(summary: dict, data: dict) -> dict:
    """Every static figure of the run, by file name."""
    built = {"max_activation_by_layer.png": _maxima(summary)} if "max_abs_activation" in summary else {}
    return built | ({"training_loss.png": _losses(data["metrics"])} if "metrics" in data else {})


def sections(summary: dict, data: dict, uid: str, run_dir: Optional[Path] = None) -> list[html.Section]:
    """The report page: the header (``run.json`` when ``run_dir`` is given), tables and plots."""
    s = summary
    figures = {"method": s["method"], "exact check, max |logit difference|": s.get("exact_check")}
    if "search" in s:
        figures["searched prefix"] = " | ".join(s["search"]["strings"])
    parts = [html.Section("Run", html.header(s["model"], figures, run_dir))]
    if "before" in s:
        title = f"{s['mitigation']} after {s['steps']} steps: the original with BOS against the adapted model without"
        parts.append(html.Section(title, html.table(before_after_rows(s), BEFORE_AFTER_COLUMNS)))
        if "metrics" in data:
            parts.append(html.Section("Training loss", html.plot(_losses(data["metrics"]), f"{uid}-loss")))
    if "ppl" in s:
        parts.append(
            html.Section(
                "Perplexity on held-out text, and the largest input of any quantized linear layer",
                html.table(ppl_rows(s), ppl_columns(s)),
            )
        )
        if "ppl_outside" in s:
            parts.append(
                html.Section(
                    f"The same on text of another domain ({s['outside_corpus']}), which fitting the training text cannot help",
                    html.table(ppl_rows(s, "_outside"), ppl_columns(s)),
                )
            )
        parts.append(html.Section("Largest |input| of the linear layers, by layer", html.plot(_maxima(s), f"{uid}-maxima")))
    return parts


def _maxima(s: dict):
    import plotly.graph_objects as go

    fig, layers = (
        go.Figure(),
        max(len(values) for by_condition in s["max_abs_activation"].values() for values in by_condition.values()),
    )
    for setting, by_condition in s["max_abs_activation"].items():
        for condition, values in by_condition.items():
            label = html_text(f"{setting}, {CONDITION_LABELS.get(condition, condition)}")
            fig.add_trace(
                go.Scatter(
                    y=values,
                    mode="lines+markers",
                    name=label,
                    visible=True if setting == "fp" else "legendonly",
                    hovertemplate=f"{label}<br>layer %{{x}}<br>max |x| %{{y:.1f}}<extra></extra>",
                )
            )
    return fig.update_layout(
        title=title(html_text(s["model"], 60), "what the quantizer must cover"),
        xaxis=layer_axis(layers),
        yaxis=dict(type="log", title="largest |input| of its linear layers"),
        height=420,
    )


def _losses(rows: list[dict]):
    import plotly.graph_objects as go

    steps = [r["step"] for r in rows]
    fig = go.Figure([go.Scatter(x=steps, y=[r[key] for r in rows], mode="lines", name=key) for key in ("kl", "lm")])
    fig.add_trace(go.Scatter(x=steps, y=[r["ramp"] for r in rows], mode="lines", name="ramp", yaxis="y2", line=dict(dash="dot")))
    return fig.update_layout(
        title="Training loss",
        xaxis_title="step",
        yaxis=dict(type="log", title="nats"),
        yaxis2=dict(title="ramp", overlaying="y", side="right", range=[0, 1.05]),
        height=340,
    )
