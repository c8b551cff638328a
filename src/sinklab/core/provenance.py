"""What a result depends on besides its configuration: package versions, the source revision, and
the machine (torch's threads, the processor or GPU, deterministic algorithms).

Training is chaotic in the order of floating-point sums, and torch's intra-op thread count sets that
order on a CPU: the same seed trained on one thread and on two can end in different models
(BENCHMARKS.md 4b, whether a sink forms). So every run.json and every benchmark row records the
threads a run used, and the commands that train take ``--threads`` (:func:`torch_threads`).
"""

from __future__ import annotations

import os
import platform
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional


def package_versions() -> dict:
    """Versions of the packages a result depends on (those installed)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in ("sinklab", "torch", "transformers", "plotly"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def source_revision(package_dir: str | os.PathLike = Path(__file__).resolve().parent.parent) -> Optional[dict]:
    """The git commit of the checkout sinklab is imported from and whether sinklab's own files
    (``package_dir`` and below) have uncommitted changes (a results file appended beside them does
    not make the code uncommitted); None when sinklab's files are not tracked by a git checkout
    there (an installed wheel, even one inside some other repository) or git is missing."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(package_dir), *args], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()

    try:
        git("ls-files", "--error-unmatch", "__init__.py")
        commit = git("rev-parse", "HEAD")
        changes = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "uncommitted_changes": bool(changes)}


def machine_record() -> dict:
    """The facts of this process that can change a trained result: torch's intra-op and inter-op
    thread counts, the CPU model (and the GPU's name, with cuDNN's determinism switches, when torch
    sees one), the logical cores, whether deterministic algorithms were on, and the processes of a
    distributed run (``WORLD_SIZE``: each sums the gradients in its own order)."""
    import torch

    record: dict[str, Any] = {
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
    }
    if torch.cuda.is_available():
        record["gpu"] = torch.cuda.get_device_name()
        record["cudnn"] = {"deterministic": torch.backends.cudnn.deterministic, "benchmark": torch.backends.cudnn.benchmark}
    return record


def cpu_model() -> str:
    """The processor's model name (Linux's /proc/cpuinfo), else what :mod:`platform` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Processor", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@contextmanager
def torch_threads(threads: Optional[int]) -> Iterator[None]:
    """Torch's intra-op threads set to ``threads`` inside the block and restored after it; None
    leaves them as they are (torch's default: the cores, or ``OMP_NUM_THREADS``; a pool worker's 1)."""
    import torch

    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def check_threads(threads: Optional[int]) -> None:
    """Refuse a thread count below 1 or above this machine's cores (``--threads``; more threads than
    cores only slows torch, and thousands fail to start after the run directory is claimed), in one line."""
    from .errors import check

    cores = os.cpu_count() or 1
    check(threads is None or 1 <= threads <= cores, f"--threads must be from 1 to this machine's {cores} cores, got {threads}")


def migrated_threads(saved: dict) -> dict:
    """A config.json from before ``--threads``: it ran on torch's default threads (None)."""
    return {**saved, "threads": None}


@dataclass(frozen=True)
class OnThreads:
    """A job function run with torch on ``threads`` threads (None: the worker's own), picklable so
    that every engine's worker runs it: what ``--threads`` means for the jobs of a lab."""

    fn: Callable[[Any], Any]
    threads: Optional[int]

    def __call__(self, job: Any) -> Any:
        with torch_threads(self.threads):
            return self.fn(job)


#: The help of every ``--threads`` flag.
THREADS_HELP = (
    "torch's intra-op threads while training (default: torch's own, the cores or OMP_NUM_THREADS; 1 for runs "
    "trained side by side). The float order, and so a chaotic training's outcome, depends on it: a run of "
    "another --threads is another run (refused in its --out, as any other setting)"
)
