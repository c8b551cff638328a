"""Static images of the report's plotly figures: one definition per plot, two outputs.

Each capability builds its plotly figures once (``<capability>/plots.py``); ``report.html``
embeds them and :func:`save_images` writes the same figures as PNG files through kaleido 1.x,
which renders them with plotly.js in a headless Chrome or Chromium (Debian's ``chromium``, or
the one ``BROWSER_PATH`` names). A PNG therefore shows what the page shows, with the same escaping
(:func:`~sinklab.core.text.html_text`); MathJax is off, so no text is read as LaTeX and nothing is
fetched from the network.

One browser serves a process: it starts on the first export (a few seconds) and is reused until
the process exits, so a batch of figures costs only its rendering. :func:`warm_up` starts it in the
background when a run begins, so that the start overlaps the measurement instead of following it. With no browser, or one that
does not answer within :data:`START_TIMEOUT_S` (or a batch that does not finish within
:func:`batch_timeout`), no image is written: the run goes on, a warning says why (once per
process, which then stops trying), and :attr:`Images.skipped` holds the reason for the run's
records. The page has every plot either way.

``SINKLAB_IMAGES=off`` in the environment turns the PNGs off (no browser is started): for a
cluster without Chrome, or many small runs whose pages are enough. The run records why.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import os
import signal
import subprocess
import threading
import time
import warnings
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .atomic import atomic_path

__all__ = [
    "COLORS",
    "GRID_TOP",
    "LEGEND_BELOW",
    "Images",
    "layer_axis",
    "save_images",
    "series_style",
    "styled",
    "title",
    "warm_up",
]

#: The environment variable that turns PNG figures off (``off``, ``0``, ``no`` or ``false``).
IMAGES_ENV = "SINKLAB_IMAGES"
#: Size of a PNG whose figure sets no width or height (pixels, scale 1).
STATIC_WIDTH, STATIC_HEIGHT = 900, 450
#: A browser that has not started within this many seconds is taken as hung.
START_TIMEOUT_S = 60.0
#: Seconds a batch may take: this much, plus :data:`SECONDS_PER_FIGURE` per figure.
BATCH_BASE_S, SECONDS_PER_FIGURE = 30.0, 5.0
#: A legend in rows under the plot, clear of the x axis's title (plotly widens the bottom margin for it).
LEGEND_BELOW = {"orientation": "h", "yanchor": "top", "y": -0.25, "x": 0}
#: The look of every figure, on the page and in its PNG (a figure may set its own margins).
TEMPLATE, MARGIN = "plotly_white", {"l": 60, "r": 20, "t": 80, "b": 50}
#: The top margin of a grid of plots, whose subplot titles sit under the figure's two-line title.
GRID_TOP = 115
#: A series' colour, marker and dash by its place (a model, a kept-sink setting), the same in every
#: figure (plotly's own cycle follows the traces drawn, so a series missing from one figure would
#: shift the rest); markers and dashes tell apart series that lie on each other.
COLORS = ["#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692", "#b6e880", "#ff97ff", "#fecb52"]
SYMBOLS, DASHES = ["circle", "square", "diamond", "triangle-up", "x"], ["solid", "dash", "dot", "dashdot"]


def series_style(index: int) -> dict:
    """The ``index``-th series' ``color``, ``symbol`` and ``dash`` (:data:`COLORS`, :data:`SYMBOLS`, :data:`DASHES`)."""
    return {"color": COLORS[index % len(COLORS)], "symbol": SYMBOLS[index % len(SYMBOLS)], "dash": DASHES[index % len(DASHES)]}


@dataclass(frozen=True)
class Images:
    """What :func:`save_images` did: the file names ``written`` (in the order given), and why
    none were, when ``skipped`` (no browser, or one that hung)."""

    written: list[str] = field(default_factory=list)
    skipped: Optional[str] = None


def styled(fig, height: Optional[int] = None):
    """``fig`` in the one look of sinklab's figures (``height`` in pixels, when given)."""
    margin = {side: value for side, value in MARGIN.items() if fig.layout.margin[side] is None}
    _set_template(fig.layout)
    return fig.update_layout(margin=margin, **({"height": height} if height else {}))


