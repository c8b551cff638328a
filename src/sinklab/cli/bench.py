"""``sinklab bench``: the sink benchmark suite on models, and ``--compare`` to merge results."""

from __future__ import annotations

import argparse

from ..bench import BENCH, BENCH_COMPARE, SUITES, BenchCompareConfig, BenchConfig
from ..bench.plots import leaderboard_columns, shown_rows
from ..core.errors import check
from ..core.text import format_table
from .args import (
    MODEL_HELP,
    add_config_arguments,
    add_launcher_arguments,
    add_overwrite_argument,
    config_from,
    launcher_settings,
    run_out,
    written,
)

DEFAULT_OUT, DEFAULT_COMPARE_OUT = "runs/bench", "runs/bench-compare"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="the sink benchmark: a versioned suite of tasks on any models, one results file per model, a leaderboard",
        description=f"Run the suite ({', '.join(SUITES)}) on each model, one job per (model, task); a stopped run resumes. "
        "With --compare, merge the results of bench runs made elsewhere into one leaderboard.",
    )
    p.add_argument("model", nargs="*", help=f"{MODEL_HELP}; several: one leaderboard")
    p.add_argument("--compare", nargs="+", metavar="RUN", help="merge these bench run directories (or results files)")
    add_config_arguments(p, BenchConfig)
    add_launcher_arguments(p)
    p.add_argument("--out", default=None, help=f"run directory (default {DEFAULT_OUT}; with --compare {DEFAULT_COMPARE_OUT})")
    add_overwrite_argument(p)
    p.set_defaults(
        handler=bench_command, on_interrupt="stopped; the finished jobs are kept in --out and the same command resumes"
    )


def bench_command(args: argparse.Namespace) -> int:
    if args.compare:
        check(not args.model, "--compare merges finished runs: give run directories to --compare, not models")
        given = [flag for flag, value in (("--tasks", args.tasks), ("--limit", args.limit)) if value]
        check(not given, f"--compare merges the results as they are: {', '.join(given)} would not change them")
        args.out = args.out or DEFAULT_COMPARE_OUT
        result = run_out(args, BENCH_COMPARE, BenchCompareConfig(runs=tuple(args.compare)))
    else:
        args.out = args.out or DEFAULT_OUT
        launcher = launcher_settings(args)
        cfg = config_from(BenchConfig, args, launcher, models=tuple(args.model) or (None,))
        result = run_out(args, BENCH, cfg, launcher=launcher)
    if not result.reused:
        print(format_table(shown_rows(result.summary), leaderboard_columns(result.summary)))
        print(f"\noutputs: {written(result)}")
    return 0
