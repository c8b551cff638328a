"""Self-contained interactive HTML reports: one page per run (or several runs side by side).

Plotly draws the figures: it writes interactive, zoomable, hoverable plots from Python, is well
kept, and its JavaScript can be embedded in the page, so a report opens offline with no network
request. The library is embedded once per page; figures are JSON with every ``<``, ``>`` and
``&`` escaped, so no string inside them can close the script. Strings from models, tokenizers
and users must reach plotly through :func:`sinklab.core.text.html_text` (plotly renders a subset
of HTML in labels); page text is escaped here.

A capability's ``plots.py`` turns a run (a summary and its data, in memory or read back from a run
directory) into :class:`Section` objects, its figures the same plotly figures its PNG files are
drawn from (:mod:`sinklab.core.figures`); this module lays them out under a header (command line,
model, package versions, key figures) and writes the page atomically. :class:`RunPage` is the
page of one capability: from a run directory (``sinklab report``, the end of a run) or from a
result in memory.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from .atomic import atomic_path
from .errors import SinklabError
from .figures import styled
from .provenance import package_versions
from .runs import SUMMARY, read_run_info
from .text import format_value, html_text

REPORT_NAME = "report.html"
PLOT_CONFIG = {"displaylogo": False, "responsive": True, "toImageButtonOptions": {"format": "png"}}


@dataclass
class Section:
    """A titled block of trusted HTML (built only from escaped text and :func:`plot`)."""

    title: str
    body: str


def dom_id(run_dir: Path) -> str:
    """A stable id prefix for a run's elements, unique among runs shown side by side."""
    return "r" + hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:8]


def esc(value) -> str:
    """Page text from anywhere: escaped and whitespace made visible (numbers formatted short)."""
    if isinstance(value, float):
        value = f"{value:.4g}"
    return html_text(value, limit=200)


def script_json(obj) -> str:
    """``obj`` as JSON safe inside a <script> element."""
    return _script_safe(json.dumps(obj, separators=(",", ":")))


def _script_safe(text: str) -> str:
    """JSON text with every character that could end a <script> element escaped."""
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def plot(fig, div_id: str, height: Optional[int] = None) -> str:
    """A plotly figure as a div and the script that draws it (the library is on the page once).
    The plot fills its column: a width the figure sets is for its PNG only."""
    import plotly.io as pio

    styled(fig, height).update_layout(width=None)
    spec = _script_safe(pio.to_json(fig, validate=False, engine="json"))
    return f'<div class="plot" id="{esc(div_id)}"></div>' + when_laid_out(
        f"var f={spec};Plotly.newPlot({script_json(div_id)},f.data,f.layout,{script_json(PLOT_CONFIG)});"
    )


def when_laid_out(js: str) -> str:
    """A script that runs ``js`` once the whole page is parsed, in page order: a plot drawn while
    the page still grows would take the width of a column that later columns narrow."""
    return f"<script>sinklabLater(function(){{{js}}});</script>"


#: Where a long name may break: after a ``/`` or ``_`` between two name characters either side
#: (not in ``n/a``, nor next to an escaped ``<`` or ``>``).
BREAKS = re.compile(r"(?<=[\w.-]{2})([/_])(?=[\w.-]{2})")


def breakable(value) -> str:
    """:func:`esc` text that may break after a ``/`` or ``_``: a path or a ``task_name/metric``
    would otherwise set its column's width and push a wide table past the page."""
    return BREAKS.sub(r"\1<wbr>", esc(value))


def heading(text: str) -> str:
    """A column header on two lines at a ``task/metric`` slash (and breakable after an ``_``)."""
    return breakable(text).replace("/<wbr>", "/<br>")


