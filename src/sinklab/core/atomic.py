"""Atomic file writes.

Every result file is written to a temporary file in the same directory and then renamed over
the target, so a killed run never leaves a half-written file that looks complete. A JSON-lines log
grows by appends instead (:func:`append_jsonl`), and a torn last line is read as the kill it was.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from .errors import SinklabError
from .jsonable import jsonable


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it over ``path`` if the block succeeds."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes files private; results follow the umask
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder next to ``path``; rename it to ``path`` if the block succeeds.

    If ``path`` appeared meanwhile (another process finished the same work first), that one is
    kept and the temporary folder dropped.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield tmp
        if not target.exists():
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Atomically write ``obj`` as indented JSON (NaN/inf become null, never invalid JSON)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(jsonable(obj), indent=2) + "\n")
    return Path(path)


def append_jsonl(path: str | os.PathLike, obj: Any) -> None:
    """Append one JSON line; a torn last line from a kill is skipped by :func:`read_jsonl`."""
    with open(path, "a") as fh:
        fh.write(json.dumps(jsonable(obj)) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def write_jsonl(path: str | os.PathLike, rows: list) -> None:
    """Atomically replace a JSON-lines file with ``rows``."""
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(jsonable(r)) + "\n" for r in rows))


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a JSON-lines file. A torn last line (a write cut short by a kill, see
    :func:`append_jsonl`) is skipped with a warning; a malformed line anywhere else is an error."""
    lines = Path(path).read_text().splitlines()
    rows = []
    for number, line in enumerate(lines, start=1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise SinklabError(f"{path}, line {number}, is not valid JSON; the file is damaged") from None
            warnings.warn(f"skipped the torn last line of {path} (an interrupted write)", stacklevel=2)
    return rows
