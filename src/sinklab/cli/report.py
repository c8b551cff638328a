"""``sinklab report``: (re)build the interactive HTML report of one run, or of several side by side."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..adapt import page as adapt_page
from ..core import html
from ..core.errors import SinklabError
from ..intervene import page as intervene_page
from ..pretrain import page as pretrain_page
from ..scan import compare_page as scan_compare_page
from ..scan import page as scan_page
from ..stream import page as stream_page
from ..trigger import page as trigger_page
from .args import STARTS_OVER

#: Every kind of run directory and the page module that reads it (checked in this order).
PAGES = {
    "adapt": adapt_page,
    "scan-compare": scan_compare_page,
    "scan": scan_page,
    "trigger": trigger_page,
    "intervene": intervene_page,
    "pretrain": pretrain_page,
    "stream": stream_page,
}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        help="(re)build the interactive HTML report of runs",
        description=(
            "Write report.html for a run directory of any sinklab command (runs write it themselves when they end). "
            "With several directories, write one page with the runs side by side; pretraining runs (or compare "
            "directories) share their plots, one line per run. The page is self-contained and opens offline."
        ),
    )
    p.add_argument("runs", nargs="+", help="run directories")
    p.add_argument(
        "--out", default=None, help="the page to write (default: RUN/report.html for one run, runs/report.html for several)"
    )
    p.set_defaults(handler=report_command, on_interrupt=STARTS_OVER)


def kind_of(run_dir: Path) -> str:
    if not run_dir.is_dir():
        raise SinklabError(f"no such run directory: {run_dir}")
    kind = next((name for name, page in PAGES.items() if page.is_run(run_dir)), None)
    summary = html.read_summary(run_dir) if kind is None else None  # a damaged one: its own line
    if summary is not None:
        raise SinklabError(
            f"{run_dir / 'summary.json'} (kind {summary.get('kind')!r}) is there, but not the files its report reads: "
            "the run is incomplete or damaged; run its command again with --overwrite"
        )
    if kind is None:
        raise SinklabError(
            f"{run_dir} is not a finished sinklab run (no summary.json, metrics.jsonl or compare.json that a report can read)"
        )
    return kind


def build(run_dirs: list[Path], out: Path) -> Path:
    """One page: runs of one kind through that kind's page, mixed kinds one column each."""
    kinds = [kind_of(d) for d in run_dirs]
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SinklabError(f"cannot write {out}: {exc.strerror or exc}") from None
    if len(set(kinds)) == 1:
        columns = PAGES[kinds[0]].columns(run_dirs)
    else:
        columns = [column for d, kind in zip(run_dirs, kinds) for column in PAGES[kind].columns([d])]
    title = "sinklab report: " + ", ".join(d.name for d in run_dirs)
    return html.write_page(out, title, columns)


def report_command(args: argparse.Namespace) -> int:
    run_dirs = [Path(d) for d in args.runs]
    out = Path(args.out) if args.out else html.report_path(run_dirs[0]) if len(run_dirs) == 1 else Path("runs") / html.REPORT_NAME
    print(f"report: {build(run_dirs, out)}")
    return 0
