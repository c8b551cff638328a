"""Where a many-job command runs its jobs: ``local`` (sinklab's own process pool,
:func:`~.jobs.run_jobs`), ``slurm`` (a Slurm job array through submitit) or ``ray`` (a Ray cluster,
or a Ray started on this machine). :func:`launch` is the one call the commands make: the same job
function and jobs whichever engine runs them, results in job order, and ``on_result(job, result)``
in this process as each job finishes, so finished work is saved at once and a killed sweep resumes
where it stopped (the callers skip what their run directory already holds).

An engine's worker runs a job as a pool worker would (:class:`PortableJob`): with this process's
``sys.path`` and working directory, and torch on the threads the pool would give it, so results
equal the pool's. A failed job does not lose the others: they are handed to ``on_result``, and one
:class:`SinklabError` at the end names each failed job and its log. Every job's log stays under the
run directory, in ``launcher/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import traceback
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from .errors import SinklabError, check
from .jobs import default_workers, run_jobs
from .progress import progress_bar

LAUNCHERS = ("local", "slurm", "ray")
SUBMITIT_CLUSTERS = ("slurm", "local")  # "local": submitit runs the Slurm path's jobs as subprocesses here
LOG_DIR = "launcher"  # under the run directory: submitit's job files and logs, Ray's job logs
POLL_SECONDS = 0.5  # how often submitit's jobs are asked whether they finished
ENGINE_PACKAGES = {"slurm": ("submitit", "pip install submitit"), "ray": ("ray", "pip install 'sinklab[ray]'")}


@dataclass(frozen=True)
class LauncherSettings:
    """Which engine runs the jobs and what each job asks of it. Result-neutral: a run started with
    one launcher resumes with another (nothing here enters a run's config.json)."""

    launcher: str = "local"
    partition: Optional[str] = None  # slurm: the partition (None: the cluster's default)
    time: int = 60  # minutes: a job's time limit (slurm; submitit's local cluster too)
    gpus_per_job: int = 0  # slurm --gpus-per-node, ray num_gpus
    cpus_per_job: Optional[int] = None  # None: as the pool (1 when jobs run several at a time, else this process's torch threads)
    array_parallelism: Optional[int] = None  # slurm: jobs of the array running at once (None: all)
    slurm_extra: dict = field(default_factory=dict)  # more sbatch options, e.g. {"account": "lab", "mem": "16G"}
    ray_address: Optional[str] = None  # None: start a local Ray of `workers` x cpus_per_job CPUs
    cluster: str = "slurm"  # submitit's cluster; "local" runs the jobs as subprocesses of this machine

    def __post_init__(self) -> None:
        check(self.launcher in LAUNCHERS, f"unknown launcher {self.launcher!r}; choose from: {', '.join(LAUNCHERS)}")
        check(self.cluster in SUBMITIT_CLUSTERS, f"unknown submitit cluster {self.cluster!r}; choose from: {', '.join(SUBMITIT_CLUSTERS)}")
        for name in ("partition", "ray_address"):
            check(getattr(self, name) is None or isinstance(getattr(self, name), str), f"launcher setting {name} must be text, got {getattr(self, name)!r}")
        for name in ("time", "gpus_per_job", "cpus_per_job", "array_parallelism"):
            value = getattr(self, name)  # a --launcher-config file may hold "60" or 1.5
            check(type(value) is int or (value is None and name in ("cpus_per_job", "array_parallelism")), f"launcher setting {name} must be a whole number, got {value!r}")
        for name in ("time", "cpus_per_job", "array_parallelism"):
            value = getattr(self, name)
            check(value is None or value >= 1, f"--{name.replace('_', '-')} must be at least 1, got {value}")
        check(self.gpus_per_job >= 0, f"--gpus-per-job must be >= 0, got {self.gpus_per_job}")
        check(isinstance(self.slurm_extra, dict), f"slurm_extra must be an object of sbatch options, got {self.slurm_extra!r}")

    @classmethod
    def from_dict(cls, given: dict) -> "LauncherSettings":
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(given) - set(known))
        check(not unknown, f"unknown launcher setting {', '.join(unknown)}; known: {', '.join(known)}")
        return cls(**given)

    def asking_gpu_for(self, device: str) -> "LauncherSettings":
        """These settings with at least one GPU per job where the jobs run on ``device`` cuda (an
        engine's job sees no GPU it did not ask for: submitit hides the others, Slurm allots none)."""
        return replace(self, gpus_per_job=max(1, self.gpus_per_job)) if device.startswith("cuda") else self

    @property
    def runs_here(self) -> bool:
        """Whether the jobs run on this machine (its memory and devices are theirs)."""
        return self.launcher == "local" or (self.launcher == "slurm" and self.cluster == "local") or (self.launcher == "ray" and not self.ray_address)


