"""What every run returns in memory: its summary (exactly what its ``summary.json`` holds) and a tidy
table of it.

A run's summary carries ``kind`` (which run wrote it) and ``schema_version`` (bumped when a key
changes meaning), so a script reading many run directories can tell them apart. Each capability
says how its summary becomes rows (one observation per row, long form): ``frame()`` is that table
as a pandas DataFrame, the form every analysis in a notebook goes through.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from .errors import SinklabError
from .runs import jsonable

SCHEMA_VERSION = 1


def stamped(kind: str, summary: dict) -> dict:
    """``summary`` as JSON values (non-finite numbers as None), led by its kind and schema version."""
    return {"kind": kind, "schema_version": SCHEMA_VERSION, **jsonable(summary)}


@dataclass
class RunResult:
    """A run's results in memory: ``summary`` (the dict summary.json holds), ``frame()`` (a DataFrame,
    long form) and ``out`` (the run directory, when one was written)."""

    summary: dict
    rows: Callable[[dict], Iterable[dict]]
    out: Optional[Path] = None

    @property
    def kind(self) -> str:
        return self.summary["kind"]

    def frame(self):
        """The summary as a pandas DataFrame, one observation per row."""
        try:
            import pandas as pd
        except ImportError:
            raise SinklabError("frame() needs pandas: pip install pandas") from None
        return pd.DataFrame(list(self.rows(self.summary)))

    def __repr__(self) -> str:
        where = f", out={str(self.out)!r}" if self.out else ""
        return f"RunResult(kind={self.kind!r}, keys={len(self.summary)}{where})"
