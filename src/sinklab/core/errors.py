"""User-facing errors.

A :class:`SinklabError` is a mistake the user can fix (bad path, bad option, bad input). The
command line prints its message on one line, without a traceback, and exits with status 2.
Anything else is a bug and keeps its traceback.
"""


class SinklabError(Exception):
    """A user error with a message that says what to change."""


def check(condition: bool, message: str) -> None:
    """Raise :class:`SinklabError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise SinklabError(message)
