"""``sinklab compress``: the keep-sink table of KV-cache presses (sinklab.kvcache)."""

from __future__ import annotations

import argparse

from ..compress import COMPRESS, READ_ONLY_WITH, CompressConfig, check_read
from ..compress import report as compress_report
from ..core.text import format_table, terminal_text
from ..kvcache import PRESSES
from .args import (
    MODEL_HELP,
    add_config_arguments,
    add_launcher_arguments,
    add_overwrite_argument,
    config_from,
    defer_defaults,
    given_settings,
    launcher_settings,
    run_out,
    written,
)

DEFAULT_OUT = "runs/compress"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compress",
        help="what KV-cache presses cost in perplexity and passkey retrieval, with and without the sink kept",
        description=f"Compress a context's KV cache after its prefill with each press ({', '.join(PRESSES)}) at each ratio, "
        "keeping sinks or not, and score the text after it and passkey retrieval against the full cache.",
    )
    p.add_argument("model", nargs="?", default=None, help=MODEL_HELP)
    add_config_arguments(p, CompressConfig)
    defer_defaults(p, READ_ONLY_WITH)
    add_launcher_arguments(p)
    p.add_argument("--out", default=DEFAULT_OUT, help=f"run directory (default {DEFAULT_OUT})")
    add_overwrite_argument(p)
    p.set_defaults(
        handler=compress_command, on_interrupt="stopped; the presses finished are kept in --out and the same command resumes"
    )


def compress_command(args: argparse.Namespace) -> int:
    check_read(given_settings(args, CompressConfig, list(READ_ONLY_WITH)), args.during, args.accuracy)
    launcher = launcher_settings(args)
    result = run_out(args, COMPRESS, config_from(CompressConfig, args, launcher, model=args.model), launcher=launcher)
    if not result.reused:
        if result.summary["presses"]:
            print(format_table(compress_report.table_rows(result.summary, "press"), compress_report.COLUMNS))
        if result.summary["quantizers"]:
            print(format_table(compress_report.table_rows(result.summary, "quantizer"), compress_report.QUANT_COLUMNS))
        # a statement names user-given texts and models: no control character reaches the terminal
        print("\n" + "\n".join(terminal_text(line) for line in compress_report.statements(result.summary)))
        print(f"\noutputs: {written(result)}")
    return 0
