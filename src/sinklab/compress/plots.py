"""The compression run's plots, each defined once (PNG files and the report page draw the same
plotly figures): quality (perplexity, passkeys, multiple-choice accuracy) against the ratio
removed, one panel per press, one line per kept-sink setting, the full cache as a dashed line;
quality per quantizer and bit width, one bar per protect setting; and the report page around them."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..core import html
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
    "choice_accuracy.png": ("multiple-choice accuracy", lambda c, _: _choice_acc(c), lambda d, _: _choice_acc(d)),
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
COLUMNS = [
    ("press", "policy", "s"),
    ("ratio", "ratio", "g"),
    ("sinks kept", "keep_sinks", "s"),
    ("context", "context", "d"),
    ("ppl / full", "ppl_ratio", ".3f"),
    ("passkey acc.", "passkey_accuracy", ".2f"),
    ("key log p", "key_logprob", ".2f"),
    ("acc., 1st --accuracy task", "choice_accuracy", ".2f"),
    ("kept", "kept_fraction", ".3f"),
    ("bytes / dense", "bytes_ratio", ".3f"),
]


QUANT_COLUMNS = [
    ("quantizer", "policy", "s"),
    ("bits", "bits", "d"),
    ("protected", "keep_sinks", "s"),
    ("context", "context", "d"),
    ("ppl / full", "ppl_ratio", ".3f"),
    ("passkey acc.", "passkey_accuracy", ".2f"),
    ("key log p", "key_logprob", ".2f"),
    ("acc., 1st --accuracy task", "choice_accuracy", ".2f"),
    ("bytes / dense", "bytes_ratio", ".3f"),
]


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

    context, text = s["contexts"][-1], _first_text(s)
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


#: The page's heading of each bar figure.
HEADINGS = {"quantized.png": "KV quantization", "decoding.png": "Presses while decoding"}
#: Kept-sink settings told apart where their values are equal: markers and dashes differ, and
#: each setting's points sit DODGE (of the ratio axis) from the next (hover shows the true ratio).
DODGE = 0.015


def _against_ratio(s: dict, name: str):
    from plotly.subplots import make_subplots

    label, read, dense_value = METRICS[name]
    context, text = s["contexts"][-1], _first_text(s)
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


def _first_text(s: dict) -> Optional[str]:
    """The text the figures and tables show (the corpus; the outside text is in the frames)."""
    for cell in s["cells"]:
        if cell.get("ppl_ratio"):
            return next(iter(cell["ppl_ratio"]))
    return None


def _choice_acc(cell: dict) -> Optional[float]:
    """A cell's multiple-choice accuracy on the first ``--accuracy`` task (None without the judge)."""
    return next(iter(cell.get("choice", {}).values()), {}).get("acc")


def _first_task(s: dict) -> str:
    return next(iter(s["dense"][str(s["contexts"][-1])]["choice"]))


def table_rows(s: dict, kind: str = "press") -> list[dict]:
    """The terminal's and the page's rows of the cells of ``kind`` (press or quantizer): the first
    text's ppl ratio."""
    s = current(s)
    text = _first_text(s)
    return [
        {
            **c,
            "keep_sinks": str(c["keep_sinks"]),
            "ppl_ratio": c.get("ppl_ratio", {}).get(text),
            "passkey_accuracy": c.get("passkey", {}).get("accuracy"),
            "key_logprob": c.get("passkey", {}).get("logprob_mean"),
            "choice_accuracy": _choice_acc(c),
        }
        for c in s["cells"]
        if c["kind"] == kind
    ]


def statements(s: dict) -> list[str]:
    """The paired statements, one line each, led by the press's or quantizer's name (the terminal's)."""
    s = current(s)
    return [f"{name}: {line}" for name, lines in family_statements(s).items() for line in lines]


def family_statements(s: dict) -> dict[str, list[str]]:
    """Per press and quantizer: what its paired comparisons are over, then where keeping
    (protecting) sinks changed perplexity or retrieval most."""
    found = {name: _statement([e for e in s["sink_effect"] if e["policy"] == name]) for name in [*s["presses"], *s["quantizers"]]}
    return {name: lines for name, lines in found.items() if lines}


def _statement(mine: list[dict]) -> list[str]:
    """Up to five sentences for one press or quantizer: what its best and worst are taken over,
    the best and worst perplexity change from keeping sinks, the best passkey accuracy change, and
    the largest change of the true key's log-probability with its spread over the prompts, and
    the multiple-choice accuracy change where the correct choice's log-likelihood gained most (or,
    where every cell lowered it, lost least: "gained most, -0.51" read as a gain), each with where
    it happened."""
    if not mine:
        return []
    setting = SETTING[mine[0]["kind"]]
    lines = [_scope(mine, setting)]
    ppl = [(change, text, e) for e in mine for text, change in e.get("ppl_change", {}).items()]
    if ppl:
        (low, low_text, best), (high, high_text, worst) = min(ppl, key=lambda t: t[0]), max(ppl, key=lambda t: t[0])
        lines.append(
            f"{VERBS[setting]} sinks changes perplexity by {_percent(low)} at best ({_where(best, setting)}, "
            f"text {low_text}) and by {_percent(high)} at worst ({_where(worst, setting)}, text {high_text})"
        )
    acc = [e for e in mine if "accuracy_change" in e]
    if acc:
        top = max(acc, key=lambda e: e["accuracy_change"])
        lines.append(f"passkey accuracy {_signed(top['accuracy_change'])} at best ({_where(top, setting)})")
    paired = [e for e in mine if "logprob_change_std" in e]
    if paired:
        top = max(paired, key=lambda e: e["logprob_change"])
        lines.append(
            f"the true key's log-probability {_signed(top['logprob_change'])} nats at best "
            f"(per prompt {_signed(top['logprob_change_std'], sign='')} nats of spread; more probable in "
            f"{top['prompts_more_likely']} of {top['prompts']} prompts; {_where(top, setting)})"
        )
    choice = [(change, task, e) for e in mine for task, change in e.get("choice_change", {}).items()]
    if choice:
        change, task, top = max(choice, key=lambda t: t[0]["gold_loglik_change"]["mean"])
        gain = change["gold_loglik_change"]["mean"]
        lines.append(
            f"multiple-choice accuracy on {task} {_signed(change['acc_change']['mean'])} (McNemar p = "
            f"{change['mcnemar']['p']:.2g}) where the correct choice {'gained most' if gain >= 0 else 'lost least'}, "
            f"{_signed(gain)} nats ({_where(top, setting)})"
        )
    return lines