def _set_template(layout) -> None:
    """Give ``layout`` :data:`TEMPLATE` without plotly validating a copy of it again: that took
    about 30 ms a figure, most of a small run's page. The figure is the same (its JSON too, the
    template having been validated once), and plotly sets its own default template this way; a
    plotly without the ``_validate`` switch validates the template as before."""
    validate = getattr(layout, "_validate", True)
    layout._validate = False
    try:
        layout.template = _validated_template()
    finally:
        layout._validate = validate


@functools.cache
def _validated_template():
    import plotly.graph_objects as go

    return go.Layout(template=TEMPLATE).template


def title(text: str, subtitle: Optional[str] = None) -> dict:
    """A figure title, with a smaller second line (e.g. the model's name, then what is plotted), so
    that neither line outgrows a page column; both are already escaped text."""
    return {"text": text, **({"subtitle": {"text": subtitle}} if subtitle else {})}


def layer_axis(n_layers: int, **axis) -> dict:
    """An axis of layer indices: whole numbers only, about a dozen ticks at most."""
    return {"title": "layer", "tick0": 0, "dtick": max(1, n_layers // 12), **axis}


def batch_timeout(n_figures: int) -> float:
    return BATCH_BASE_S + SECONDS_PER_FIGURE * n_figures


class BrowserUnavailable(Exception):
    """No browser could render: none installed, it failed to start, or it stopped answering."""


#: Why this process writes no images (set by the first failure; later exports skip at once).
_unavailable: Optional[str] = None
_browser: Optional["_Browser"] = None
#: Why a background start (:func:`warm_up`) failed: the next export reports it instead of retrying.
_start_failure: Optional[BrowserUnavailable] = None
#: Held while the browser starts, so an export waits for a start already under way.
_starting = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child starts its own browser: a lock held by the parent's start thread is not its own."""
    global _starting, _start_failure
    _starting, _start_failure = threading.Lock(), None


os.register_at_fork(after_in_child=_after_fork_in_child)


def warm_up() -> None:
    """Start this process's browser in a daemon thread, unless images are off, the browser is
    known to be unavailable, or it is already started: a run calls it before measuring, so the
    browser's few seconds of start-up overlap the measurement. A failure is kept for the first
    export, which reports it as its own (warning and ``Images.skipped``)."""
    if images_turned_off() or _unavailable is not None or (_browser is not None and _browser.pid == os.getpid()):
        return
    threading.Thread(target=_start_in_background, name="sinklab-browser-start", daemon=True).start()


def _start_in_background() -> None:
    global _start_failure
    try:
        _process_browser()
    except BrowserUnavailable as exc:
        _start_failure = exc


def save_images(figures: dict, out: str | os.PathLike) -> Images:
    """Write every figure of ``figures`` (file name -> plotly figure) as a PNG into ``out``, in
    one batch, each file atomically (a temporary file, then a rename). A figure's own layout
    width and height size its image (else :data:`STATIC_WIDTH` x :data:`STATIC_HEIGHT`)."""
    global _unavailable, _browser
    if not figures:
        return Images()
    if images_turned_off():
        return Images(skipped=f"PNG figures turned off ({IMAGES_ENV}={os.environ[IMAGES_ENV]})")
    if _unavailable is None:
        try:
            _write_batch(figures, Path(out))
            return Images(list(figures))
        except BrowserUnavailable as exc:
            _unavailable = str(exc)
            if _browser is not None:
                _browser.abandon()
                _browser = None
            warnings.warn(f"no PNG figures written: {exc}; report.html still shows every plot", stacklevel=2)
    return Images(skipped=_unavailable)


def images_turned_off() -> bool:
    return os.environ.get(IMAGES_ENV, "").strip().lower() in ("off", "0", "no", "false")


def _write_batch(figures: dict, out: Path) -> None:
    with ExitStack() as stack:
        jobs = []
        for name, fig in figures.items():
            styled(fig)
            size = {"width": fig.layout.width or STATIC_WIDTH, "height": fig.layout.height or STATIC_HEIGHT}
            jobs.append(
                {"fig": fig, "path": stack.enter_context(atomic_path(out / name)), "opts": {"format": "png", "scale": 1, **size}}
            )
        _process_browser().render(jobs, batch_timeout(len(jobs)))


def _process_browser() -> "_Browser":
    """The process's browser, started on first use (a forked child starts its own); waits for a
    start that :func:`warm_up` has under way, and raises the failure of one that failed."""
    global _browser, _start_failure
    with _starting:
        if _start_failure is not None:
            failure, _start_failure = _start_failure, None
            raise failure
        if _browser is None or _browser.pid != os.getpid():
            _browser = _Browser()
        return _browser


class _Browser:
    """A kaleido browser driven from an event loop in a daemon thread of its own, so that every
    call can time out and a hung browser never keeps the process alive."""

    def __init__(self) -> None:
        try:
            import kaleido
            from choreographer import errors
        except ImportError:
            raise BrowserUnavailable("kaleido is not installed (pip install 'kaleido>=1.0')") from None
        #: A browser that cannot start or went away (a figure plotly.js cannot draw is a bug, and raises).
        self.failures = (errors.BrowserFailedError, errors.BrowserClosedError, errors.BrowserDepsError, errors.ChannelClosedError)
        self.pid = os.getpid()
        try:
            self.kaleido = kaleido.Kaleido(mathjax=False, timeout=None)
        except errors.ChromeNotFoundError:
            where = os.environ.get("BROWSER_PATH")
            raise BrowserUnavailable(
                f"no browser at BROWSER_PATH={where!r}"
                if where
                else "no Chrome or Chromium found (install chromium, or set BROWSER_PATH)"
            ) from None
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="sinklab-kaleido", daemon=True).start()
        try:
            self._call(self.kaleido.open(), START_TIMEOUT_S, "start")
        except BrowserUnavailable:
            self.abandon()
            raise

    def render(self, jobs: list[dict], timeout: float) -> None:
        self._call(self.kaleido.write_fig_from_object(jobs, cancel_on_error=True), timeout, "draw them")

    def close(self) -> None:
        """Close the browser cleanly (at exit); one that does not close in time is killed."""
        try:
            self._call(self.kaleido.close(), 10, "close")
            self.loop.call_soon_threadsafe(self.loop.stop)
        except BrowserUnavailable:
            self.abandon()

    def abandon(self) -> None:
        """Kill the browser (every process of its session), let kaleido clean up after it, and
        stop the loop: a browser that hung or failed gets no second chance in this process (the
        reason is already recorded; kaleido's tasks that fail as it goes are not reported again)."""
        self.loop.call_soon_threadsafe(self.loop.set_exception_handler, lambda loop, context: None)
        process = getattr(self.kaleido, "subprocess", None)
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL) if hasattr(os, "killpg") else process.kill()
                process.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        with suppress(Exception):  # tidying up after a browser already given up, whose reason is recorded
            self._call(self.kaleido.close(), 5, "close")
        self.loop.call_soon_threadsafe(self.loop.stop)

    def _call(self, coro, timeout: float, what: str):
        """Run ``coro`` on the browser's loop; a timeout or a browser failure is BrowserUnavailable,
        any other error (a figure plotly.js cannot draw, a file that cannot be written) raises."""
        started = time.monotonic()
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout), self.loop)
        try:
            return future.result(timeout + 15)  # the loop's own timeout fires first unless the loop is stuck
        except Exception as exc:
            future.cancel()
            if time.monotonic() - started >= timeout:  # choreographer turns a cancelled call into a failure of its own
                raise BrowserUnavailable(f"the browser did not {what} within {timeout:.0f} s") from None
            if isinstance(exc, self.failures) or isinstance(exc, OSError) and what == "start":
                raise BrowserUnavailable(f"the browser failed: {exc.args[0] if exc.args else type(exc).__name__}") from None
            raise


@atexit.register
def _close_at_exit() -> None:
    # a start still under way (a run that ended before its figures) is waited for, so its browser is closed too
    if _starting.acquire(timeout=START_TIMEOUT_S):
        _starting.release()
    if _browser is not None and _browser.pid == os.getpid():
        _browser.close()
