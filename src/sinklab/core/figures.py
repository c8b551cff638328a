"""Figures for files, made without pyplot, and atomic figure saving.

:func:`subplots` builds a standalone ``matplotlib.figure.Figure``: it belongs to no backend and no
window, so sinklab never switches the caller's backend (a notebook's inline plots keep working)
and a figure never lingers in pyplot's registry (nothing to close, no memory growing over a sweep).
"""

from __future__ import annotations

import os
from pathlib import Path

from matplotlib.figure import Figure

from .runs import atomic_path

__all__ = ["save_figure", "subplots"]


def subplots(nrows: int = 1, ncols: int = 1, figsize=None, **grid):
    """pyplot.subplots' (figure, axes) for a figure that only goes to a file."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **grid)


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Atomically save a figure (PNG unless the suffix says otherwise)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=Path(path).suffix.lstrip(".") or "png", dpi=110, bbox_inches="tight")
    return Path(path)
