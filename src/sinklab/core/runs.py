"""Run directories and atomic file writes.

Every result file is written to a temporary file in the same directory and then renamed over
the target, so a killed run never leaves a half-written file that looks complete.

A run directory holds ``run.json`` (how the run was started: command line, versions, the git
commit, the machine's threads and processor, the model's device and dtype), ``config.json`` (what it computes) and, once it has
finished, ``summary.json``. :func:`claim_run_dir` is the one policy every command applies to an
existing ``--out``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import is_dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from .configs import CONFIG_VERSION_KEY, first_difference, migrate, not_result_paths
from .errors import SinklabError, check
from .jsonable import jsonable
from .provenance import machine_record, package_versions, source_revision

RUN_INFO = "run.json"
CONFIG = "config.json"
SUMMARY = "summary.json"
FAILED_CHECK = "numerical_check_failed"  # the run.json entry (and status) of a run whose numerical check failed


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
        "command": _command_line(),
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
    finished run the same command may skip (:func:`claim_run_dir` runs it again)."""
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


NEW, RESUME, FINISHED, RUNNING, FAILED, INTERRUPTED = "new", "resume", "finished", "running", "failed", "interrupted"


def is_finished(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a finished run: a summary, and run.json saying finished (or nothing, from
    before it had a status): not running again (a run of runs measured anew keeps its old summary
    until it finishes), failed, interrupted or failed its check (all after writing a summary)."""
    info = read_run_info(path)
    return (Path(path) / SUMMARY).exists() and FAILED_CHECK not in info and info.get("status", FINISHED) == FINISHED


def claim_run_dir(
    out: str | os.PathLike,
    config: Any,
    overwrite: bool = False,
    resumable: Callable[[Path], bool] = lambda run_dir: False,
    remove: bool = True,
    holds_runs: bool = False,
    kind: Optional[str] = None,
) -> str:
    """The one policy for an existing ``--out`` (or ``out=``), applied before anything is written.

    ``config`` is the run's configuration (a config dataclass, see :mod:`.configs`, or a plain
    dict). Returns :data:`NEW` (nothing there, an empty folder, or old outputs removed),
    :data:`RESUME` or :data:`FINISHED`:

    * ``overwrite``: a sinklab run directory (one with run.json or config.json) is removed first;
    * a folder that is not a sinklab run directory and not empty is refused (never removed);
    * another command's run (not ``kind``'s, the claiming capability's) is refused naming it;
    * a run of another configuration is refused with the first differing setting: the saved
      ``config.json``, brought to today's version by the config's migrations, against ``config``,
      every setting compared except those declared ``result=False``;
    * the same configuration, finished (summary.json, no failed numerical check): FINISHED;
    * the same configuration, unfinished: RESUME when ``resumable(out)``, else the old outputs are
      removed and the run starts over (NEW);
    * ``holds_runs`` (runs in their own directories under ``out``, each claimed by its own
      configuration: a sweep): another configuration is RESUME, not refused, and its runs are kept.

    ``remove=False`` decides without removing anything: the other processes of a DDP run reach
    the main process's decision while it clears the folder (with ``overwrite``, without reading it).
    """
    path = Path(out)
    if not path.is_dir() or not any(path.iterdir()) or (overwrite and not remove):
        return NEW
    check(
        (path / RUN_INFO).exists() or (path / CONFIG).exists(),
        f"{path} exists and is not a sinklab run directory (no {RUN_INFO} or {CONFIG}); choose another --out",
    )
    finished = is_finished(path)
    if not overwrite:
        _check_kind(path, kind)
        check(
            (path / CONFIG).exists() or not finished,
            f"{path} holds a finished run with no {CONFIG} to compare with; "
            "pass --overwrite to replace it, or choose another --out",
        )
        if (path / CONFIG).exists():  # else killed before it wrote its configuration: nothing to keep
            differs = run_differs(path, config)
            check(
                differs is None or holds_runs,
                f"{path} holds a run of another configuration ({differs}); "
                "pass --overwrite to replace it, or choose another --out",
            )
            if finished and differs is None:
                return FINISHED
            if differs is not None or resumable(path):
                return RESUME
    if remove:
        _remove_run_dir(path)
    return NEW


def _check_kind(path: Path, kind: Optional[str]) -> None:
    """Refuse another command's run, naming it (comparing its settings with this command's would
    name a setting or a config version, not the difference): the kind run.json (or summary.json)
    records, else, for an older unfinished run, the subcommand its command line names."""
    info = read_run_info(path)
    held, by, here = info.get("kind") or _summary_kind(path), _subcommand(info.get("command")), _subcommand(_command_line())
    if kind is None or held == kind or (held is None and (None in (by, here) or by == here)):
        return
    shown = f"`sinklab {by}`" if by and by != here else str(held)
    raise SinklabError(f"{path} holds {_a(shown)} run, not {_a(kind)} run; choose another --out (or --overwrite to replace it)")


def _summary_kind(path: Path) -> Optional[str]:
    try:
        return json.loads((path / SUMMARY).read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        return None


def _subcommand(command: Any) -> Optional[str]:
    return command[1] if isinstance(command, list) and len(command) > 1 and command[0] == "sinklab" else None


def _a(word: str) -> str:
    return ("an " if word[:1] in tuple("aeiou") else "a ") + word


def run_differs(out: str | os.PathLike, config: Any) -> Optional[str]:
    """The first setting in which the run ``out`` holds differs from ``config`` (a config dataclass,
    see :mod:`.configs`, or a plain dict), as "key: saved there, given now"; None when they are the
    same run or ``out`` holds no configuration. Every setting of :func:`read_config` is compared
    except those declared ``result=False``."""
    cls = type(config) if is_dataclass(config) else None
    saved = read_config(out, cls)
    if saved is None:
        return None
    return first_difference(saved, json.loads(json.dumps(config_record(config))), not_result_paths(cls))


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


def _remove_run_dir(path: Path) -> None:
    """Remove a sinklab run directory (the caller checked it is one), never a link or a folder
    that holds the current directory."""
    check(
        not path.is_symlink(), f"{path} is a symbolic link; sinklab does not remove it (pass the folder itself, or another --out)"
    )
    here, target = Path.cwd().resolve(), path.resolve()
    check(here != target and target not in here.parents, f"{path} holds the current directory; sinklab does not remove it")
    shutil.rmtree(path)


def _command_line() -> list:
    """This process's command line as run.json records it (``sinklab ...`` for the command)."""
    return ["sinklab", *sys.argv[1:]] if _from_cli() else list(sys.argv)


def _from_cli() -> bool:
    """Whether this process is the ``sinklab`` command (the script or ``python -m sinklab``)."""
    entry = Path(sys.argv[0])
    return entry.name == "sinklab" or (entry.name == "__main__.py" and entry.parent.name == "sinklab")
