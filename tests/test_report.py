"""Figures and tables: model-supplied text is escaped before it reaches a plot."""

from sinklab.core.figures import subplots
from sinklab.core.text import format_table, safe_text


def test_safe_text_escapes_mathtext_and_control_characters():
    hostile = "$\\frac{1}{0}$\n\x1b[31mred\ttab" + "x" * 100
    out = safe_text(hostile, limit=40)
    assert "$" not in out.replace("\\$", "")  # every dollar is escaped
    assert "\n" not in out and "\x1b" not in out and "\t" not in out
    assert len(out) <= 40
    fig, ax = subplots()
    ax.set_title(safe_text("$\\undefinedcommand{x}$ and $$"))
    fig.canvas.draw()  # would raise on unescaped, invalid mathtext


def test_format_table_aligns_and_marks_missing_values():
    table = format_table([{"a": 1.23456, "b": None, "c": True}], [("A", "a", ".2f"), ("B", "b", ""), ("C", "c", "")])
    lines = table.splitlines()
    assert lines[0].split() == ["A", "B", "C"] and lines[2].split() == ["1.23", "-", "yes"]
