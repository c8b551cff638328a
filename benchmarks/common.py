"""Shared by the benchmark scripts: one JSON row per measurement, with machine, versions and the
commit it was measured at.

A benchmark refuses to start on a tree with uncommitted changes (to tracked files, or untracked
files outside ``benchmarks/results/``, which the rows themselves change, and ``runs/``, where run
directories go), or where git cannot say which commit this is: a row must name the code that
produced it. Set ``SINKLAB_BENCH_ALLOW_DIRTY=1`` to measure anyway; the row's ``git`` then ends in
``-dirty`` (``unknown-dirty`` where git failed).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from sinklab.core.atomic import append_jsonl

ROOT = Path(__file__).parent.parent
RESULTS = Path(__file__).parent / "results"
RUNS = ROOT / "runs"  # run directories (git-ignored)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=ROOT).stdout.rstrip()


NOT_SOURCE = ("benchmarks/results/", "runs/")  # what a benchmark itself writes: not part of the code measured
DIRTY = "-dirty"
UNKNOWN = "unknown"  # the revision where git cannot say which commit this is


def measured_revision() -> str:
    """HEAD's commit; exits with a one-line message when the tree has changes outside
    :data:`NOT_SOURCE` (untracked files too: a new module changes what runs) or git fails."""
    try:
        revision = _git("rev-parse", "--short", "HEAD")
        changed = [line[3:] for line in _git("status", "--porcelain", "--untracked-files=all").splitlines()]  # "XY path"
    except (OSError, subprocess.CalledProcessError) as exc:
        return flagged_dirty(UNKNOWN, f"git cannot say which commit this is ({type(exc).__name__})")
    changed = [path for path in changed if not path.startswith(NOT_SOURCE)]
    return flagged_dirty(revision, f"uncommitted: {', '.join(changed[:5])}") if changed else revision


def flagged_dirty(revision: str, why: str) -> str:
    """``revision`` flagged ``-dirty`` where ``SINKLAB_BENCH_ALLOW_DIRTY=1``; else exits, saying why."""
    if os.environ.get("SINKLAB_BENCH_ALLOW_DIRTY") == "1":
        return revision + DIRTY
    sys.exit(
        f"benchmarks record only from a clean tree; {why} "
        f"(commit them, or set SINKLAB_BENCH_ALLOW_DIRTY=1 to flag the row {DIRTY})"
    )


REVISION = measured_revision()  # checked when a benchmark starts, not after an hour of measuring


def record(name: str, row: dict) -> dict:
    """Append ``row`` (plus machine, versions, revision, time) to ``results/<name>.jsonl``; print it."""
    RESULTS.mkdir(exist_ok=True)
    full = {"benchmark": name, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "git": REVISION, "machine": machine_info(), **row}
    append_jsonl(RESULTS / f"{name}.jsonl", full)
    print(json.dumps(row, indent=2)[:4000])
    return full


def machine_info() -> dict:
    """The machine and library versions, recorded next to every measured number: torch's intra-op and
    inter-op threads, the CPU model or GPU, determinism (sinklab's run.json records the same)."""
    import torch

    from sinklab.core.provenance import machine_record

    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        **machine_record(),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    return info
