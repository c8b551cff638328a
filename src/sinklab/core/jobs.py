"""Run independent CPU jobs in parallel worker processes with a progress bar.

Small models do not speed up with more intra-op threads, but independent models train in
parallel almost perfectly: one single-threaded worker per core.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Optional, Sequence

from .progress import progress_bar

PR_SET_PDEATHSIG = 1  # Linux prctl(2): the signal a process gets when its parent dies


def _pool_worker(parent: int) -> None:
    """A pool worker: one torch thread, and (on Linux) it ends with the command that started it,
    even one killed by SIGKILL; otherwise a killed sweep's workers would finish their jobs
    unseen and race a restarted sweep for the same run directories. PR_SET_PDEATHSIG fires when the
    *thread* that started the worker ends: ProcessPoolExecutor (CPython 3.10 to 3.13, spawn) starts
    workers in ``submit``, i.e. in :func:`run_jobs`'s thread, which stays in the pool's ``with``
    until they are joined (only ``max_tasks_per_child``, not used here, starts them elsewhere)."""
    import torch

    torch.set_num_threads(1)
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the command died before the call above
            os._exit(1)


def default_workers() -> int:
    """One worker per available core."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def run_jobs(
    fn: Callable[[Any], Any],
    jobs: Sequence[Any],
    workers: Optional[int] = None,
    desc: str = "jobs",
    label: Callable[[Any], str] = str,
    on_result: Optional[Callable[[Any, Any], None]] = None,
) -> list:
    """Apply ``fn`` to every job, in ``workers`` processes (1: in this process), in job order.

    Jobs are submitted in the given order, so put the longest first. ``on_result(job, result)``
    runs in this process as each job finishes (e.g. to save it, so a killed run can resume).
    """
    workers = default_workers() if workers is None else workers
    results: list = [None] * len(jobs)
    bar = progress_bar(total=len(jobs), desc=desc, unit="job")
    try:
        if workers <= 1 or len(jobs) <= 1:
            for i, job in enumerate(jobs):
                bar.set_postfix_str(label(job))
                results[i] = fn(job)
                _finish(i, job, results, on_result, bar)
            return results
        ctx = mp.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_pool_worker, initargs=(os.getpid(),)) as pool:
            futures = {pool.submit(fn, job): i for i, job in enumerate(jobs)}
            for future in as_completed(futures):
                i = futures[future]
                results[i] = future.result()
                bar.set_postfix_str(f"done {label(jobs[i])}")
                _finish(i, jobs[i], results, on_result, bar)
        return results
    finally:
        bar.close()


def _finish(i: int, job: Any, results: list, on_result, bar) -> None:
    if on_result is not None:
        on_result(job, results[i])
    bar.update(1)

