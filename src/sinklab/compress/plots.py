"""The compression run's figures, each defined once (PNG files and the report page draw the same
plotly figures): quality (perplexity, passkeys, multiple-choice accuracy) against the ratio removed,
one panel per press, one line per kept-sink setting, the full cache as a dashed line; and quality per
quantizer and bit width, one bar per protect setting. The tables and statements are :mod:`.report`'s,
the page :mod:`.page`'s."""

from __future__ import annotations

from typing import Optional

from ..core.figures import GRID_TOP, series_style, title
from ..core.text import html_text
from .summary import current

#: (figure file, what is plotted, how to read it from a cell, the dense cache's value)
METRICS = {
    "ppl_ratio.png": ("perplexity / full cache's", lambda c, text: c.get("ppl_ratio", {}).get(text), lambda d, text: 1.0),
    "passkey_accuracy.png": (
        "passkey accuracy",
        lambda c, _: c.get("passkey", {}).get("accuracy"),
        lambda d, _: d.get("passkey", {}).get("accuracy"),
    ),
    "key_logprob.png": (
        "true key's log-probability (nats)",
        lambda c, _: c.get("passkey", {}).get("logprob_mean"),
        lambda d, _: d.get("passkey", {}).get("logprob_mean"),
    ),
    "choice_accuracy.png": ("multiple-choice accuracy", lambda c, _: choice_acc(c), lambda d, _: choice_acc(d)),
}
#: Which judge each figure needs: a task of ``--task``, or ``--accuracy``.
NEEDS = {
    "ppl_ratio.png": "ppl",
    "passkey_accuracy.png": "passkey",
    "key_logprob.png": "passkey",
    "choice_accuracy.png": "accuracy",
}
#: An accuracy axis spans what an accuracy can be (plotly would centre all-zero accuracies in -1..1).
ACCURACY_AXIS = {"range": [-0.05, 1.05]}


def figures(summary: dict) -> dict:
    """Every static figure of the run, by file name (passkey figures only when it ran)."""
    summary = current(summary)
    if summary.get("during") == "decode":
        decoding = summary["decoding"]
        where = f"budget {decoding['budget']:g} keys, pressed every {decoding['every']} tokens"
        return {"decoding.png": _bars(summary, "press", f"KV presses while decoding ({where})", "sinks kept")}
    judges = [*summary["tasks"], *(["accuracy"] if summary.get("accuracy") else [])]
    wanted = [name for name in METRICS if NEEDS[name] in judges]
    built = {name: _against_ratio(summary, name) for name in wanted} if summary["presses"] else {}
    heading = "KV quantization with and without the sink protected"
    return built | ({"quantized.png": _bars(summary, "quantizer", heading, "protected")} if summary["quantizers"] else {})


