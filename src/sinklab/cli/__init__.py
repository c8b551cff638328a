"""Command line: argument parsing only. Each command is one module of this package with
``add_parser(sub)``, which registers its handler with ``set_defaults(handler=...)``; handlers call
importable functions of the capabilities."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from ..core.errors import SinklabError
from . import adapt, demo, intervene, pretrain, report, scan, stream, trigger

COMMANDS = (demo, trigger, scan, intervene, pretrain, stream, adapt, report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sinklab",
        description="Study attention sinks: theory labs, scanners, interventions, mitigation pretraining, streaming.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args) or 0
    except SinklabError as exc:
        print(f"sinklab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"sinklab {args.command}: interrupted; {args.on_interrupt}", file=sys.stderr)
        return 130
