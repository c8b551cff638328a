"""The ``--out`` policy: what an existing run directory allows a command to do with it.

:func:`claim_run_dir` is the one policy every command (and every notebook function's ``out=``)
applies to an existing ``--out`` before anything is written: start anew, resume, read a finished run
back, or refuse; :func:`run_differs` names the first setting in which a run directory holds another
configuration. What the directory holds is read through :mod:`.runs`.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from dataclasses import is_dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from .configs import first_difference, not_result_paths
from .errors import SinklabError, check
from .runs import (
    CONFIG,
    FAILED,
    FINISHED,
    INTERRUPTED,
    RUN_INFO,
    SUMMARY,
    command_line,
    config_record,
    is_finished,
    read_config,
    read_run_info,
)

NEW, RESUME = "new", "resume"


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
    :data:`RESUME` or :data:`~.runs.FINISHED`:

    * ``overwrite``: a sinklab run directory (one with run.json or config.json) is removed first;
    * a folder that is not a sinklab run directory and not empty is refused (never removed);
    * another command's run (not ``kind``'s, the claiming capability's) is refused naming it;
    * a run of another configuration is refused with the first differing setting: the saved
      ``config.json``, brought to today's version by the config's migrations, against ``config``,
      every setting compared except those declared ``result=False``; unless it failed before it
      wrote anything but run.json and config.json (:func:`failed_before_writing`): NEW, with a
      warning that names the error its run.json recorded;
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
            replaced = differs is not None and not holds_runs and failed_before_writing(path)
            check(
                differs is None or holds_runs or replaced,
                f"{path} holds a run of another configuration ({differs}); "
                "pass --overwrite to replace it, or choose another --out",
            )
            if replaced and remove:
                error = read_run_info(path).get("error", "no error recorded")
                warnings.warn(
                    f"{path}: replacing a run of another configuration that failed before writing ({error})", stacklevel=2
                )
            if finished and differs is None:
                return FINISHED
            if (differs is not None and holds_runs) or (differs is None and resumable(path)):
                return RESUME
    if remove:
        _remove_run_dir(path)
    return NEW


def failed_before_writing(path: str | os.PathLike) -> bool:
    """Whether the run directory ``path`` holds nothing a new run could lose: only run.json and
    config.json, of a run that failed or was interrupted (a corpus it could not reach; its error was
    said when it failed). A config.json without run.json is such a directory half removed by the
    main process of a DDP run (a run writes run.json first), which the other processes read too."""
    try:
        names = {p.name for p in Path(path).iterdir()}
    except FileNotFoundError:  # removed meanwhile by the main process
        return True
    status = read_run_info(path).get("status")
    return names <= {RUN_INFO, CONFIG} and (status in (FAILED, INTERRUPTED) or RUN_INFO not in names)


def _check_kind(path: Path, kind: Optional[str]) -> None:
    """Refuse another command's run, naming it (comparing its settings with this command's would
    name a setting or a config version, not the difference): the kind run.json (or summary.json)
    records, else, for an older unfinished run, the subcommand its command line names."""
    info = read_run_info(path)
    held, by, here = info.get("kind") or _summary_kind(path), _subcommand(info.get("command")), _subcommand(command_line())
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
    same run or ``out`` holds no configuration. Every setting of :func:`~.runs.read_config` is
    compared except those declared ``result=False``."""
    cls = type(config) if is_dataclass(config) else None
    saved = read_config(out, cls)
    if saved is None:
        return None
    return first_difference(saved, json.loads(json.dumps(config_record(config))), not_result_paths(cls))


def _remove_run_dir(path: Path) -> None:
    """Remove a sinklab run directory (the caller checked it is one), never a link or a folder
    that holds the current directory."""
    check(
        not path.is_symlink(), f"{path} is a symbolic link; sinklab does not remove it (pass the folder itself, or another --out)"
    )
    here, target = Path.cwd().resolve(), path.resolve()
    check(here != target and target not in here.parents, f"{path} holds the current directory; sinklab does not remove it")
    shutil.rmtree(path)
