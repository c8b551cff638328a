"""Headless Chromium (Debian's, driven by Playwright's Python API) for the report tests and for
the README screenshots (``python tests/browser.py REPORT.html OUT.png``)."""

from __future__ import annotations

import os
import shutil
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Visit:
    """A loaded report page and everything it did that a report must not do."""

    page: object
    console_errors: list = field(default_factory=list)
    requests: list = field(default_factory=list)
    dialogs: list = field(default_factory=list)
    listeners: dict = field(default_factory=dict)  # event -> what records it, removed at the page's next visit

    def problems(self) -> list:
        return [*self.console_errors, *(f"request {u}" for u in self.requests), *(f"dialog {d}" for d in self.dialogs)]

    def unrendered_plots(self) -> list[str]:
        """Ids of plot elements with no drawn plotly SVG."""
        return self.page.evaluate(
            "Array.from(document.querySelectorAll('.plot'))"
            ".filter(p => !p.hidden && p.offsetParent !== null && !p.querySelector('.main-svg')).map(p => p.id)"
        )


def require_chromium() -> None:
    """Skip a test that needs a browser where there is none, except on CI, which must run it."""
    import pytest

    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser tests: `make test` installs Debian's chromium (apt-get install chromium)")
        pytest.skip("no chromium on this machine: `make test` installs it where it may (apt-get install chromium)")


@contextmanager
def chromium():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()


#: Each browser's last visit: its page is the one every visit navigates.
_LAST: dict = {}


def visit(browser, report: Path, width: int = 1300) -> Visit:
    """Open ``report`` from disk and wait for its plots; record errors, requests and dialogs.

    Every visit navigates the browser's one page, ``width`` px wide, rather than opening a new
    one: the renderer keeps V8's compiled plotly.js (4.6 MB inlined in every report) from the last
    visit, so a visit takes about 0.5 s instead of 3 s on 2 cores. Each navigation is a fresh
    document (no state carries over); only this visit's events are recorded."""
    last = _LAST.get(browser)
    if last is not None and not last.page.is_closed():
        page = last.page
        for event, listener in last.listeners.items():
            page.remove_listener(event, listener)
    else:
        page = browser.new_page()
    page.set_viewport_size({"width": width, "height": 900})
    seen = _LAST[browser] = Visit(page)
    seen.listeners = {
        "console": lambda m: seen.console_errors.append(m.text) if m.type == "error" else None,
        "pageerror": lambda e: seen.console_errors.append(str(e)),
        "request": lambda r: None if r.url.startswith("file:") else seen.requests.append(r.url),
        "dialog": lambda d: (seen.dialogs.append(d.message), d.dismiss()),
    }
    for event, listener in seen.listeners.items():
        page.on(event, listener)
    page.goto(Path(report).resolve().as_uri())
    page.wait_for_load_state("load")
    page.wait_for_timeout(300)
    return seen


#: Pixels of slack in the layout checks (sub-pixel rounding of borders and fractional widths).
SLACK = 1.5

LAYOUT_JS = """(slack) => {
  const box = e => e.getBoundingClientRect(), shown = e => e.offsetParent !== null && !e.closest('[hidden]');
  const name = e => (e.id || e.className || e.tagName) +\
 (e.closest('section') ? ' in "' + e.closest('section').querySelector('h2').textContent + '"' : '');
  const inside = (a, b) => a.left >= b.left - slack && a.right <= b.right + slack &&\
 a.top >= b.top - slack && a.bottom <= b.bottom + slack;
  const overlap = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > slack &&\
 Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > slack;
  const found = [], panels = Array.from(document.querySelectorAll('.run, section')).filter(shown);
  panels.forEach((a, i) => panels.slice(i + 1).forEach(b => {
    if (!a.contains(b) && !b.contains(a) && overlap(box(a), box(b))) found.push('overlap: ' + name(a) + ' and ' + name(b)); }));
  document.querySelectorAll('section').forEach(s => {\
 if (shown(s) && s.scrollWidth > s.clientWidth + slack) found.push('wider than its column: ' + name(s)); });
  document.querySelectorAll('section > *, .selector .choice > *').forEach(e => {
    if (shown(e) && !inside(box(e), box(e.closest('section')))) found.push('outside its section: ' + name(e)); });
  document.querySelectorAll('.plot').forEach(p => {
    if (!shown(p)) return;
    const svg = p.querySelector('.main-svg');
    if (svg && box(svg).width > box(p).width + slack) found.push('plot drawn wider than its box: ' + name(p));
    p.querySelectorAll('.main-svg text').forEach(t => { const r = box(t);
      if (r.width > 0 && t.textContent.trim() && !inside(r, box(p)))\
 found.push('text cut off: "' + t.textContent + '" of ' + name(p)); });
  });
  return found;
}"""


def layout_problems(page) -> list[str]:
    """Panels (run columns, sections) that overlap, content wider than its section, and plots
    drawn wider than their box or with text (titles, legends, ticks) outside it, as laid out now."""
    return page.evaluate(LAYOUT_JS, SLACK)


def click_heatmap_cell(page, div_id: str, x: float, y: float) -> None:
    """A real mouse click on the cell at data coordinates (x, y) of the heatmap in ``div_id``."""
    where = page.evaluate(
        """([id, x, y]) => { const gd = document.getElementById(id), box = gd.getBoundingClientRect();
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        return [box.left + xa._offset + xa.l2p(x), box.top + ya._offset + ya.l2p(y)]; }""",
        [div_id, x, y],
    )
    page.mouse.click(*where)
    page.wait_for_timeout(200)


def screenshot_sections(report: Path, png: Path, sections: list[int], width: int = 1100) -> list[str]:
    """A PNG of the given sections of a report (0-indexed ``<section>`` elements), for the README;
    returns the page's problems (there should be none)."""
    with chromium() as b:
        seen = visit(b, report, width)
        box = seen.page.evaluate(
            """(idx) => { const s = Array.from(document.querySelectorAll('section'))\
.filter((_, i) => idx.includes(i)).map(e => e.getBoundingClientRect());
            return [Math.min(...s.map(r => r.left)), Math.min(...s.map(r => r.top)) + window.scrollY,\
 Math.max(...s.map(r => r.right)), Math.max(...s.map(r => r.bottom)) + window.scrollY]; }""",
            sections,
        )
        seen.page.screenshot(
            path=str(png), full_page=True, clip={"x": box[0], "y": box[1], "width": box[2] - box[0], "height": box[3] - box[1]}
        )
        return seen.problems()


if __name__ == "__main__":  # python tests/browser.py REPORT.html OUT.png SECTION[,SECTION...]
    problems = screenshot_sections(Path(sys.argv[1]), Path(sys.argv[2]), [int(i) for i in sys.argv[3].split(",")])
    print(sys.argv[2], "problems:", problems or "none")
