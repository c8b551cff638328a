"""``sinklab scan``: sinks, massive activations, super neurons and variance in a real model."""

from __future__ import annotations

import argparse

from ..core.errors import check
from ..core.text import format_table
from ..scan import COMPARE, SCAN, CompareConfig, ScanConfig, compare_page
from ..scan import report as scan_report
from .args import (
    MODEL_HELP,
    STARTS_OVER,
    add_config_arguments,
    add_launcher_arguments,
    add_overwrite_argument,
    config_from,
    launcher_settings,
    run_out,
    written,
)

DEFAULT_OUT = "runs/scan"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "scan",
        help="measure sinks, massive activations, super neurons and variance in a model",
        description="Scan a causal LM with hooks that reduce while recording (no attention stacks are stored).",
    )
    p.add_argument("model", nargs="*", help=f"{MODEL_HELP}; several: one scan each and a comparison")
    add_config_arguments(p, ScanConfig)
    add_launcher_arguments(p)
    p.add_argument("--out", default=DEFAULT_OUT, help=f"run directory (default {DEFAULT_OUT})")
    add_overwrite_argument(p)
    p.set_defaults(handler=scan_command, on_interrupt=STARTS_OVER)


def scan_command(args: argparse.Namespace) -> int:
    models = args.model or [None]
    launcher = launcher_settings(args)
    cfg = config_from(ScanConfig, args, launcher, model=models[0])
    if len(models) > 1:
        return compare_command(args, CompareConfig(models=tuple(models), scan=cfg), launcher)
    check(
        launcher.launcher == "local",
        f"--launcher {launcher.launcher} runs the scans of several models; one model is scanned in this process",
    )
    result = run_out(args, SCAN, cfg)
    if not result.reused:
        print(scan_report.scan_table(result.summary))
        print(scan_report.scan_headline(result.summary))
        print(f"\noutputs: {written(result)}")
    return 0


def compare_command(args: argparse.Namespace, cfg: CompareConfig, launcher) -> int:
    """Several models: each scanned into OUT/models/ (a finished one is reused), then compared."""
    result = run_out(args, COMPARE, cfg, launcher=launcher)
    if not result.reused:
        print(
            format_table(
                [compare_page.table_row(entry) for entry in result.summary["models"]],
                compare_page.table_columns(result.summary["settings"]),
            )
        )
        print(f"\noutputs: {written(result)}; each model's scan in {args.out}/models/")
    return 0
