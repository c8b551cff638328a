"""``sinklab tune``: ZeroTuning or ACT on BIG-bench tasks, judged by lm-evaluation-harness."""

from __future__ import annotations

import argparse

from ..tune import READ_BY_METHOD, TUNE, TuneConfig, check_method_read
from ..tune import plots as tune_plots
from .args import (
    MODEL_HELP,
    add_config_arguments,
    add_overwrite_argument,
    config_from,
    defer_defaults,
    given_settings,
    run_out,
    written,
)

DEFAULT_OUT = "runs/tune"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "tune",
        help="the sink as a lever for accuracy: ZeroTuning or ACT on BIG-bench tasks, judged by lm-eval",
        description="Profile every head on a task's validation split, choose a tuning there (ZeroTuning: the initial "
        "token's attention scaled per head; ACT: later sinks calibrated), and judge it against the untouched model on "
        "the test split, example by example, through lm-evaluation-harness.",
    )
    p.add_argument("model", nargs="?", default=None, help=MODEL_HELP)
    add_config_arguments(p, TuneConfig)
    defer_defaults(p, READ_BY_METHOD)
    p.add_argument("--out", default=DEFAULT_OUT, help=f"run directory (default {DEFAULT_OUT})")
    add_overwrite_argument(p)
    p.set_defaults(handler=tune_command)


def tune_command(args: argparse.Namespace) -> int:
    check_method_read(given_settings(args, TuneConfig, READ_BY_METHOD), args.method, args.batch_size)
    result = run_out(args, TUNE, config_from(TuneConfig, args, model=args.model))
    if not result.reused:
        print(tune_plots.table(result.summary))  # format_table escapes each cell; its line breaks are the table's
        print(f"\noutputs: {written(result)}")
    return 0
