"""``sinklab compare``: pretraining runs side by side (a table, loss and sink plots, a page)."""

from __future__ import annotations

import argparse

from ..core.text import format_table
from ..pretrain import COLUMNS, COMPARE_RUNS, CompareRunsConfig
from .args import STARTS_OVER, run_out, written


def add_parser(sub) -> None:
    c = sub.add_parser("compare", help="compare pretraining runs: a table and loss / sink plots")
    c.add_argument("runs", nargs="+", help="run directories of sinklab pretrain")
    c.add_argument(
        "--target", type=float, default=None, help="validation loss for 'steps to target' (default: the worst final loss)"
    )
    c.add_argument(
        "--out",
        default="runs/compare",
        help="where the plots, summary.json and the page go, rebuilt each time (default runs/compare)",
    )
    c.set_defaults(handler=compare_command, on_interrupt=STARTS_OVER)


def compare_command(args: argparse.Namespace) -> int:
    args.overwrite = True  # a comparison is rebuilt each time: its runs may have changed
    result = run_out(args, COMPARE_RUNS, CompareRunsConfig(tuple(args.runs), args.target))
    print(format_table(result.summary["rows"], COLUMNS))
    print(f"\noutputs: {written(result)}")
    return 0
