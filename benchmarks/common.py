"""Shared by the benchmark scripts: one JSON row per measurement, with machine and versions."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from sinklab.core.runs import append_jsonl, machine_info

RESULTS = Path(__file__).parent / "results"
RUNS = Path(__file__).parent.parent / "runs"  # run directories (git-ignored)


def git_revision() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def record(name: str, row: dict) -> dict:
    """Append ``row`` (plus machine, versions, revision, time) to ``results/<name>.jsonl``; print it."""
    RESULTS.mkdir(exist_ok=True)
    full = {"benchmark": name, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "git": git_revision(), "machine": machine_info(), **row}
    append_jsonl(RESULTS / f"{name}.jsonl", full)
    print(json.dumps(row, indent=2))
    return full