def table(rows: Sequence[dict], columns: Sequence[tuple[str, str, str]]) -> str:
    """An HTML table; ``columns`` are (header, key, format spec) as for the terminal tables. A
    table wider than its column scrolls inside it, its first column (what a row is) staying in
    view, with a shadow at the edge that has more to show."""
    head = "".join(f"<th>{heading(h)}</th>" for h, _, _ in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{breakable(format_value(r.get(k), spec))}</td>" for _, k, spec in columns) + "</tr>" for r in rows
    )
    return f"<div class='wide'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def sortable_table(rows: Sequence[dict], columns: Sequence[tuple[str, str, str]]) -> str:
    """:func:`table` whose rows a click on a header sorts by that column (numbers by value, largest
    first on the first click; empty cells last)."""
    head = "".join(f"<th class='sort' title='sort' onclick='sinklabSort(this)'>{heading(h)}</th>" for h, _, _ in columns)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td data-v='{esc('' if r.get(k) is None else str(r.get(k)))}'>{breakable(format_value(r.get(k), spec))}</td>"
            for _, k, spec in columns
        )
        + "</tr>"
        for r in rows
    )
    return f"<div class='wide'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def key_figures(figures: dict) -> str:
    """A definition list of a run's headline numbers."""
    return (
        "<dl class='keys'>"
        + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in figures.items() if v is not None)
        + "</dl>"
    )


def selector(name: str, options: dict[str, str]) -> str:
    """A drop-down that shows one of several blocks of trusted HTML (e.g. one per seed)."""
    keys = list(options)
    choice = "".join(f'<option value="{i}">{esc(k)}</option>' for i, k in enumerate(keys))
    blocks = "".join(
        f'<div class="choice" data-choice="{i}"{"" if i == 0 else " hidden"}>{options[k]}</div>' for i, k in enumerate(keys)
    )
    return (
        f'<div class="selector"><label>{esc(name)} <select onchange="sinklabChoose(this)">{choice}</select></label>{blocks}</div>'
    )


