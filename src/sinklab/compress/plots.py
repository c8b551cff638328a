"""The compression run's plots, each defined once (PNG files and the report page draw the same
plotly figures): quality against the ratio removed, one panel per press, one line per kept-sink
setting, the full cache as a dashed line; quality per quantizer and bit width, one bar per
protect setting; and the report page around them."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..core import html
from ..core.figures import title
from ..core.text import html_text

COLORS = ["#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3"]
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
}
COLUMNS = [
    ("press", "press", "s"),
    ("ratio", "ratio", "g"),
    ("sinks kept", "keep_sinks", "s"),
    ("context", "context", "d"),
    ("ppl / full", "ppl_ratio", ".3f"),
    ("passkey acc.", "passkey_accuracy", ".2f"),
    ("key log p", "key_logprob", ".2f"),
    ("kept", "kept_fraction", ".3f"),
    ("bytes / dense", "bytes_ratio", ".3f"),
]


QUANT_COLUMNS = [
    ("quantizer", "quantizer", "s"),
    ("bits", "bits", "d"),
    ("protected", "protect", "s"),
    ("context", "context", "d"),
    ("ppl / full", "ppl_ratio", ".3f"),
    ("passkey acc.", "passkey_accuracy", ".2f"),
    ("key log p", "key_logprob", ".2f"),
    ("bytes / dense", "bytes_ratio", ".3f"),
]


def figures(summary: dict) -> dict:
    """Every static figure of the run, by file name (passkey figures only when it ran)."""
    wanted = [name for name in METRICS if ("ppl" if name == "ppl_ratio.png" else "passkey") in summary["tasks"]]
    built = {name: _against_ratio(summary, name) for name in wanted} if summary["presses"] else {}
    return built | ({"quantized.png": _quantized(summary)} if summary["quantizers"] else {})


def _quantized(s: dict):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    context, text = s["contexts"][-1], _first_text(s)
    panels = [("ppl / full cache's", lambda c: c.get("ppl_ratio", {}).get(text))] if "ppl" in s["tasks"] else []
    panels += [("passkey accuracy", lambda c: c.get("passkey", {}).get("accuracy"))] if "passkey" in s["tasks"] else []
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[label for label, _ in panels])
    mine = [c for c in s["quantized"] if c["context"] == context]
    for j, protect in enumerate(dict.fromkeys(str(c["protect"]) for c in mine)):
        chosen = [c for c in mine if str(c["protect"]) == protect]
        for col, (_, read) in enumerate(panels, start=1):
            bars = go.Bar(x=[f"{c['quantizer']} {c['bits']}-bit" for c in chosen], y=[read(c) for c in chosen],
                          name=f"protected: {protect}", legendgroup=protect, showlegend=col == 1)  # fmt: skip
            fig.add_trace(bars.update(marker_color=COLORS[j % len(COLORS)]), row=1, col=col)
    heading = title(html_text(s["model"], 60), f"KV quantization with and without the sink protected ({context}-token context)")
    return fig.update_layout(title=heading, barmode="group", height=420)


def _against_ratio(s: dict, name: str):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    label, read, dense_value = METRICS[name]
    context, text = s["contexts"][-1], _first_text(s)
    columns = min(4, len(s["presses"]))
    rows = -(-len(s["presses"]) // columns)
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=[html_text(p, 30) for p in s["presses"]], shared_yaxes=True)
    for i, press in enumerate(s["presses"]):
        row, col = i // columns + 1, i % columns + 1
        for j, keep in enumerate(s["keep_sinks"]):
            cells = sorted((c for c in s["cells"] if c["press"] == press and c["keep_sinks"] == keep and c["context"] == context),
                           key=lambda c: c["ratio"])  # fmt: skip
            fig.add_trace(
                go.Scatter(
                    x=[c["ratio"] for c in cells],
                    y=[read(c, text) for c in cells],
                    mode="lines+markers",
                    name=f"sinks kept: {keep}",
                    legendgroup=str(keep),
                    showlegend=i == 0,
                    line_color=COLORS[j % len(COLORS)],
                ),  # fmt: skip
                row=row,
                col=col,
            )
        dense = dense_value(s["dense"][str(context)], text)
        if dense is not None:
            fig.add_hline(y=dense, line_dash="dash", line_color="gray", row=row, col=col)
    where = f"{context}-token context" + (f", text: {html_text(text, 30)}" if name == "ppl_ratio.png" else "")
    fig.update_xaxes(title_text="ratio removed", row=rows)
    fig.update_yaxes(title_text=label, col=1)
    heading = title(html_text(s["model"], 60), f"{label} against the ratio removed ({where}; dashed: the full cache)")
    return fig.update_layout(title=heading, height=260 * rows + 160)


def _first_text(s: dict) -> Optional[str]:
    """The text the figures and tables show (the corpus; the outside text is in the frames)."""
    for cell in [*s["cells"], *s["quantized"]]:
        if cell.get("ppl_ratio"):
            return next(iter(cell["ppl_ratio"]))
    return None


def table_rows(s: dict, entries: str = "cells") -> list[dict]:
    """The terminal's and the page's rows of ``entries`` (cells or quantized): the first text's ppl ratio."""
    text = _first_text(s)
    return [
        {
            **c,
            **{k: str(c[k]) for k in ("keep_sinks", "protect") if k in c},
            "ppl_ratio": c.get("ppl_ratio", {}).get(text),
            "passkey_accuracy": c.get("passkey", {}).get("accuracy"),
            "key_logprob": c.get("passkey", {}).get("logprob_mean"),
        }
        for c in s[entries]
    ]


