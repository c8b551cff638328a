"""Shared by the benchmark scripts: one JSON row per measurement, with machine, versions and the
commit it was measured at.

A benchmark refuses to start on a tree with uncommitted changes (outside ``benchmarks/results/``,
which the rows themselves change): a row must name the code that produced it. Set
``SINKLAB_BENCH_ALLOW_DIRTY=1`` to measure anyway; the row's ``git`` then ends in ``-dirty``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from sinklab.core.runs import append_jsonl, machine_info

ROOT = Path(__file__).parent.parent
RESULTS = Path(__file__).parent / "results"
RUNS = ROOT / "runs"  # run directories (git-ignored)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=ROOT).stdout.rstrip()


def measured_revision() -> str:
    """HEAD's commit; exits with a one-line message when the tree has uncommitted changes."""
    try:
        revision = _git("rev-parse", "--short", "HEAD")
        changed = [line[3:] for line in _git("status", "--porcelain", "--untracked-files=no").splitlines()]  # "XY path"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    changed = [path for path in changed if not path.startswith("benchmarks/results/")]
    if not changed:
        return revision
    if os.environ.get("SINKLAB_BENCH_ALLOW_DIRTY") == "1":
        return revision + "-dirty"
    sys.exit(f"benchmarks record only from a clean tree; uncommitted: {', '.join(changed[:5])} (commit them, or set SINKLAB_BENCH_ALLOW_DIRTY=1 to flag the row -dirty)")


REVISION = measured_revision()  # checked when a benchmark starts, not after an hour of measuring


def record(name: str, row: dict) -> dict:
    """Append ``row`` (plus machine, versions, revision, time) to ``results/<name>.jsonl``; print it."""
    RESULTS.mkdir(exist_ok=True)
    full = {"benchmark": name, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "git": REVISION, "machine": machine_info(), **row}
    append_jsonl(RESULTS / f"{name}.jsonl", full)
    print(json.dumps(row, indent=2)[:4000])
    return full
