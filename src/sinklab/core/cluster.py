"""The engines that run a many-job command's jobs off this process's pool: a submitit job array
(:func:`submitit_outcomes`, Slurm or submitit's local cluster) and Ray tasks (:func:`ray_outcomes`),
each yielding every job's :data:`~.jobs.Outcome` as it finishes. A job travels to their workers as a
:class:`PortableJob`, which sets up what the pool's workers have by birth (the working directory,
``sys.path``, torch's threads). :func:`~.launchers.launch` picks the engine from the user's settings.
"""

from __future__ import annotations

import contextlib
import os
import signal
import site
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generator, Iterator, Sequence

from .errors import SinklabError, check
from .jobs import Outcome, failure_line, use_torch_threads

POLL_SECONDS = 0.5  # how often submitit's jobs are asked whether they finished


@dataclass(frozen=True)
class PortableJob:
    """A job function as a pool worker runs it, for an engine's worker: torch on ``threads``
    threads, in the submitting directory ``cwd`` (relative paths mean the same), with this process's
    ``sys.path`` (a script's or a test's module imports there as here).

    What the engines carry themselves, and why the rest travels here:

    - ``sys.path``: Ray starts its workers with it (``runtime_env`` ``env_vars`` PYTHONPATH, see
      :func:`ray_outcomes`; ``sys_path`` is empty there). submitit hands a job this process's
      environment, not its ``sys.path``; its ``setup`` commands could export PYTHONPATH, but on its
      local cluster they run the job under /bin/sh, which alone gets the SIGINT of
      ``LocalJob.cancel``: a cancelled job would run on. So the path travels here, and ``fn``
      travels pickled, to be unpickled once the path is in place.
    - the working directory: submitit's jobs start there (sbatch's default; the local cluster's
      subprocesses inherit it), except that Slurm runs a job in /tmp where the directory is missing
      on its node (refused here in one line). Ray's one means, ``runtime_env`` ``working_dir``,
      uploads a copy and runs the jobs in it: relative run directories would be written into the
      copy. So the job moves to ``cwd`` itself.
    """

    payload: bytes
    cwd: str
    threads: int
    sys_path: tuple = ()

    @classmethod
    def of(cls, fn: Callable[[Any], Any], threads: int, carry_path: bool = True) -> "PortableJob":
        import cloudpickle

        return cls(cloudpickle.dumps(fn), os.getcwd(), threads, submitting_path() if carry_path else ())

    def __call__(self, job: Any) -> Any:
        import cloudpickle

        sys.path[:0] = [p for p in self.sys_path if p not in sys.path]
        need = "sinklab's jobs need the submitting machine's files"
        check(os.path.isdir(self.cwd), f"the job's working directory {self.cwd} is missing on this machine: {need}")
        os.chdir(self.cwd)
        fn = cloudpickle.loads(self.payload)  # first: where its module imports torch, the threads are set on torch itself
        use_torch_threads(self.threads)
        return fn(job)


def submitting_path() -> tuple:
    """This process's ``sys.path``, each entry absolute (an empty entry is the working directory)."""
    return tuple(os.path.abspath(p) for p in sys.path)


@contextlib.contextmanager
def _terminate_unwinds() -> Iterator[Callable[[], None]]:
    """Within it, SIGTERM (``kill``, ``scancel`` of the batch job running this command) exits through
    the normal unwinding, so submitit's clean-up cancels the jobs not yet finished. Python's default
    ends the process on the spot and leaves them running, to race a restarted command for the same
    run directories. (Ray needs none: it ends a dead driver's tasks itself, tested.)

    It yields ``armed``, to call once the jobs' handles are where the clean-up finds them: a SIGTERM
    before that (during the submission, when there is nothing yet to cancel) is held and ends the
    command in that call. Held, not blocked: a signal blocked with ``pthread_sigmask`` stays blocked
    in every process the submission starts, so submitit's local jobs would never see a SIGTERM.
    Only the main thread may set a handler; elsewhere nothing changes.

    On leaving, the handler Python knows of comes back (nested uses, SIG_IGN, a Python handler); a
    disposition set outside Python, which ``signal.signal`` cannot see, comes back as what Python
    last recorded (usually the default). A SIGTERM held through a submission that failed goes to
    that handler then. A second SIGTERM while the jobs are being cancelled ends the command at once
    (the previous handler is back by then)."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    held: list[int] = []
    armed_yet = False
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: held.append(signum))

    def armed() -> None:
        nonlocal armed_yet
        armed_yet = True
        signal.signal(signal.SIGTERM, _exit_on_terminate)
        if held:
            _exit_on_terminate(held[0], None)

    try:
        yield armed
    finally:
        _restore_sigterm(previous)
        if held and not armed_yet:
            signal.raise_signal(signal.SIGTERM)


def _exit_on_terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _restore_sigterm(previous: Any) -> None:
    """Give SIGTERM back the handler ``signal.getsignal`` or ``signal.signal`` reported (None: one
    set outside Python, restored as the default)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def submitit_outcomes(
    job_fn: PortableJob, jobs: Sequence[Any], log_dir: Path, cluster: str, parameters: dict
) -> Generator[Outcome, None, None]:
    """One submitit job array on ``cluster`` with the executor's ``parameters``, as its jobs finish;
    whatever ends this early (SIGTERM, an error, Ctrl-C) cancels the jobs not yet finished."""
    import submitit

    executor = submitit.AutoExecutor(folder=log_dir, cluster=cluster)
    executor.update_parameters(**parameters)
    submitted: list = []
    try:
        with _terminate_unwinds() as armed:
            submitted = executor.map_array(job_fn, jobs)
            armed()
            index = {id(job): i for i, job in enumerate(submitted)}
            for job in submitit.helpers.as_completed(submitted, poll_frequency=POLL_SECONDS):
                error = job.exception()
                failure = None if error is None else f"{_error_line(str(error))} (log: {job.paths.stderr})"
                yield index[id(job)], None if failure else job.result(), failure
    finally:
        for job in submitted:
            if not job.done():
                job.cancel(check=False)


