"""Command line: argument parsing only. Every subcommand calls an importable function."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional, Sequence

from .attention import ATTN_NORMS
from .errors import SinklabError

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(name: str):
    """Register the handler of subcommand ``name``."""

    def add(fn):
        COMMANDS[name] = fn
        return fn

    return add


def int_list(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def float_list(text: str) -> list[float]:
    try:
        return [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def attn_list(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in ATTN_NORMS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown attention {', '.join(unknown) or repr(text)}; choose from: {', '.join(ATTN_NORMS)}"
        )
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sinklab",
        description="Study attention sinks: theory labs, scanners, interventions, mitigation pretraining, streaming.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from . import cli_demo, cli_intervene, cli_pretrain, cli_scan, cli_stream, cli_trigger

    for module in (cli_demo, cli_trigger, cli_scan, cli_intervene, cli_pretrain, cli_stream):
        module.add_parsers(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args) or 0
    except SinklabError as exc:
        print(f"sinklab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"sinklab {args.command}: interrupted; finished parts are saved, run the same command to resume", file=sys.stderr)
        return 130

