"""What every engine of a many-job command shares, and sinklab's own engine, the process pool
(:func:`pool_outcomes`). An engine yields every job's :data:`Outcome` as it finishes; a failed job is
an outcome like any other (one line: :func:`failure_line`), never a stop. The cluster engines,
submitit and Ray, are in :mod:`.cluster`; :func:`~.launchers.launch` picks one from the user's settings.

Small models do not speed up with more intra-op threads, but independent models train in
parallel almost perfectly: one single-threaded worker per core.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Generator, Optional, Sequence

from .errors import SinklabError

PR_SET_PDEATHSIG = 1  # Linux prctl(2): the signal a process gets when its parent dies


#: What an engine yields as each job ends: (job index, result or None, failure or None), the
#: failure being one line that names the error and the job's log.
Outcome = tuple


def default_workers() -> int:
    """One worker per available core."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def pool_outcomes(
    fn: Callable[[Any], Any], jobs: Sequence[Any], workers: int, log_dir: Optional[Path]
) -> Generator[Outcome, None, None]:
    """Apply ``fn`` to every job in ``workers`` processes (1, or one job: in this process), as the
    jobs finish. A failed job's traceback goes to ``log_dir/pool-job-<index>.log`` (when a log
    folder is given). Jobs are submitted in the given order, so put the longest first. Leaving
    early (an error while handling a result, Ctrl-C) cancels the jobs not yet started; those
    running finish unsaved."""
    if workers <= 1 or len(jobs) <= 1:
        for i, job in enumerate(jobs):
            try:
                result = fn(job)
            except Exception as exc:
                yield i, None, _pool_failure(exc, i, log_dir)
            else:
                yield i, result, None
        return
    context = mp.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_pool_worker, initargs=(os.getpid(),))
    try:
        futures = {pool.submit(fn, job): i for i, job in enumerate(jobs)}
        for future in as_completed(futures):
            i, error = futures[future], future.exception()
            yield (i, future.result(), None) if error is None else (i, None, _pool_failure(error, i, log_dir))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _pool_worker(parent: int) -> None:
    """A pool worker: one torch thread, and (on Linux) it ends with the command that started it,
    even one killed by SIGKILL; otherwise a killed sweep's workers would finish their jobs
    unseen and race a restarted sweep for the same run directories. PR_SET_PDEATHSIG fires when the
    *thread* that started the worker ends: ProcessPoolExecutor (CPython 3.10 to 3.13, spawn) starts
    workers in ``submit``, i.e. in the thread that runs :func:`pool_outcomes`, which stays in the
    pool's ``try`` until they are joined (only ``max_tasks_per_child``, not used here, starts them
    elsewhere)."""
    use_torch_threads(1)
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the command died before the call above
            os._exit(1)


def use_torch_threads(threads: int) -> None:
    """Torch on ``threads`` threads in this worker: set now where torch is imported, otherwise
    through ``OMP_NUM_THREADS``, which torch reads when it is imported (capped at the cores, as a
    job's share is), so a job that never needs torch does not pay for importing it (about 4 s of
    CPU here, in every worker an engine starts). Processes the job starts inherit the variable,
    so their torch also defaults to ``threads``."""
    torch = sys.modules.get("torch")
    if torch is None:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    else:
        torch.set_num_threads(threads)


def _pool_failure(error: BaseException, index: int, log_dir: Optional[Path]) -> str:
    """A failed pool job's line, its traceback (a worker's comes as the error's cause) in its log."""
    if log_dir is None:
        return failure_line(error)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"pool-job-{index}.log"
    log.write_text("".join(traceback.format_exception(error)))
    return f"{failure_line(error)} (log: {log})"


def failure_line(error: BaseException) -> str:
    """One line for a failed job: a :class:`SinklabError` keeps its own message (the line a user
    acts on), any other error is its type and the first line of its message."""
    if isinstance(error, SinklabError):
        return str(error)
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
