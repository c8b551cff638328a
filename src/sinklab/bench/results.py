"""A model's results file, in the lm-evaluation-harness manner: which tasks ran at which version
and configuration, with which sinklab (version, git commit) on which machine, the model's
revision, dtype and device, the seeds, the wall time, and each metric with its spread where it has
one. Validated against ``sinklab/schemas/bench_results.json``; ``sinklab bench --compare`` merges
such files made on different machines.
"""

from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path
from typing import Optional

from ..core.errors import SinklabError, check
from ..core.jsonable import jsonable
from ..core.provenance import package_versions, source_revision

RESULTS_KIND = "bench_results"
RESULTS_VERSION = 1
RESULTS_DIR = "results"
#: What makes two results files results of one model: its name, revision, dtype and device.
IDENTITY = ("model_name", "revision", "dtype", "device")
#: The relative difference under which two values of one model and task version are one result:
#: float32 rounding on another machine moves a figure by far less, a changed measurement by more
#: (the kv_2bit figures that moved without a version bump differed by 4 %).
SAME_VALUE = 1e-3


def provenance() -> dict:
    """Which sinklab and which machine measured: its version and git commit, the packages that
    decide the numbers, and the host (for CPU timings, the core count)."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "versions": package_versions(),
        "git": source_revision(),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(), "gpu": gpu},
    }


def model_results(model: Optional[str], label: str, suite: str, limit: Optional[str], entries: dict, where: dict) -> dict:
    """One model's results file from its tasks' entries (:meth:`BenchTask.run`, each with ``where`` it
    ran: a kept job may come from another commit or machine; ``task_commits`` lists them) and
    ``where`` the file is written (:func:`provenance`). The model's facts (name, revision, dtype, device) are its tasks' own;
    tasks that ran the model on different devices or dtypes would not line up and are refused."""
    facts = [entry["model_facts"] for entry in entries.values() if entry["model_facts"]]
    first = facts[0] if facts else {}
    differing = [key for key in ("model", "dtype", "device", "revision") if len({json.dumps(f.get(key)) for f in facts}) > 1]
    check(
        not differing, f"{label}: its tasks ran with different {', '.join(differing)}; run them again with one --device, --dtype"
    )
    return jsonable({
        "kind": RESULTS_KIND,
        "schema_version": RESULTS_VERSION,
        "model": model,
        "label": label,
        "model_name": first.get("model"),
        "revision": first.get("revision"),
        "dtype": first.get("dtype"),
        "device": first.get("device"),
        "suite": suite,
        "limit": limit,
        **where,
        "task_commits": sorted({(entry["where"]["git"] or {}).get("commit", "unknown") for entry in entries.values()}),
        "seeds": {name: seed for name, entry in entries.items() if (seed := _seed(entry["config"])) is not None},
        "wall_s": sum(entry["wall_s"] for entry in entries.values()),
        "tasks": {name: {k: v for k, v in entry.items() if k != "model_facts"} for name, entry in entries.items()},
    })  # fmt: skip


def _seed(config: dict) -> Optional[int]:
    """The seed a task's configuration draws its inputs with (scan and intervene keep it with
    their inputs; None for a task with nothing random)."""
    if "seed" in config:
        return config["seed"]
    return config.get("inputs", {}).get("seed")


def read_results(path: Path) -> list[dict]:
    """The results files of a bench run directory (its ``results/``), or one results file; each
    validated against its schema (one line naming the file and the first break)."""
    return [results for _, results in read_results_files(path)]


def read_results_files(path: Path) -> list[tuple[Path, dict]]:
    """(file, results) for :func:`read_results`: ``--compare`` names the files it refuses."""
    from ..core.schemas import validate

    path = Path(path)
    files = sorted((path / RESULTS_DIR).glob("*.json")) if path.is_dir() else [path]
    check(path.exists(), f"no such bench run or results file: {path}")
    check(files, f"{path} holds no bench results ({RESULTS_DIR}/*.json): is it a finished sinklab bench run?")
    found = []
    for file in files:
        try:
            results = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SinklabError(f"{file} cannot be read as JSON ({type(exc).__name__})") from None
        check(isinstance(results, dict) and results.get("kind") == RESULTS_KIND, f"{file} is not a sinklab bench results file")
        try:
            validate(results)
        except SinklabError as exc:
            raise SinklabError(f"{file}: {exc}") from None
        found.append((file, results))
    return found


def check_one_result_per_version(found: list[tuple[Path, dict]]) -> None:
    """Refuse results files that give one model (:data:`IDENTITY`) different values for a task at
    the same version: a version says the numbers are comparable, so two different numbers under it
    cannot both stand on one leaderboard (a changed measurement bumps the version). One line names
    the task and both files."""
    first: dict = {}
    for file, results in found:
        model = tuple(results[key] for key in IDENTITY)
        for name, entry in results["tasks"].items():
            other_file, other = first.setdefault((model, name, entry["version"]), (file, entry))
            check(
                _agree(other, entry),
                f"task {name} (version {entry['version']}) gives {results['model_name']} ({results['dtype']}, "
                f"{results['device']}) different values in {other_file} and {file}: results that differ at one task "
                "version do not mix (a change in what a task measures bumps its version); remake the older file with "
                "this sinklab (sinklab bench on that model) and compare the new one, or compare only one of them",
            )


def _agree(a: dict, b: dict) -> bool:
    """Two entries of one task are one result: both measured (or both not applicable) and every
    metric's value and spread within :data:`SAME_VALUE` of each other."""
    if a["not_applicable"] != b["not_applicable"] or a["metrics"].keys() != b["metrics"].keys():
        return False
    pairs = [(a["metrics"][m][k], b["metrics"][m][k]) for m in a["metrics"] for k in ("value", "spread")]
    return all(x == y or _close(x, y) for x, y in pairs)


def _close(x, y) -> bool:
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y))
    return numbers and math.isclose(x, y, rel_tol=SAME_VALUE, abs_tol=1e-9)
