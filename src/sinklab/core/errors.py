"""User-facing errors, and failed numerical checks.

A :class:`SinklabError` is a mistake the user can fix (bad path, bad option, bad input). The
command line prints its message on one line, without a traceback, and exits with status 2.
A :class:`NumericalCheckFailed` is a run that finished and wrote its results, but whose own
check of a numerical claim failed; the command line prints it on one line and exits with
status 3, so a script can tell "fix your command" from "the numbers are wrong".
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping, Optional


class SinklabError(Exception):
    """A user error with a message that says what to change."""


class NumericalCheckFailed(Exception):
    """A run's numerical self-check failed; its results are written in ``run_dir`` (when given),
    which the command line marks as failed so the same command does not take it as finished."""

    def __init__(self, message: str, run_dir: Optional[str | os.PathLike] = None) -> None:
        super().__init__(message)
        self.run_dir = run_dir


def check(condition: object, message: str) -> None:
    """Raise :class:`SinklabError` with ``message`` unless ``condition`` holds (is truthy)."""
    if not condition:
        raise SinklabError(message)


def refuse_unread(given: Iterable[str], enablers: Mapping[str, tuple[bool, str]]) -> None:
    """Refuse, in one line naming the flag that enables it, a setting given that this run would not
    read (``--accuracy-test`` with no ``--accuracy``): such a run exited 0 having done nothing with
    it. ``given``: the names of the settings the user gave (others among them pass); ``enablers``:
    name -> (whether this run reads it, the flag that would make it)."""
    given = set(given)
    for name, (enabled, flag) in enablers.items():
        option = "--" + name.replace("_", "-")
        check(name not in given or enabled, f"{option} is read only with {flag}: give {flag}, or leave {option} out")
