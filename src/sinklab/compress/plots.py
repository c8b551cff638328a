"""The compression run's plots, each defined once (PNG files and the report page draw the same
plotly figures): quality against the ratio removed, one panel per press, one line per kept-sink
setting, the full cache as a dashed line; and the report page around them."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..core import html
from ..core.figures import title
from ..core.text import html_text

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


def figures(summary: dict) -> dict:
    """Every static figure of the run, by file name (passkey figures only when it ran)."""
    wanted = [name for name in METRICS if name == "ppl_ratio.png" or "passkey" in summary["tasks"]]
    if "ppl" not in summary["tasks"]:
        wanted.remove("ppl_ratio.png")
    return {name: _against_ratio(summary, name) for name in wanted}


def _against_ratio(s: dict, name: str):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    label, read, dense_value = METRICS[name]
    context, text = s["contexts"][-1], _first_text(s)
    columns = min(4, len(s["presses"]))
    rows = -(-len(s["presses"]) // columns)
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=[html_text(p, 30) for p in s["presses"]], shared_yaxes=True)
    colors = ["#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3"]
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
                    line_color=colors[j % len(colors)],
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
    for cell in s["cells"]:
        if cell.get("ppl_ratio"):
            return next(iter(cell["ppl_ratio"]))
    return None


def table_rows(s: dict) -> list[dict]:
    text = _first_text(s)
    return [
        {
            **{k: c[k] for k in ("press", "ratio", "context")},
            "keep_sinks": str(c["keep_sinks"]),
            "ppl_ratio": c.get("ppl_ratio", {}).get(text),
            "passkey_accuracy": c.get("passkey", {}).get("accuracy"),
            "key_logprob": c.get("passkey", {}).get("logprob_mean"),
            "kept_fraction": c["kept_fraction"],
            "bytes_ratio": c["bytes_ratio"],
        }
        for c in s["cells"]
    ]


def statements(s: dict) -> list[str]:
    """The paired statement per press: where keeping sinks changed perplexity or retrieval most."""
    lines = []
    for press in s["presses"]:
        mine = [e for e in s["sink_effect"] if e["press"] == press]
        ppl = [(min(e["ppl_change"].values()), e) for e in mine if e.get("ppl_change")]
        if ppl:
            change, best = min(ppl, key=lambda pair: pair[0])
            worst = max(max(e["ppl_change"].values()) for _, e in ppl)
            lines.append(
                f"{press}: keeping sinks changes perplexity by {change:+.1%} at best (keep {best['keep_sinks']}, ratio "
                f"{best['ratio']:g}, {best['context']} tokens) and by {worst:+.1%} at worst"
            )
        acc = [e for e in mine if "accuracy_change" in e]
        if acc:
            top = max(acc, key=lambda e: e["accuracy_change"])
            lines.append(
                f"{press}: passkey accuracy {top['accuracy_change']:+.2f} at best "
                f"(keep {top['keep_sinks']}, ratio {top['ratio']:g})"
            )
    return lines


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
        parts.append(html.Section(METRICS[name][0] + " against the ratio removed", html.plot(fig, f"{uid}-{name[:-4]}")))
    parts.append(html.Section("Every cell", html.table(table_rows(s), COLUMNS)))
    return parts


PAGE = html.RunPage("compress", "compress", lambda run_dir: {}, sections)
write_page = PAGE.write
