"""Text for terminals and figures: escaping of untrusted strings and fixed-width tables.

Every text that can come from a model or a user (token strings, run names, model names) goes
through :func:`safe_text` before it reaches a matplotlib figure (no mathtext, no control
characters) and through :func:`html_text` before it reaches an HTML page or a plotly figure (no
markup: plotly renders a subset of HTML tags in labels and hover text).
"""

from __future__ import annotations

import html
from typing import Sequence


def visible_text(text: str, limit: int = 40) -> str:
    """Whitespace made visible, control characters escaped, cut to ``limit`` characters."""
    text = str(text).replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    text = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def safe_text(text: str, limit: int = 40) -> str:
    """A matplotlib label: escaped mathtext, visible whitespace, no control characters."""
    return visible_text(str(text).replace("\\", "\\\\").replace("$", r"\$"), limit)


def html_text(text: str, limit: int = 80) -> str:
    """Text for an HTML page or a plotly label: visible whitespace and every ``<``, ``>``, ``&``
    and quote as an entity, so a token like ``</script>`` shows as itself and runs nothing."""
    return html.escape(visible_text(text, limit), quote=True)


def format_table(rows: Sequence[dict], columns: Sequence[tuple[str, str, str]]) -> str:
    """A fixed-width text table; ``columns`` are (header, key, format spec)."""
    cells = [[h for h, _, _ in columns]]
    for row in rows:
        cells.append([format_value(row.get(key), spec) for _, key, spec in columns])
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