@functools.lru_cache(maxsize=1)
def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em} h2{font-size:1.15em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.runs{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:1.5em}
.run,section{min-width:0} .wide{overflow-x:auto;max-width:100%} .plot{width:100%} code{overflow-wrap:anywhere} \
dd{overflow-wrap:anywhere;margin:0}
table{border-collapse:separate;border-spacing:0;font-size:.85em;margin:.5em 0}
td,th{border:solid #ddd;border-width:0 1px 1px 0;padding:.2em .5em;text-align:right}
tr>:first-child{border-left-width:1px} thead th{border-top-width:1px} th{background:#f4f4f4} th.sort{cursor:pointer}
.wide tr>:first-child{position:sticky;left:0;z-index:1} .wide td:first-child{background:#fff}
.wide{background:linear-gradient(to left,#fff 30%,#fff0) right/3em 100% no-repeat local,\
radial-gradient(farthest-side at 100% 50%,#0003,#0000) right/1em 100% no-repeat scroll}
dl.keys{display:grid;grid-template-columns:max-content auto;gap:.1em 1em;font-size:.9em}
dt{font-weight:600} .meta{font-size:.8em;color:#555} code{background:#f4f4f4;padding:0 .2em} .note{font-size:.8em;color:#555}
"""

SCRIPT = """
var sinklabQueue=[];
function sinklabLater(f){if(sinklabQueue)sinklabQueue.push(f);else f();}
document.addEventListener('DOMContentLoaded',function(){var q=sinklabQueue;sinklabQueue=null;q.forEach(function(f){f();});});
function sinklabChoose(sel){var box=sel.closest('.selector');
box.querySelectorAll(':scope>.choice').forEach(function(d){d.hidden=(d.dataset.choice!==sel.value);
if(!d.hidden){d.querySelectorAll('.plot').forEach(function(p){Plotly.Plots.resize(p);});}});}
function sinklabSort(th){var table=th.closest('table'),body=table.tBodies[0],col=th.cellIndex;
var down=th.dataset.order!=='desc';th.dataset.order=down?'desc':'asc';
var key=function(r){var t=r.cells[col].dataset.v;var x=parseFloat(t);return isNaN(x)?t:x;};
Array.from(body.rows).sort(function(a,b){var x=key(a),y=key(b);if(x===y)return 0;
if(typeof x!==typeof y)return typeof x==='number'?-1:1;return (x<y?-1:1)*(down?-1:1);})
.forEach(function(r){body.appendChild(r);});}
"""


def header(model: Optional[str], figures: dict, run_dir: Optional[Path] = None) -> str:
    """Where a run came from and its key figures: the run directory's command line and versions
    (``run.json``), or, for a result in memory, the versions of this process."""
    info = read_run_info(run_dir) if run_dir is not None else {"versions": package_versions()}
    versions = ", ".join(f"{k} {v}" for k, v in info.get("versions", {}).items())
    lines = [
        f"<div class='meta'>run directory <code>{esc(Path(run_dir).resolve())}</code></div>"
        if run_dir is not None
        else "<div class='meta'>a result in memory</div>"
    ]
    if info.get("command"):
        lines.append(
            f"<div class='meta'>command <code>{esc(' '.join(info['command']))}</code> ({esc(info.get('started', ''))})</div>"
        )
    if model:
        lines.append(f"<div class='meta'>model <code>{esc(model)}</code></div>")
    if versions:
        lines.append(f"<div class='meta'>{esc(versions)}</div>")
    return "".join(lines) + key_figures(figures)


def write_page(path: Path, title: str, columns: Iterable[tuple[str, Sequence[Section]]]) -> Path:
    """Write the page atomically: one column per run, each a header and its sections."""
    blocks = []
    for heading, sections in columns:
        body = "".join(f"<section><h2>{esc(s.title)}</h2>{s.body}</section>" for s in sections)
        blocks.append(f"<div class='run'><h1>{esc(heading)}</h1>{body}</div>")
    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; "
        "style-src 'unsafe-inline'; img-src data: blob:; font-src data:\">"
        f"<title>{esc(title)}</title><style>{STYLE}</style>"
        f"<script>{_plotly_js()}</script><script>{SCRIPT}</script></head>"
        f"<body><div class='runs'>{''.join(blocks)}</div></body></html>"
    )
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path


def report_path(run_dir: os.PathLike) -> Path:
    return Path(run_dir) / REPORT_NAME


class StoredSummary(dict):
    """A summary read from a run directory: a key it lacks is a damaged (or foreign) file, said in
    one line, not a KeyError deep inside a page."""

    path: Path

    def __missing__(self, key):
        raise SinklabError(f"{self.path} has no {key!r}: the file is damaged, or another sinklab version wrote it")


def read_summary(run_dir: os.PathLike) -> Optional[dict]:
    """``summary.json`` of a run directory (None when there is none); a file that is not a JSON
    object (cut short, binary, a list) is a :class:`SinklabError`, and so is a key it lacks."""
    path = Path(run_dir) / SUMMARY
    if not path.exists():
        return None

    def stored(obj: dict) -> StoredSummary:
        summary = StoredSummary(obj)
        summary.path = path
        return summary

    try:
        summary = json.loads(path.read_text(encoding="utf-8"), object_hook=stored)
    except (OSError, ValueError) as exc:
        raise SinklabError(
            f"{path} cannot be read ({type(exc).__name__}: {str(exc).splitlines()[0][:120]}): the file is damaged"
        ) from None
    if not isinstance(summary, dict):
        raise SinklabError(f"{path} holds a JSON {type(summary).__name__}, not a run's summary: the file is damaged")
    return summary


@dataclass(frozen=True)
class RunPage:
    """The report page of one capability: ``sections(summary, data, uid, run_dir)`` builds its
    sections (the header reads ``run.json`` when ``run_dir`` is given) from a summary and the data
    ``read_data(run_dir)`` reads back; ``command`` names the page and ``heading`` a run's column."""

    command: str
    heading: str
    read_data: Callable[[Path], dict]
    sections: Callable[..., list[Section]]

    def columns(self, run_dirs: Sequence[Path]) -> list[tuple[str, list[Section]]]:
        """One column per run directory."""
        return [
            (f"{self.heading}: {d.name}", self.sections(read_summary(d), self.read_data(d), dom_id(d), d))
            for d in map(Path, run_dirs)
        ]

    def write(self, run_dir: Path) -> Path:
        """``run_dir``'s report.html, from what the run directory holds."""
        return write_page(report_path(run_dir), f"sinklab {self.command} {Path(run_dir).name}", self.columns([run_dir]))

    def write_result(self, path: os.PathLike, summary: dict, data: dict) -> Path:
        """A page of a result in memory (``summary`` and its data), written to ``path``."""
        heading = f"{self.heading}: {summary.get('model', '')}"
        return write_page(Path(path), f"sinklab {self.command}", [(heading, self.sections(summary, data, dom_id(Path(path))))])
