"""The stream's report page (:mod:`.plots` builds its sections): from a run directory, or from a
result in memory."""

from __future__ import annotations

from pathlib import Path

from ..core import html
from . import plots

PAGE = html.RunPage("stream", "stream", plots.read_data, plots.sections)
columns, write, write_page = PAGE.columns, PAGE.write, PAGE.write_result


def is_run(run_dir: Path) -> bool:
    return "policies" in (html.read_summary(run_dir) or {})
