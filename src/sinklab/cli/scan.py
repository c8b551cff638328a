"""``sinklab scan``: sinks, massive activations, super neurons and variance in a real model."""

from __future__ import annotations

import argparse

from ..core.errors import check
from ..core.launchers import LauncherSettings
from ..core.runs import FINISHED
from ..core.text import format_table
from ..scan import MetricSettings, ScanConfig, compare, compare_page, run_compare, run_scan
from ..scan import report as scan_report
from .args import (
    STARTS_OVER,
    add_launcher_arguments,
    add_model_and_input_arguments,
    add_overwrite_argument,
    claim_out,
    input_spec,
    launcher_settings,
    load_options,
    option,
)

#: MetricSettings fields: (command-line flag, help).
SETTINGS_FLAGS = {
    "eps": ("--eps", "Gu et al. threshold for alpha_k"),
    "sink_k": ("--sink-k", "key position of Sink_k^eps, 1-indexed as in Gu et al. (1: the first token)"),
    "min_query": ("--min-query", "first query position in the first-token mass"),
    "massive_absolute": ("--massive-abs", "massive activation: |h| above this"),
    "massive_relative": ("--massive-rel", "... and above this times the layer's median |h|"),
    "super_min_ratio": ("--super-ratio", "super neuron: mean |a| at position 0 over mean |a| elsewhere"),
    "super_min_activation": ("--super-min", "super neuron: minimum mean |a| at position 0"),
    "secondary_top": ("--secondary-top", "secondary sinks listed"),
}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "scan",
        help="measure sinks, massive activations, super neurons and variance in a model",
        description="Scan a causal LM with hooks that reduce while recording (no attention stacks are stored).",
    )
    add_model_and_input_arguments(p, several_models=True)
    settings = MetricSettings()
    for name, (flag, help) in SETTINGS_FLAGS.items():
        option(p, settings, name, help, flag=flag)
    p.add_argument("--variance", choices=("auto", "on", "off"), default="auto", help="variance-by-position curve (auto: when --batch >= 2)")
    add_launcher_arguments(p)
    option(p, ScanConfig(), "out", "run directory")
    add_overwrite_argument(p)
    p.set_defaults(handler=scan_command, on_interrupt=STARTS_OVER)


def scan_command(args: argparse.Namespace) -> int:
    models = args.model or [None]
    launcher = launcher_settings(args)
    cfg = ScanConfig(
        model=models[0],
        inputs=input_spec(args),
        settings=MetricSettings(**{name: getattr(args, name) for name in SETTINGS_FLAGS}),
        variance={"auto": None, "on": True, "off": False}[args.variance],
        query_chunk=args.query_chunk,
        load=load_options(args, here=launcher.runs_here),
        out=args.out,
    )
    if len(models) > 1:
        return compare_command(args, cfg, models, launcher)
    check(launcher.launcher == "local", f"--launcher {launcher.launcher} runs the scans of several models; one model is scanned in this process")
    if claim_out(args, cfg.out, cfg) == FINISHED:
        return 0
    summary = run_scan(cfg)
    print(scan_report.scan_table(summary))
    print(scan_report.scan_headline(summary))
    print(f"\noutputs: {args.out}/summary.json and figures: {', '.join(summary['figures'])}")
    return 0


def compare_command(args: argparse.Namespace, cfg: ScanConfig, models: list, launcher: LauncherSettings) -> int:
    """Several models: each scanned into OUT/models/ (a finished one is reused), then compared."""
    state = claim_out(args, cfg.out, compare.compare_config(cfg, models), resumable=lambda run_dir: (run_dir / compare.MODELS_DIR).is_dir())
    if state == FINISHED:
        return 0
    summary = run_compare(cfg, models, launcher=launcher)
    print(format_table([compare_page.table_row(entry) for entry in summary["models"]], compare_page.table_columns(summary["settings"])))
    print(f"\noutputs: {args.out}/summary.json, {args.out}/{' and '.join(summary['figures'])}, {args.out}/report.html; each model's scan in {args.out}/{compare.MODELS_DIR}/")
    return 0
