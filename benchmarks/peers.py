"""Shared by the side-by-side benchmarks against the tools a user would pick instead of sinklab
(``peers_kvpress.py``, ``peers_scan.py``, ``peers_quantized_cache.py``).

Each framework runs in its own process (a *worker*): the orchestrator, in the project's venv,
starts ``.venv/bin/python benchmarks/<script>.py --worker JOB`` once per measurement, with the
framework's site on ``PYTHONPATH`` (``.peers/<site>``, built by ``make bench-peers``; sinklab's
worker gets none), the same torch and the same thread count (``OMP_NUM_THREADS``,
``MKL_NUM_THREADS`` and ``torch.set_num_threads``). The worker prints one line ``RESULT <json>``.
Workers of different frameworks alternate, the order reversed every round, so a slow spell of
this shared machine hits each of them.

Memory is the worker's resident set from Linux's ``/proc/self/status``, no tracemalloc: after the
model is loaded and a 16-token forward has paged its weights in (safetensors are mapped lazily),
the heap is trimmed and the peak (``VmHWM``) is reset to the current resident size by writing 5 to
``/proc/self/clear_refs``; ``peak_mib`` is ``VmHWM`` after
the measured work (the loaded model included) and ``above_loaded_mib`` what the work added on top
of the resident size at the reset. Where the reset is refused, the peak is the process's whole
``ru_maxrss`` (loading included) and the row says so (``memory_method``).

Nothing here imports sinklab: a peer's worker runs beside another transformers than the venv's.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.metadata
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

ROOT = Path(__file__).resolve().parent.parent
#: Each peer's ``pip install --target`` site (git-ignored; ``make bench-peers`` builds them).
PEERS = ROOT / ".peers"
SITES = ("kvpress", "transformer_lens", "nnsight")
RESULT = "RESULT "


# -- the orchestrator's side ------------------------------------------------------------------


def site_path(site: str) -> Path:
    """The installed site of a peer; exits with the command that builds it when it is missing."""
    path = PEERS / site
    if not (path / ".installed").exists():
        sys.exit(f"the {site} site is missing ({path}): run `make bench-peers` (or `make {path.relative_to(ROOT)}/.installed`)")
    return path


def worker_env(site: Optional[str], threads: int) -> dict:
    """The environment of a worker: the peer's site alone on PYTHONPATH (none for sinklab), and
    ``threads`` threads for every BLAS and OpenMP pool."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if site is not None:
        env["PYTHONPATH"] = str(site_path(site))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HF_HUB_OFFLINE", "1")  # every framework loads the same local folder
    return env


def run_worker(script: str, site: Optional[str], job: dict, threads: int, limit_gb: float) -> dict:
    """Run ``benchmarks/<script> --worker JOB`` in a fresh process; its result, or ``failed`` with
    the last line of its error output (a worker over ``limit_gb`` of address space fails cleanly
    instead of pushing this shared machine into swap)."""
    limit = int(limit_gb * 2**30)

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--worker", json.dumps({**job, "threads": threads})],
        capture_output=True,
        text=True,
        env=worker_env(site, threads),
        cwd=ROOT,
        preexec_fn=cap,
    )
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()] or [f"exit status {proc.returncode}"]
    return {"failed": lines[-1][:300], "returncode": proc.returncode, "wall_s": round(time.perf_counter() - start, 1)}


def alternated(names: list, rounds: int) -> Iterator[tuple[int, list]]:
    """(round, order) for each round: ``names`` in order, then reversed, and so on."""
    for r in range(rounds):
        yield r, list(names) if r % 2 == 0 else list(reversed(names))


def median(values: list, digits: int = 4) -> Optional[float]:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), digits) if values else None


def spread(values: list, digits: int = 3) -> Optional[list]:
    """[min, max] of ``values``, or None."""
    values = [v for v in values if v is not None]
    return [round(min(values), digits), round(max(values), digits)] if values else None


def write_ids(ids, path: Path) -> str:
    """Write token ids (1, T) as JSON for the workers, so every framework reads the same input."""
    path.write_text(json.dumps(ids.tolist()))
    return str(path)


def done(row: dict, name: str, smoke: bool) -> None:
    """Record ``row`` as ``results/<name>.jsonl`` through common.py (which refused a dirty tree
    when it was imported), or with ``--smoke`` only print it: a check, not a measurement."""
    if smoke:
        print(json.dumps(row, indent=2)[:20000])
        print(f"(--smoke: not recorded in results/{name}.jsonl)")
        return
    from common import record

    record(name, row)


# -- the worker's side --------------------------------------------------------------------------


def read_job(argv: list) -> Optional[dict]:
    """The job of ``--worker JOB``, or None when this process is the orchestrator."""
    if len(argv) >= 3 and argv[1] == "--worker":
        return json.loads(argv[2])
    return None


def start_worker(job: dict):
    """Set the thread count and no-grad mode; returns torch."""
    import torch

    torch.set_num_threads(job["threads"])
    torch.set_grad_enabled(False)
    return torch


def read_ids(job: dict):
    import torch

    return torch.tensor(json.loads(Path(job["ids"]).read_text()), dtype=torch.long)


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def trim_heap() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def memory_mark() -> dict:
    """Trim the heap and start measuring the peak from here (see the module docstring)."""
    trim_heap()
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        method = "VmHWM reset by clear_refs"
    except OSError:
        method = "ru_maxrss of the whole process"
    return {"method": method, "rss_kib": _status_kib("VmRSS")}


def memory_since(mark: dict) -> dict:
    """The peak resident memory since :func:`memory_mark`, in MiB."""
    peak = _status_kib("VmHWM") if mark["method"].startswith("VmHWM") else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "peak_mib": round(peak / 1024, 1),
        "above_loaded_mib": round((peak - mark["rss_kib"]) / 1024, 1),
        "loaded_mib": round(mark["rss_kib"] / 1024, 1),
        "memory_method": mark["method"],
    }


def timed(fn: Callable) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def versions(*packages: str) -> dict:
    """The versions this worker runs (its site first on the path), and its torch thread count."""
    import torch

    found = {"python": sys.version.split()[0], "torch_threads": torch.get_num_threads()}
    for name in ("torch", "transformers", *packages):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def emit(result: dict) -> None:
    print(RESULT + json.dumps(result), flush=True)
