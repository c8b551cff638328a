"""Text for terminals and figures: escaping of untrusted strings and fixed-width tables.

Every text that can come from a model or a user (token strings, run names, model names) goes
through :func:`terminal_text` (or :func:`visible_text`, cut short) before it reaches the terminal
(no control characters), :func:`safe_text` before it reaches a matplotlib figure (no mathtext
either) and :func:`html_text` before it reaches an HTML page or a plotly figure (no markup: plotly
renders a subset of HTML tags in labels and hover text).
"""

from __future__ import annotations

import html
from typing import Optional, Sequence


def visible_text(text: str, limit: Optional[int] = 40) -> str:
    """Whitespace made visible, control characters escaped, cut to ``limit`` characters (None: whole)."""
    text = terminal_text(text)
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def terminal_text(text: str) -> str:
    """A user's, a model's or a file's string for the terminal, whole: control characters (an
    escape sequence that would recolour or rewrite the terminal) and line breaks shown escaped."""
    text = str(text).replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)


def safe_text(text: str, limit: int = 40) -> str:
    """A matplotlib label: escaped mathtext, visible whitespace, no control characters."""
    return visible_text(str(text).replace("\\", "\\\\").replace("$", r"\$"), limit)


def html_text(text: str, limit: Optional[int] = 80) -> str:
    """Text for an HTML page or a plotly label: visible whitespace and every ``<``, ``>``, ``&``
    and quote as an entity, so a token like ``</script>`` shows as itself and runs nothing."""
    return html.escape(visible_text(text, limit), quote=True)


def format_table(rows: Sequence[dict], columns: Sequence[tuple[str, str, str]]) -> str:
    """A fixed-width text table for the terminal; ``columns`` are (header, key, format spec). Every
    header and cell is :func:`terminal_text` (a label or task name may come from a results file)."""
    cells = [[terminal_text(h) for h, _, _ in columns]]
    for row in rows:
        cells.append([terminal_text(format_value(row.get(key), spec)) for _, key, spec in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_value(value, spec: str) -> str:
    """One table cell: ``-`` for missing, yes/no for booleans, else ``format(value, spec)``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)
