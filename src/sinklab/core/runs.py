"""Run records: what a run directory says about its run.

A run directory holds ``run.json`` (how the run was started: command line, versions, the git
commit, the machine's threads and processor, the model's device and dtype, and its status),
``config.json`` (what it computes, :func:`config_record`; read back by :func:`read_config`) and,
once it has finished, ``summary.json``. One function writes ``run.json`` (``_write_run_info``);
the files themselves are written atomically (:mod:`.atomic`), and what an existing run directory
allows a new command to do is the ``--out`` policy (:mod:`.claim`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import is_dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from .atomic import write_json
from .configs import CONFIG_VERSION_KEY, migrate
from .errors import SinklabError
from .jsonable import jsonable
from .provenance import machine_record, package_versions, source_revision

RUN_INFO = "run.json"
CONFIG = "config.json"
SUMMARY = "summary.json"
FAILED_CHECK = "numerical_check_failed"  # the run.json entry (and status) of a run whose numerical check failed
# a run's status in run.json
FINISHED, RUNNING, FAILED, INTERRUPTED = "finished", "running", "failed", "interrupted"


def start_run(path: str | os.PathLike, launcher: Any = None, kind: Optional[str] = None) -> Path:
    """Create ``path`` (and parents), check that it is writable (a clear error if not), and write a
    fresh ``run.json``: the command line, the run's ``kind`` (so another command's claim refuses it
    before it has a summary), package versions, the git commit, and the launcher
    settings when the run's jobs are launched (:mod:`.launchers`), and the machine's facts that can change
    a trained result (:func:`~.provenance.machine_record`: threads, processor, determinism)."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-", delete=True)
        probe.close()
    except OSError as exc:
        raise SinklabError(f"output directory {out} is not writable: {exc.strerror or exc}") from None
    info = {
        "command": command_line(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "versions": package_versions(),
        "machine": machine_record(),
        "status": RUNNING,
    }
    source = source_revision()
    if source is not None:
        info["git"] = source
    if launcher is not None:
        info["launcher"] = jsonable(launcher)
    if kind is not None:
        info["kind"] = kind
    _write_run_info(out, info)
    return out


def read_run_info(out: str | os.PathLike) -> dict:
    """``run.json`` of a run directory ({} when it has none, or an unreadable one)."""
    try:
        info = json.loads((Path(out) / RUN_INFO).read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def record_model(out: str | os.PathLike, **fields: Any) -> dict:
    """Merge what a run learned about its model (``name``, ``device``, ``dtype``, ``revision``,
    ``device_map``, ...) into the ``model`` entry of ``run.json``; returns the entry. Values JSON
    cannot hold (a ``torch.dtype``, a device) are recorded as their ``str``."""
    info = read_run_info(out)
    info["model"] = {**info.get("model", {}), **json.loads(json.dumps(jsonable(fields), default=str))}
    _write_run_info(out, info)
    return info["model"]


def finish_run(out: str | os.PathLike, files: Sequence[str] = (), failed_check: Optional[str] = None, **notes: Any) -> None:
    """Mark the run finished in ``run.json``, with the files it wrote and its notes (e.g. figures
    that could not be drawn), or failed: its numerical check said ``failed_check``, so it is not a
    finished run the same command may skip (:func:`~.claim.claim_run_dir` runs it again)."""
    info = {**read_run_info(out), "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "files": list(files), **jsonable(notes)}
    info["status"] = FINISHED if failed_check is None else FAILED_CHECK
    if failed_check is not None:
        info[FAILED_CHECK] = failed_check
    _write_run_info(out, info)


def fail_run(out: str | os.PathLike, error: BaseException) -> None:
    """Mark a running run that raised while it measured or wrote ``interrupted`` (Ctrl-C) or
    ``failed``, with the error's first line, so run.json never says running for a dead run (the
    same command resumes it or starts it over); one already marked (a failed check) is left as it is."""
    info, lines = read_run_info(out), str(error).strip().splitlines()
    if info.get("status") == RUNNING:
        status = INTERRUPTED if isinstance(error, KeyboardInterrupt) else FAILED
        said = type(error).__name__ + (f": {lines[0]}" if lines else "")
        _write_run_info(out, {**info, "status": status, "ended": time.strftime("%Y-%m-%d %H:%M:%S"), "error": said})


def _write_run_info(out: str | os.PathLike, info: dict) -> None:
    """The one writer of ``run.json`` (atomic): :func:`start_run`, :func:`record_model`,
    :func:`finish_run` and :func:`fail_run` call it, and nothing else in sinklab writes that file."""
    write_json(Path(out) / RUN_INFO, info)


def is_finished(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a finished run: a summary, and run.json saying finished (or nothing, from
    before it had a status): not running again (a run of runs measured anew keeps its old summary
    until it finishes), failed, interrupted or failed its check (all after writing a summary)."""
    info = read_run_info(path)
    return (Path(path) / SUMMARY).exists() and FAILED_CHECK not in info and info.get("status", FINISHED) == FINISHED


def read_config(out: str | os.PathLike, cls: Optional[type] = None) -> Any:
    """The configuration the run ``out`` holds (its ``config.json`` as JSON reads it, brought to
    today's version by ``cls``'s migrations where it is an object); None when it holds none. A
    damaged file is refused in one line."""
    try:
        saved = json.loads((Path(out) / CONFIG).read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        raise SinklabError(
            f"{Path(out) / CONFIG} is damaged; pass --overwrite to replace the run, or choose another --out"
        ) from None
    if cls is not None and isinstance(saved, dict):
        saved = json.loads(json.dumps(jsonable(migrate(cls, saved))))  # as JSON, as today's: a migration may build tuples
    return saved


def config_record(cfg: Any) -> dict:
    """What ``config.json`` holds: a config's settings, nested as its class nests them, and its
    version (:mod:`.configs`); a plain dict as it is."""
    return {CONFIG_VERSION_KEY: getattr(type(cfg), "VERSION", 0), **jsonable(cfg)} if is_dataclass(cfg) else jsonable(cfg)


def command_line() -> list:
    """This process's command line as run.json records it (``sinklab ...`` for the command)."""
    return ["sinklab", *sys.argv[1:]] if _from_cli() else list(sys.argv)


def _from_cli() -> bool:
    """Whether this process is the ``sinklab`` command (the script or ``python -m sinklab``)."""
    entry = Path(sys.argv[0])
    return entry.name == "sinklab" or (entry.name == "__main__.py" and entry.parent.name == "sinklab")