def _error_line(report: str) -> str:
    """The exception's own line from submitit's failure report (its trace sits between two rules
    of dashes; the line follows the last, indented, frame line), as :func:`~.jobs.failure_line` writes
    it; else the report's first line (a job killed, timed out or never started)."""
    lines = [line for line in report.splitlines() if line.strip()]
    rules = [i for i, line in enumerate(lines) if set(line.strip()) == {"-"}]
    if not (len(rules) >= 2 and rules[1] - rules[0] > 1):
        return lines[0] if lines else "no report"
    trace = lines[rules[0] + 1 : rules[1]]
    after_frames = max((k for k, line in enumerate(trace) if line.startswith(" ")), default=-1) + 1
    name, sep, message = trace[min(after_frames, len(trace) - 1)].strip().partition(": ")  # "module.Type: message"
    module, _, short = name.rpartition(".")
    raised = getattr(sys.modules.get(module or "builtins"), short, None)
    return message if isinstance(raised, type) and issubclass(raised, SinklabError) else f"{short}{sep}{message}"


def ray_outcomes(
    job_fn: PortableJob, jobs: Sequence[Any], log_dir: Path, init: dict, options: dict, env_vars: dict
) -> Generator[Outcome, None, None]:
    """One Ray task per job (its ``options``; its worker's environment ``env_vars`` and this
    process's ``sys.path`` as PYTHONPATH), as they finish; when no Ray is running here, one is
    started with ``ray.init(**init)`` and shut down at the end, and the program's SIGTERM handler,
    which ``ray.init`` replaces with its own for good, comes back."""
    import ray

    started = not ray.is_initialized()
    own_handler = signal.getsignal(signal.SIGTERM)
    if started:
        ray.init(**init)
    pending: list = []
    try:
        worker_env = {**env_vars, "PYTHONPATH": _worker_pythonpath()}
        task = ray.remote(_logged).options(**options, runtime_env={"env_vars": worker_env})
        shared = ray.put(job_fn)
        logs = [log_dir / f"ray-job-{i}.log" for i in range(len(jobs))]
        refs = {task.remote(shared, job, str(log)): i for i, (job, log) in enumerate(zip(jobs, logs))}
        pending = list(refs)
        while pending:
            (ref,), pending = ray.wait(pending, num_returns=1)
            i = refs[ref]
            try:
                yield i, ray.get(ref), None
            except ray.exceptions.RayError as exc:
                cause = getattr(exc, "cause", None)
                what = failure_line(cause) if isinstance(cause, BaseException) else str(exc).splitlines()[0]
                yield i, None, f"{what} (log: {logs[i]})"
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()
            _restore_sigterm(own_handler)


def _worker_pythonpath() -> str:
    """This process's ``sys.path`` as a worker's PYTHONPATH, less the site-packages folders: a worker
    of the same interpreter has them anyway, and ahead of the standard library (where PYTHONPATH
    goes) an installed package could shadow a module of it."""
    installed = {os.path.abspath(p) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    return os.pathsep.join(p for p in submitting_path() if p not in installed)


def _logged(job_fn: PortableJob, job: Any, log: str) -> Any:
    """Run a job in a Ray worker with its output and any traceback in its own log file."""
    with open(log, "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            return job_fn(job)
        except BaseException:
            traceback.print_exc()
            raise
