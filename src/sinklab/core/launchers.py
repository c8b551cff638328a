"""Where a many-job command runs its jobs: ``local`` (sinklab's own process pool,
:func:`~.jobs.pool_outcomes`), ``slurm`` (a Slurm job array through submitit) or ``ray`` (a Ray
cluster, or a Ray started on this machine). :func:`launch` is the one call the commands make: the
same job function and jobs whichever engine runs them, results in job order, and
``on_result(job, result)`` in this process as each job finishes, so finished work is saved at once
and a killed sweep resumes where it stopped (the callers skip what their run directory already holds).

One failure rule on every engine: a failed job does not stop the others (their results reach
``on_result`` and are kept), and one :class:`SinklabError` at the end names each failed job and its
log, under the run directory in ``launcher/``. An engine's worker runs a job as a pool worker would
(:class:`~.cluster.PortableJob`), so results equal the pool's.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Generator, Optional, Sequence

from .cluster import PortableJob, ray_outcomes, submitit_outcomes
from .errors import SinklabError, check
from .jobs import Outcome, default_workers, pool_outcomes
from .progress import progress_bar

LAUNCHERS = ("local", "slurm", "ray")
SUBMITIT_CLUSTERS = ("slurm", "local")  # "local": submitit runs the Slurm path's jobs as subprocesses here
LOG_DIR = "launcher"  # under the run directory: failed pool jobs' tracebacks, submitit's job files and logs, Ray's job logs
ENGINE_PACKAGES = {"slurm": ("submitit", "pip install submitit"), "ray": ("ray", "pip install 'sinklab[ray]'")}
#: Old spellings a --launcher-config file may still use: old name -> the setting's name.
RENAMED_SETTINGS = {"time": "timeout_min"}
#: A Ray worker on this machine runs at the pool's priority: Ray's default, niceness 15, puts its
#: jobs behind any other busy process. Ray's own job manager sets the same variable for its
#: supervisors; a cluster joined with --ray-address keeps its own setting.
AS_THE_POOL = {"RAY_worker_niceness": "0"}


@dataclass(frozen=True)
class LauncherSettings:
    """Which engine runs the jobs and what each job asks of it, in submitit's names where it has
    one. Result-neutral: a run started with one launcher resumes with another (nothing here enters
    a run's config.json)."""

    launcher: str = "local"
    partition: Optional[str] = None  # slurm: the partition (None: the cluster's default)
    timeout_min: int = 60  # a job's time limit in minutes (slurm; submitit's local cluster too)
    gpus_per_job: int = 0  # slurm --gpus-per-node, ray num_gpus
    cpus_per_job: Optional[int] = None  # None: as the pool (1 when jobs run several at a time, else this process's torch threads)
    array_parallelism: Optional[int] = None  # slurm: jobs of the array running at once (None: all)
    slurm_extra: dict = field(default_factory=dict)  # more sbatch options, e.g. {"account": "lab", "mem": "16G"}
    ray_address: Optional[str] = None  # None: start a local Ray of `workers` x cpus_per_job CPUs
    cluster: str = "slurm"  # submitit's cluster; "local" runs the jobs as subprocesses of this machine

    def __post_init__(self) -> None:
        check(self.launcher in LAUNCHERS, f"unknown launcher {self.launcher!r}; choose from: {', '.join(LAUNCHERS)}")
        clusters = ", ".join(SUBMITIT_CLUSTERS)
        check(self.cluster in SUBMITIT_CLUSTERS, f"unknown submitit cluster {self.cluster!r}; choose from: {clusters}")
        for name in ("partition", "ray_address"):
            value = getattr(self, name)
            check(value is None or isinstance(value, str), f"launcher setting {name} must be text, got {value!r}")
        for name in ("timeout_min", "gpus_per_job", "cpus_per_job", "array_parallelism"):
            value = getattr(self, name)  # a --launcher-config file may hold "60" or 1.5
            optional = name in ("cpus_per_job", "array_parallelism")
            whole = type(value) is int or (value is None and optional)
            check(whole, f"launcher setting {name} must be a whole number, got {value!r}")
        for name in ("timeout_min", "cpus_per_job", "array_parallelism"):
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

    def with_threads(self, threads: Optional[int]) -> "LauncherSettings":
        """These settings for jobs that train on ``threads`` torch threads (``--threads``): each job
        asks its engine for that many CPUs unless ``cpus_per_job`` says, and asking fewer CPUs than
        threads is refused (the job would oversubscribe what Slurm or Ray gave it)."""
        if threads is None:
            return self
        if self.cpus_per_job is None:
            return replace(self, cpus_per_job=threads)
        check(
            threads <= self.cpus_per_job,
            f"--threads {threads} is more than the {self.cpus_per_job} CPUs each job asks for (--cpus-per-job): "
            "give --cpus-per-job at least --threads",
        )
        return self

    @property
    def runs_here(self) -> bool:
        """Whether the jobs run on this machine (its memory and devices are theirs)."""
        submitit_here = self.launcher == "slurm" and self.cluster == "local"
        return self.launcher == "local" or submitit_here or (self.launcher == "ray" and not self.ray_address)


LOCAL = LauncherSettings()


def read_launcher_config(path: str) -> dict:
    """The settings of a ``--launcher-config`` file: a JSON object, or TOML (``.toml``, Python 3.11+)
    whose keys are :class:`LauncherSettings` fields or their old spellings (:data:`RENAMED_SETTINGS`,
    renamed here, the one place they are read)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SinklabError(f"--launcher-config {path}: {exc.strerror or exc}") from None
    kind = "TOML" if path.endswith(".toml") else "JSON"
    try:
        if kind == "TOML":
            import tomllib

            given = tomllib.loads(text)
        else:
            given = json.loads(text)
    except ImportError:
        raise SinklabError(f"--launcher-config {path}: TOML needs Python 3.11 or later; write the settings as JSON") from None
    except ValueError as exc:
        raise SinklabError(f"--launcher-config {path} is not valid {kind}: {str(exc).splitlines()[0]}") from None
    check(isinstance(given, dict), f"--launcher-config {path}: expected an object of settings, got {type(given).__name__}")
    for old, new in RENAMED_SETTINGS.items():
        if old in given:
            check(new not in given, f"--launcher-config {path} gives both {new} and its old spelling {old}; keep {new}")
            given[new] = given.pop(old)
    return given


def check_launcher(settings: LauncherSettings) -> None:
    """Refuse, before any job starts, an engine that is not installed or a Ray address nothing answers at."""
    if settings.launcher in ENGINE_PACKAGES:
        package, install = ENGINE_PACKAGES[settings.launcher]
        try:
            __import__(package)
        except ImportError:
            missing = f"needs the {package} package, which is not installed: {install}"
            raise SinklabError(f"--launcher {settings.launcher} {missing}") from None
    if settings.launcher == "ray" and settings.ray_address and settings.ray_address != "auto":
        host, _, port = settings.ray_address.removeprefix("ray://").rpartition(":")
        check(port.isdigit() and host, f"--ray-address {settings.ray_address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as exc:
            silent = f"nothing answers there ({exc.strerror or exc}); is the Ray cluster up?"
            raise SinklabError(f"--ray-address {settings.ray_address}: {silent}") from None


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
    jobs at once as it schedules (Slurm: ``array_parallelism``). ``run_dir`` holds the jobs' logs
    (``launcher/``; the pool writes one for a failed job only, and none without a ``run_dir``); the
    pipeline records the settings in its run.json.
    """
    if settings.launcher != "local":
        check_launcher(settings)
        check(run_dir is not None, f"--launcher {settings.launcher} keeps its logs in the run directory: give launch() a run_dir")
    if not jobs:
        return []
    workers = default_workers() if workers is None else workers
    log_dir = None if run_dir is None else Path(run_dir) / LOG_DIR
    results: list = [None] * len(jobs)
    failures: list[str] = []
    engine = "" if settings.launcher == "local" else f" ({settings.launcher})"
    bar = progress_bar(total=len(jobs), desc=desc + engine, unit="job")
    with bar, contextlib.closing(_outcomes(fn, jobs, settings, log_dir, workers)) as outcomes:
        for i, result, failure in outcomes:
            if failure is None:
                results[i] = result
                bar.set_postfix_str(f"done {label(jobs[i])}")
                if on_result is not None:
                    on_result(jobs[i], result)
            else:
                failures.append(f"{label(jobs[i])}: {failure}")
            bar.update(1)
    retry = "the others' results are kept; run the command again to retry only these, once their cause is mended"
    check(not failures, f"{len(failures)} of {len(jobs)} jobs failed ({retry}): {'; '.join(failures)}")
    return results


def _outcomes(
    fn: Callable[[Any], Any], jobs: Sequence[Any], settings: LauncherSettings, log_dir: Optional[Path], workers: int
) -> Generator[Outcome, None, None]:
    """Each job's outcome, as the jobs finish, from the engine ``settings`` names, in its own terms."""
    if settings.launcher == "local":
        return pool_outcomes(fn, jobs, workers, log_dir)
    assert log_dir is not None  # launch() checked run_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    cpus = settings.cpus_per_job or pool_threads(workers, len(jobs))
    if settings.launcher == "slurm":
        parameters = {
            "name": "sinklab",
            "timeout_min": settings.timeout_min,
            "cpus_per_task": cpus,
            "gpus_per_node": settings.gpus_per_job,
            "slurm_partition": settings.partition,
            "slurm_array_parallelism": settings.array_parallelism or len(jobs),
            "slurm_additional_parameters": dict(settings.slurm_extra) or None,
        }
        return submitit_outcomes(PortableJob.of(fn, cpus), jobs, log_dir, settings.cluster, parameters)
    # address "local": without it ray.init joins the cluster RAY_ADDRESS or /tmp/ray names, if any
    here = {"address": "local", "num_cpus": workers * cpus, "include_dashboard": False}
    init = {"address": settings.ray_address} if settings.ray_address else here
    options = {"num_cpus": cpus, "num_gpus": settings.gpus_per_job}
    env_vars = {} if settings.ray_address else AS_THE_POOL
    return ray_outcomes(PortableJob.of(fn, cpus, carry_path=False), jobs, log_dir, init, options, env_vars)


def pool_threads(workers: int, jobs: int) -> int:
    """The torch threads a job gets from the pool: one in a worker process, this process's own
    when the pool runs the jobs in this process (one worker or one job)."""
    import torch

    return 1 if workers > 1 and jobs > 1 else torch.get_num_threads()
