"""Command line: argument parsing only. Each command is one module of this package with
``add_parser(sub)``, which registers its handler with ``set_defaults(handler=...)``; handlers call
importable functions of the capabilities."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator, NoReturn, Optional, Sequence

from ..core.errors import NumericalCheckFailed, SinklabError
from ..core.progress import is_quiet, set_quiet
from ..core.text import terminal_text
from . import adapt, bench, compare, compress, demo, export, intervene, pretrain, report, scan, stream, sweep, trigger, tune

COMMANDS = (demo, trigger, scan, intervene, pretrain, compare, sweep, stream, adapt, compress, tune, bench, export, report)

#: Exit statuses (the epilog of ``sinklab --help`` and README.md list them).
USER_ERROR, CHECK_FAILED, INTERRUPTED = 2, 3, 130

EXIT_STATUSES = (
    f"exit status: 0 done (also: the same command on a finished --out, which only says where its results are); "
    f"{USER_ERROR} a user error, one line on stderr saying what to change (argparse's errors too); "
    f"{CHECK_FAILED} a failed numerical check: the run wrote its results, but its own check of them failed (stream's "
    f"one-pass check, trigger --construct, adapt's exactness check); {INTERRUPTED} interrupted. "
    f"Anything else is a bug and prints a traceback."
)


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors as one line, like sinklab's own (``sinklab compress: error: argument
    --keep-sinks: ...``, exit status 2): argparse would print the command's 12-17-line usage first,
    burying the line that says what to change. Subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        _refuse(self, self.prog, message)

    def parse_args(self, args=None, namespace=None):
        """As argparse's, with an unknown flag named by the command it was given to (argparse
        reports it from the top-level parser, which would send the user to ``sinklab --help``)."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            command = getattr(parsed, "command", None)
            _refuse(self, f"{self.prog} {command}" if command else self.prog, f"unrecognized arguments: {' '.join(extra)}")
        return parsed


def _refuse(parser: argparse.ArgumentParser, prog: str, message: str) -> NoReturn:
    """The one line, with the user's own text in ``message`` escaped (it may hold escape codes)."""
    parser.exit(USER_ERROR, f"{prog}: error: {terminal_text(message)} (`{prog} --help` lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="sinklab",
        description="Study attention sinks: theory labs, scanners, interventions, mitigation pretraining, streaming.",
        epilog=EXIT_STATUSES,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.add_parser(sub)
    for command in sub.choices.values():
        command.add_argument(
            "--quiet",
            action="store_true",
            help="no progress bars and no chatter; results tables and where they are written still print",
        )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with quiet(args.quiet), terminate_as_interrupt():
            return args.handler(args) or 0
    except SinklabError as exc:
        print(f"sinklab {args.command}: error: {terminal_text(str(exc))}", file=sys.stderr)
        return USER_ERROR
    except NumericalCheckFailed as exc:  # the pipeline marked its run directory failed
        print(f"sinklab {args.command}: numerical check failed: {exc}", file=sys.stderr)
        return CHECK_FAILED
    except KeyboardInterrupt:
        print(f"sinklab {args.command}: interrupted; {args.on_interrupt}", file=sys.stderr)
        return INTERRUPTED


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a scheduler stopping the job) ends the command as Ctrl-C does: the run
    directory says ``interrupted`` and the same command resumes it; Python's default would end the
    process at once and leave run.json saying ``running``. The handler before is given back after."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers belong to the main thread
        yield
        return

    def interrupt(signum, frame) -> NoReturn:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def quiet(on: bool) -> Iterator[None]:
    """Every sinklab progress bar off (and transformers' own) while a ``--quiet`` command runs."""
    before = is_quiet()
    set_quiet(on)
    if on:
        from transformers.utils import logging as transformers_logging

        bars_were_on = transformers_logging.is_progress_bar_enabled()
        transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        set_quiet(before)
        if on and bars_were_on:
            transformers_logging.enable_progress_bar()