def statements(s: dict) -> list[str]:
    """The paired statement per press and quantizer: where keeping (protecting) sinks changed
    perplexity or retrieval most."""
    lines = []
    families = [(p, "press", "sink_effect", "keep_sinks") for p in s["presses"]]
    families += [(q, "quantizer", "quantized_sink_effect", "protect") for q in s["quantizers"]]
    for name, kind, key, setting in families:
        lines += _statement(name, [e for e in s[key] if e[kind] == name], setting)
    return lines


def _statement(name: str, mine: list[dict], setting: str) -> list[str]:
    """Up to three sentences for one press or quantizer: the best and worst perplexity change from
    keeping sinks, the best passkey accuracy change, and the largest change of the true key's
    log-probability with its spread over the prompts, each with where it happened."""
    lines = []
    ppl = [(min(e["ppl_change"].values()), e) for e in mine if e.get("ppl_change")]
    if ppl:
        change, best = min(ppl, key=lambda pair: pair[0])
        worst = max(max(e["ppl_change"].values()) for _, e in ppl)
        lines.append(
            f"{name}: keeping sinks changes perplexity by {change:+.1%} at best ({_where(best, setting)}) "
            f"and by {worst:+.1%} at worst"
        )
    acc = [e for e in mine if "accuracy_change" in e]
    if acc:
        top = max(acc, key=lambda e: e["accuracy_change"])
        lines.append(f"{name}: passkey accuracy {top['accuracy_change']:+.2f} at best ({_where(top, setting)})")
    paired = [e for e in mine if "logprob_change_std" in e]
    if paired:
        top = max(paired, key=lambda e: e["logprob_change"])
        lines.append(
            f"{name}: the true key's log-probability {top['logprob_change']:+.2f} nats at best "
            f"(per prompt {top['logprob_change_std']:.2f} nats of spread; more probable in {top['prompts_more_likely']} "
            f"of {top['prompts']} prompts; {_where(top, setting)})"
        )
    return lines


def _where(effect: dict, setting: str) -> str:
    level = f"ratio {effect['ratio']:g}" if "ratio" in effect else f"{effect['bits']} bits"
    return f"{setting.replace('_', ' ')} {effect[setting]}, {level}, {effect['context']} tokens"


def sections(summary: dict, data: dict, uid: str, run_dir: Optional[Path] = None) -> list[html.Section]:
    s = summary
    dense = s["dense"][str(s["contexts"][-1])]
    headline = {
        "contexts": ", ".join(map(str, s["contexts"])),
        "presses": ", ".join(s["presses"]),
        **{f"full-cache ppl, {text}": value for text, value in dense.get("ppl", {}).items()},
        "full-cache passkey accuracy": dense.get("passkey", {}).get("accuracy"),
    }
    parts = [
        html.Section("Run", html.header(s["model"], headline, run_dir)),
        html.Section("Does keeping the sink help?", "".join(f"<p>{html.esc(line)}</p>" for line in statements(s))),
    ]
    for name, fig in figures(s).items():
        heading = METRICS[name][0] + " against the ratio removed" if name in METRICS else "KV quantization"
        parts.append(html.Section(heading, html.plot(fig, f"{uid}-{name[:-4]}")))
    if s["cells"]:
        parts.append(html.Section("Every press cell", html.table(table_rows(s), COLUMNS)))
    if s["quantized"]:
        parts.append(html.Section("Every quantizer cell", html.table(table_rows(s, "quantized"), QUANT_COLUMNS)))
    return parts


PAGE = html.RunPage("compress", "compress", lambda run_dir: {}, sections)
write_page = PAGE.write
