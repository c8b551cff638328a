"""The compression run's report page: its headline, the paired statements (:mod:`.report`), the
figures (:mod:`.plots`) and every cell's row."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..core import html
from ..core.text import html_text
from . import plots, report
from .summary import current

#: The page's heading of each bar figure.
HEADINGS = {"quantized.png": "KV quantization", "decoding.png": "Presses while decoding"}


def sections(summary: dict, data: dict, uid: str, run_dir: Optional[Path] = None) -> list[html.Section]:
    s = current(summary)
    dense = s["dense"][str(s["contexts"][-1])]
    headline = {
        "contexts": ", ".join(map(str, s["contexts"])),
        "presses": ", ".join(s["presses"]),
        **{f"full-cache ppl, {text}": value for text, value in dense.get("ppl", {}).items()},
        "full-cache passkey accuracy": dense.get("passkey", {}).get("accuracy"),
        "full-cache multiple-choice accuracy": plots.choice_acc(dense),
    }
    parts = [
        html.Section("Run", html.header(s["model"], headline, run_dir)),
        html.Section("Does keeping the sink help?", _statements_html(s)),
    ]
    for name, fig in plots.figures(s).items():
        heading = plots.METRICS[name][0] + " against the ratio removed" if name in plots.METRICS else HEADINGS[name]
        parts.append(html.Section(heading, html.plot(fig, f"{uid}-{name[:-4]}")))
    if s["presses"]:
        parts.append(html.Section("Every press cell", html.table(report.table_rows(s, "press"), report.COLUMNS)))
    if s["quantizers"]:
        parts.append(html.Section("Every quantizer cell", html.table(report.table_rows(s, "quantizer"), report.QUANT_COLUMNS)))
    return parts


def _statements_html(s: dict) -> str:
    """Each press's and quantizer's statements, whole (none is cut): its name and what they range
    over, then a list."""
    blocks = []
    for name, (scope, *lines) in report.family_statements(s).items():
        items = "".join(f"<li>{html_text(line, limit=None)}</li>" for line in lines)
        blocks.append(f"<p><b>{html.esc(name)}</b>: {html_text(scope, limit=None)}</p><ul>{items}</ul>")
    return "".join(blocks)


PAGE = html.RunPage("compress", "compress", lambda run_dir: {}, sections)
write_page = PAGE.write