LOCAL = LauncherSettings()


def read_launcher_config(path: str) -> dict:
    """The settings of a ``--launcher-config`` file: a JSON object, or TOML (``.toml``, Python 3.11+)
    whose keys are :class:`LauncherSettings` fields."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SinklabError(f"--launcher-config {path}: {exc.strerror or exc}") from None
    try:
        if path.endswith(".toml"):
            import tomllib

            given = tomllib.loads(text)
        else:
            given = json.loads(text)
    except ImportError:
        raise SinklabError(f"--launcher-config {path}: TOML needs Python 3.11 or later; write the settings as JSON") from None
    except ValueError as exc:
        raise SinklabError(f"--launcher-config {path} is not valid {'TOML' if path.endswith('.toml') else 'JSON'}: {str(exc).splitlines()[0]}") from None
    check(isinstance(given, dict), f"--launcher-config {path}: expected an object of settings, got {type(given).__name__}")
    return given


def check_launcher(settings: LauncherSettings) -> None:
    """Refuse, before any job starts, an engine that is not installed or a Ray address nothing answers at."""
    if settings.launcher in ENGINE_PACKAGES:
        package, install = ENGINE_PACKAGES[settings.launcher]
        try:
            __import__(package)
        except ImportError:
            raise SinklabError(f"--launcher {settings.launcher} needs the {package} package, which is not installed: {install}") from None
    if settings.launcher == "ray" and settings.ray_address and settings.ray_address != "auto":
        host, _, port = settings.ray_address.removeprefix("ray://").rpartition(":")
        check(port.isdigit() and host, f"--ray-address {settings.ray_address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as exc:
            raise SinklabError(f"--ray-address {settings.ray_address}: nothing answers there ({exc.strerror or exc}); is the Ray cluster up?") from None


@dataclass(frozen=True)
class PortableJob:
    """A job function as a pool worker runs it, for another engine's worker: ``fn`` travels pickled
    and is unpickled only after this process's ``sys.path`` is in place (a script's or a test's
    module imports there as here), in this process's working directory (relative run directories
    mean the same), with torch on ``threads`` threads."""

    payload: bytes
    sys_path: tuple
    cwd: str
    threads: int

    @classmethod
    def of(cls, fn: Callable[[Any], Any], threads: int) -> "PortableJob":
        import cloudpickle

        return cls(cloudpickle.dumps(fn), tuple(sys.path), os.getcwd(), threads)

    def __call__(self, job: Any) -> Any:
        import cloudpickle
        import torch

        sys.path[:0] = [p for p in self.sys_path if p not in sys.path]
        check(os.path.isdir(self.cwd), f"the job's working directory {self.cwd} is missing on this machine: sinklab's jobs need the submitting machine's files")
        os.chdir(self.cwd)
        torch.set_num_threads(self.threads)
        return cloudpickle.loads(self.payload)(job)


def launch(
    fn: Callable[[Any], Any],
    jobs: Sequence[Any],
    settings: LauncherSettings = LOCAL,
    run_dir: Optional[str | os.PathLike] = None,
    workers: Optional[int] = None,
    desc: str = "jobs",
    label: Callable[[Any], str] = str,
    on_result: Optional[Callable[[Any, Any], None]] = None,
) -> list:
    """Apply ``fn`` to every job on the engine ``settings`` names; results in job order.

    ``workers`` is the pool's process count (local) and a local Ray's size; a cluster runs as many
    jobs at once as it schedules (Slurm: ``array_parallelism``). ``run_dir`` holds the engines' logs
    (``launcher/``); the pipeline records the settings in its run.json.
    """
    if settings.launcher == "local":
        return run_jobs(fn, jobs, workers, desc=desc, label=label, on_result=on_result)
    check_launcher(settings)
    check(run_dir is not None, f"--launcher {settings.launcher} keeps its logs in the run directory: give launch() a run_dir")
    if not jobs:
        return []
    workers = default_workers() if workers is None else workers
    cpus = settings.cpus_per_job or pool_threads(workers, len(jobs))
    log_dir = Path(run_dir) / LOG_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    engine = _submitit_outcomes if settings.launcher == "slurm" else _ray_outcomes
    results: list = [None] * len(jobs)
    failures: list[str] = []
    bar = progress_bar(total=len(jobs), desc=f"{desc} ({settings.launcher})", unit="job")
    with bar, contextlib.closing(engine(PortableJob.of(fn, cpus), jobs, settings, log_dir, workers, cpus)) as outcomes:
        for i, result, failure in outcomes:
            if failure is None:
                results[i] = result
                bar.set_postfix_str(f"done {label(jobs[i])}")
                if on_result is not None:
                    on_result(jobs[i], result)
            else:
                failures.append(f"{label(jobs[i])}: {failure}")
            bar.update(1)
    check(not failures, f"{len(failures)} of {len(jobs)} jobs failed (the others' results are kept; run the command again to retry): {'; '.join(failures)}")
    return results


@contextlib.contextmanager
def _terminate_unwinds() -> Iterator[None]:
    """Within it, SIGTERM (``kill``, ``scancel`` of the batch job running this command) exits through
    the normal unwinding, so submitit's clean-up cancels the jobs not yet finished. Python's default
    ends the process on the spot and leaves them running, to race a restarted command for the same
    run directories. (Ray needs none: it ends a dead driver's tasks itself, tested.) Only the main
    thread may set a handler; elsewhere nothing changes. On leaving, the handler Python knows of comes
    back (nested uses, SIG_IGN, a Python handler); a disposition set outside Python, which
    ``signal.signal`` cannot see, comes back as what Python last recorded (usually the default). A
    second SIGTERM while the jobs are being cancelled ends the command at once (the default handler
    is back by then)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _exit_on_terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _exit_on_terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def pool_threads(workers: int, jobs: int) -> int:
    """The torch threads a job gets from the pool: one in a worker process, this process's own
    when the pool runs the jobs in this process (one worker or one job)."""
    import torch

    return 1 if workers > 1 and jobs > 1 else torch.get_num_threads()


Outcome = tuple  # (job index, result or None, failure message or None)


def _submitit_outcomes(job_fn: PortableJob, jobs: Sequence[Any], settings: LauncherSettings, log_dir: Path, workers: int, cpus: int) -> Iterator[Outcome]:
    """One submitit job array (sbatch ``--array`` with ``%array_parallelism``), as its jobs finish."""
    import submitit

    executor = submitit.AutoExecutor(folder=log_dir, cluster=settings.cluster)
    executor.update_parameters(
        name="sinklab", timeout_min=settings.time, cpus_per_task=cpus, gpus_per_node=settings.gpus_per_job, slurm_partition=settings.partition,
        slurm_array_parallelism=settings.array_parallelism or len(jobs), slurm_additional_parameters=dict(settings.slurm_extra) or None,
    )
    submitted = executor.map_array(job_fn, jobs)
    index = {id(job): i for i, job in enumerate(submitted)}
    try:
        with _terminate_unwinds():
            for job in submitit.helpers.as_completed(submitted, poll_frequency=POLL_SECONDS):
                error = job.exception()
                yield (index[id(job)], job.result(), None) if error is None else (index[id(job)], None, f"{_error_line(str(error))} (log: {job.paths.stderr})")
    finally:
        for job in submitted:
            if not job.done():
                job.cancel(check=False)


def _error_line(report: str) -> str:
    """The exception's own line from submitit's failure report (its trace sits between two rules
    of dashes), else the report's first line (a job killed, timed out or never started)."""
    lines = [line for line in report.splitlines() if line.strip()]
    rules = [i for i, line in enumerate(lines) if set(line.strip()) == {"-"}]
    return lines[rules[1] - 1].strip() if len(rules) >= 2 and rules[1] - rules[0] > 1 else (lines[0] if lines else "no report")


def _ray_outcomes(job_fn: PortableJob, jobs: Sequence[Any], settings: LauncherSettings, log_dir: Path, workers: int, cpus: int) -> Iterator[Outcome]:
    """One Ray task per job (``num_cpus``, ``num_gpus``), as they finish; a Ray this call started
    is shut down at the end."""
    import ray

    started = not ray.is_initialized()
    if started:
        # address "local": without it ray.init joins the cluster RAY_ADDRESS or /tmp/ray names, if any
        ray.init(**({"address": settings.ray_address} if settings.ray_address else {"address": "local", "num_cpus": workers * cpus, "include_dashboard": False}))
    pending: list = []
    try:
        task = ray.remote(_logged).options(num_cpus=cpus, num_gpus=settings.gpus_per_job)
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
                what = f"{type(cause).__name__}: {cause}" if isinstance(cause, BaseException) else str(exc).splitlines()[0]
                yield i, None, f"{what} (log: {logs[i]})"
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()


def _logged(job_fn: PortableJob, job: Any, log: str) -> Any:
    """Run a job in a Ray worker with its output and any traceback in its own log file."""
    with open(log, "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            return job_fn(job)
        except BaseException:
            traceback.print_exc()
            raise
