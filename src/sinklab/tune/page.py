"""The tuning run's report page (:mod:`.plots` builds its sections): from a run directory, or from
a result in memory."""

from __future__ import annotations

from ..core import html
from . import plots

PAGE = html.RunPage("tune", "tuning", plots.read_data, plots.sections)
columns, write, write_page = PAGE.columns, PAGE.write, PAGE.write_result
