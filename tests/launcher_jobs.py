"""The job functions of tests/test_launchers.py, in a module that imports nothing heavy.

An engine's worker (a pool process, a submitit job, a Ray task) imports a job function's module to
unpickle it. Defined in the test module, every such worker would import that module, and with it
pytest, the conftest and sinklab's commands: about a second of CPU on top of torch's own import,
in each of the thirty-odd workers the launcher tests start on two cores.
"""

import os
import time
from pathlib import Path

from sinklab.core.errors import SinklabError


def fail_two_jobs(x: int) -> int:
    """Jobs 1 and 2 fail at once (a user mistake, a bug); the others take a second, so they finish after them."""
    if x == 1:
        raise SinklabError("job 1: no such file, on purpose")
    if x == 2:
        raise ValueError("job 2 fails on purpose\nsecond line")
    time.sleep(1)
    return x * x


def finish_after_the_next_is_saved(job: tuple) -> int:
    """Job i finishes only once job i + 1's result has been handed to on_result (which marks it
    saved), the last job at once: they finish last job first, whatever order they start in, and
    only if on_result runs as each job finishes. All must run at once."""
    i, last, folder = job
    deadline = time.monotonic() + 300
    while i < last and not Path(folder, f"saved{i + 1}").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {i + 1}'s result never reached on_result: do the jobs run at once?")
        time.sleep(0.05)
    return i * i


def square_and_niceness(x: int) -> tuple[int, int]:
    return x * x, os.nice(0)


def visible_gpus(_) -> str:
    return os.environ["CUDA_VISIBLE_DEVICES"]