#: What a family calls its sink setting in a statement (one setting, ``keep_sinks``, in the cells).
SETTING = {"press": "keep_sinks", "quantizer": "protect"}
#: How a statement names a key's values: (one value, several).
NOUNS = {"keep_sinks": ("keep sinks",) * 2, "protect": ("protect",) * 2, "ratio": ("ratio", "ratios"),
         "bits": ("bit width", "bit widths"), "context": ("context", "contexts"), "ppl_change": ("text", "texts")}  # fmt: skip
VERBS = {"keep_sinks": "keeping", "protect": "protecting"}


def _scope(mine: list[dict], setting: str) -> str:
    """What a family's best and worst are taken over: each setting against 0 at every ratio (or
    bit width) and context, pairs of cells that read the same inputs (and every text, for perplexity)."""
    level, texts = "ratio" if mine[0]["kind"] == "press" else "bits", _listed(mine, "ppl_change")
    levels = _listed(mine, level) if mine[0][level] is not None else "while decoding"
    return (
        f"best and worst over {len(mine)} pair{'s' * (len(mine) > 1)} of cells on the same inputs: "
        f"{_listed(mine, 'keep_sinks', setting)} against 0; {levels}; {_listed(mine, 'context')} tokens"
        + (f"; perplexity on {texts}" if texts else "")
    )


def _listed(effects: list[dict], key: str, noun: Optional[str] = None) -> str:
    """The values of ``key`` among ``effects`` (the keys, where they are dicts), in order, once
    each, after the name of ``noun`` (default ``key``) in :data:`NOUNS`; empty when no effect has ``key``."""
    values = dict.fromkeys(v for e in effects if key in e for v in (e[key] if isinstance(e[key], dict) else [e[key]]))
    shown = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
    return f"{NOUNS[noun or key][len(values) > 1]} {shown}" if values else ""


def _percent(change: float) -> str:
    """A relative change as a percentage that a small change does not round to zero: one decimal
    from 0.1 % up, two significant digits below (``-0.0052%``, not ``-0.0%``); none reads ``0%``."""
    if change == 0:
        return "0%"
    return f"{change:+.1%}" if abs(change) >= 1e-3 else f"{change * 100:+.2g}%"


def _signed(value: float, sign: str = "+") -> str:
    """A difference with two decimals, or two significant digits where two decimals would read 0."""
    if value == 0 or abs(value) >= 5e-3:
        return f"{value:{sign}.2f}"
    return f"{value:{sign}.1e}"


def _where(effect: dict, setting: str) -> str:
    if effect["kind"] == "quantizer":
        level = f"{effect['bits']} bits"
    else:
        level = "while decoding" if effect["ratio"] is None else f"ratio {effect['ratio']:g}"
    return f"{setting.replace('_', ' ')} {effect['keep_sinks']}, {level}, {effect['context']} tokens"


def sections(summary: dict, data: dict, uid: str, run_dir: Optional[Path] = None) -> list[html.Section]:
    s = current(summary)
    dense = s["dense"][str(s["contexts"][-1])]
    headline = {
        "contexts": ", ".join(map(str, s["contexts"])),
        "presses": ", ".join(s["presses"]),
        **{f"full-cache ppl, {text}": value for text, value in dense.get("ppl", {}).items()},
        "full-cache passkey accuracy": dense.get("passkey", {}).get("accuracy"),
        "full-cache multiple-choice accuracy": _choice_acc(dense),
    }
    parts = [
        html.Section("Run", html.header(s["model"], headline, run_dir)),
        html.Section("Does keeping the sink help?", _statements_html(s)),
    ]
    for name, fig in figures(s).items():
        heading = METRICS[name][0] + " against the ratio removed" if name in METRICS else HEADINGS[name]
        parts.append(html.Section(heading, html.plot(fig, f"{uid}-{name[:-4]}")))
    if s["presses"]:
        parts.append(html.Section("Every press cell", html.table(table_rows(s, "press"), COLUMNS)))
    if s["quantizers"]:
        parts.append(html.Section("Every quantizer cell", html.table(table_rows(s, "quantizer"), QUANT_COLUMNS)))
    return parts


def _statements_html(s: dict) -> str:
    """Each press's and quantizer's statements, whole (none is cut): its name and what they range
    over, then a list."""
    blocks = []
    for name, (scope, *lines) in family_statements(s).items():
        items = "".join(f"<li>{html_text(line, limit=None)}</li>" for line in lines)
        blocks.append(f"<p><b>{html.esc(name)}</b>: {html_text(scope, limit=None)}</p><ul>{items}</ul>")
    return "".join(blocks)


PAGE = html.RunPage("compress", "compress", lambda run_dir: {}, sections)
write_page = PAGE.write
