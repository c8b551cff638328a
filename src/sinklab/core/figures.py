"""Matplotlib set up once for files (no display), and atomic figure saving.

Capabilities import ``plt`` from here so that the headless backend is always chosen first.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .runs import atomic_path  # noqa: E402

__all__ = ["plt", "save_figure"]


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Atomically save a matplotlib figure and close it."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=Path(path).suffix.lstrip(".") or "png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return Path(path)
