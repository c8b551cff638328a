"""Progress bars: every bar of sinklab is made by :func:`progress_bar`, so one switch governs them;
and :class:`PhaseClock`, the wall time of a run's phases.

``--quiet`` (:func:`set_quiet`) turns every bar off, and so does tqdm's own switch, the environment
variable ``TQDM_DISABLE`` (any non-empty value, as tqdm reads it; read when a bar is made), which tqdm
alone would not honour here because every bar is made with an explicit ``disable``. When stderr
is not a terminal (a log file, a pipe, a batch job) a bar redraws at most once every
:data:`LOG_INTERVAL` seconds instead of ten times a second, so a long run leaves a few lines in its
log rather than megabytes.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Optional

# tqdm.auto draws a widget in a notebook, which needs ipywidgets; without it tqdm warns "IProgress
# not found" on every bar, so a notebook without ipywidgets gets the text bar instead.
if importlib.util.find_spec("ipywidgets") is not None:
    from tqdm.auto import tqdm
else:
    from tqdm import tqdm

#: Seconds between redraws when stderr is not a terminal.
LOG_INTERVAL = 60.0

_quiet = False


def set_quiet(quiet: bool) -> None:
    """Turn every progress bar off (``--quiet``) or back on."""
    global _quiet
    _quiet = quiet


def is_quiet() -> bool:
    return _quiet


def progress_bar(iterable: Optional[Iterable] = None, *, enabled: bool = True, **kwargs: Any) -> tqdm:
    """A tqdm bar under the one policy; ``enabled=False`` (a caller's ``progress=False``) turns it off too."""
    if not _stderr_is_terminal():
        kwargs.setdefault("mininterval", LOG_INTERVAL)
    return tqdm(iterable, disable=_quiet or not enabled or _disabled_by_env(), **kwargs)


def _disabled_by_env() -> bool:
    """Whether ``TQDM_DISABLE`` asks for no bars, read as tqdm reads it (its ``envwrap`` converts
    the string with the type of ``disable``'s default, ``bool``): any non-empty value, "0" and
    "false" included, turns the bars off; unset or empty leaves them on."""
    return bool(os.environ.get("TQDM_DISABLE", ""))


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


class PhaseClock:
    """Wall time of a run's named phases (what a user waits for), kept for its summary."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(time.perf_counter() - start, 3)