def _bars(s: dict, kind: str, heading: str, setting: str):
    """Quality per policy of ``kind`` (and bit width), one bar per sink setting: the quantizers, or
    the presses while decoding (they have no ratio to draw against)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    context, text = s["contexts"][-1], first_text(s)
    panels = [("ppl / full cache's", lambda c: c.get("ppl_ratio", {}).get(text))] if "ppl" in s["tasks"] else []
    panels += [("passkey accuracy", lambda c: c.get("passkey", {}).get("accuracy"))] if "passkey" in s["tasks"] else []
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[label for label, _ in panels])
    mine = [c for c in s["cells"] if c["kind"] == kind and c["context"] == context]
    for j, protect in enumerate(dict.fromkeys(str(c["keep_sinks"]) for c in mine)):
        chosen = [c for c in mine if str(c["keep_sinks"]) == protect]
        for col, (_, read) in enumerate(panels, start=1):
            names = [html_text(c["policy"], 30) + (f" {c['bits']}-bit" if c["bits"] is not None else "") for c in chosen]
            bars = go.Bar(x=names, y=[read(c) for c in chosen],
                          name=f"{setting}: {protect}", legendgroup=protect, showlegend=col == 1)  # fmt: skip
            bars.update(marker_color=series_style(j)["color"], texttemplate="%{y:.3g}", textposition="outside", textangle=0)
            fig.add_trace(bars, row=1, col=col)  # equal bars, and bars of height 0, read by their numbers
    if "passkey" in s["tasks"]:
        fig.update_yaxes(range=[0, 1.15], col=len(panels))  # room for the numbers over bars of 1
    heading = title(html_text(s["model"], 60), f"{heading} ({context}-token context)")
    return fig.update_layout(title=heading, barmode="group", height=420, margin_t=GRID_TOP)


#: Kept-sink settings told apart where their values are equal: markers and dashes differ, and
#: each setting's points sit DODGE (of the ratio axis) from the next (hover shows the true ratio).
DODGE = 0.015


def _against_ratio(s: dict, name: str):
    from plotly.subplots import make_subplots

    label, read, dense_value = METRICS[name]
    context, text = s["contexts"][-1], first_text(s)
    columns = min(4, len(s["presses"]))
    rows = -(-len(s["presses"]) // columns)
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=[html_text(p, 30) for p in s["presses"]], shared_yaxes=True)
    for i, press in enumerate(s["presses"]):
        row, col = i // columns + 1, i % columns + 1
        for j, keep in enumerate(s["keep_sinks"]):
            mine = (c for c in s["cells"] if c["policy"] == press and c["keep_sinks"] == keep and c["context"] == context)
            cells = sorted(mine, key=lambda c: c["ratio"])
            trace = _setting_trace(j, len(s["keep_sinks"]), [c["ratio"] for c in cells], [read(c, text) for c in cells])
            fig.add_trace(trace.update(name=f"sinks kept: {keep}", legendgroup=str(keep), showlegend=i == 0), row=row, col=col)
        dense = dense_value(s["dense"][str(context)], text)
        if dense is not None:
            fig.add_hline(y=dense, line_dash="dash", line_color="gray", layer="below", row=row, col=col)
    where = f"{context}-token context" + (f", text: {html_text(text, 30)}" if name == "ppl_ratio.png" else "")
    if name == "choice_accuracy.png":
        judged = s["accuracy"]
        where = f"{html_text(_first_task(s), 30)}, {judged['shots']}-shot prompts, their shots compressed"
    fig.update_xaxes(range=[-0.05, 1.05], tickvals=sorted({0, *s["ratios"], 1}))
    fig.update_xaxes(title_text="ratio removed", row=rows)
    fig.update_yaxes(title_text=label, col=1)
    if name in ("passkey_accuracy.png", "choice_accuracy.png"):
        fig.update_yaxes(**ACCURACY_AXIS)
    heading = title(html_text(s["model"], 60), f"{label} against the ratio removed ({where}; dashed: the full cache)")
    return fig.update_layout(title=heading, height=260 * rows + 160, margin_t=GRID_TOP)


def _setting_trace(j: int, n: int, ratios: list, values: list):
    """The ``j``-th of ``n`` kept-sink settings' line: its own colour, marker and dash, dodged."""
    import plotly.graph_objects as go

    shift, style = DODGE * (j - (n - 1) / 2), series_style(j)
    return go.Scatter(
        x=[r + shift for r in ratios], y=values, customdata=ratios, mode="lines+markers",
        hovertemplate="ratio %{customdata:g}: %{y:.4g}",
        line={"color": style["color"], "dash": style["dash"]},
        marker={"symbol": style["symbol"], "size": 9, "opacity": 0.8},
    )  # fmt: skip


def first_text(s: dict) -> Optional[str]:
    """The text the figures and tables show (the corpus; the outside text is in the frames)."""
    for cell in s["cells"]:
        if cell.get("ppl_ratio"):
            return next(iter(cell["ppl_ratio"]))
    return None


def choice_acc(cell: dict) -> Optional[float]:
    """A cell's multiple-choice accuracy on the first ``--accuracy`` task (None without the judge)."""
    return next(iter(cell.get("choice", {}).values()), {}).get("acc")


def _first_task(s: dict) -> str:
    return next(iter(s["dense"][str(s["contexts"][-1])]["choice"]))
