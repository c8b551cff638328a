"""Text for terminals and figures: escaping of untrusted strings and fixed-width tables.

Every text that can come from a model or a user (token strings, run names, model names) goes
through :func:`safe_text` before it reaches a figure, so matplotlib never interprets it as
mathtext and no control characters end up in a file.
"""

from __future__ import annotations

from typing import Sequence


def safe_text(text: str, limit: int = 40) -> str:
    """A label safe to render: escaped mathtext, visible whitespace, no control characters."""
    text = str(text).replace("\\", "\\\\").replace("$", r"\$")
    text = text.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    text = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_table(rows: Sequence[dict], columns: Sequence[tuple[str, str, str]]) -> str:
    """A fixed-width text table; ``columns`` are (header, key, format spec)."""
    cells = [[h for h, _, _ in columns]]
    for row in rows:
        cells.append([_fmt(row.get(key), spec) for _, key, spec in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(value, spec: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)
