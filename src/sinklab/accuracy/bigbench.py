"""BIG-bench's multiple-choice JSON tasks, offline: where the task files come from, what a task
file must hold, how an example becomes a prompt, and the seeded splits every judge reads.

The task files ship in the PyPI sdist ``bigbench`` 1.0.0 (about 360 MB, 1,041 ``task.json``
files). :func:`fetch` downloads it once with pip and keeps only the task files under
``$SINKLAB_CACHE/bigbench`` (``make bigbench`` runs it; the first command that names a task by
name runs it too); the test suite never downloads it (its tests write their own task files).
``$SINKLAB_BIGBENCH`` points at another folder of ``<name>/task.json`` files instead.

The prompt follows BIG-bench's JSON-task convention (``bigbench/api/json_task.py``): the task's
``task_prefix`` once, then per example ``example_input_prefix`` + input (+ the choices after
``choice_prefix`` where ``append_choices_to_input``, the default) + ``example_output_prefix``;
shots are whole examples with their correct choice, joined by ``few_shot_example_separator``.
Defaults are BIG-bench's (``"\\nQ: "``, ``"\\nA: "``, ``"\\n  choice: "``, ``"\\n"``). The
choices are listed sorted and then permuted, as BIG-bench lists them (many files store the correct
answer first: a prompt in file order would give its position away), here by a permutation seeded
per example. Repeated examples (the same input and scores) are kept once, as lm-eval's BIG-bench
tasks did, so that no example sits in two splits.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import SinklabError, check
from ..models.hf import cache_root

SDIST = "bigbench==1.0.0"
#: BIG-bench's defaults for a JSON task's formatting fields.
FORMAT_DEFAULTS = {
    "task_prefix": "",
    "example_input_prefix": "\nQ: ",
    "example_output_prefix": "\nA: ",
    "choice_prefix": "\n  choice: ",
    "append_choices_to_input": True,
    "few_shot_example_separator": "\n",
}


def tasks_dir() -> Path:
    """The folder of ``<name>/task.json`` files: ``$SINKLAB_BIGBENCH``, else the cache."""
    return Path(os.environ.get("SINKLAB_BIGBENCH") or cache_root() / "bigbench")


def fetch(quiet: bool = False) -> Path:
    """The BIG-bench task files, downloaded once (pip, the ``bigbench`` sdist) and extracted into
    :func:`tasks_dir`; the download is discarded, only ``task.json`` files are kept. Atomic: a
    failed or interrupted fetch leaves no half folder behind."""
    target = tasks_dir()
    if (target / ".complete").exists():
        return target
    check(
        not os.environ.get("SINKLAB_BIGBENCH"),
        f"$SINKLAB_BIGBENCH={target} holds no finished set of task files (no .complete marker); "
        "point it at a folder of <name>/task.json files or unset it",
    )
    if not quiet:
        print(f"sinklab: fetching BIG-bench's task files ({SDIST}, about 360 MB) into {target} (once)", file=sys.stderr)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".bigbench-") as tmp:
        download = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d", tmp, SDIST],
            capture_output=True,
            text=True,
        )
        archives = sorted(Path(tmp).glob("bigbench-*.tar.gz"))
        if download.returncode != 0 or not archives:
            last = (download.stderr.strip().splitlines() or ["no archive"])[-1]
            raise SinklabError(f"could not download {SDIST} with pip: {last}")
        staged = Path(tmp) / "tasks"
        _extract_task_files(archives[0], staged)
        (staged / ".complete").write_text(SDIST + "\n")
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)
    return target


def _extract_task_files(archive: Path, into: Path) -> None:
    """Every ``benchmark_tasks/<name>[/<subtask>]/task.json`` of the sdist, as ``into/<name>[/<subtask>]/task.json``."""
    marker = "/benchmark_tasks/"
    with tarfile.open(archive) as tar:
        for member in tar:
            if not (member.isfile() and member.name.endswith("/task.json") and marker in member.name):
                continue
            relative = Path(member.name.split(marker, 1)[1])
            check(".." not in relative.parts, f"unsafe path in {archive.name}: {member.name}")
            (into / relative.parent).mkdir(parents=True, exist_ok=True)
            with tar.extractfile(member) as src, open(into / relative, "wb") as dst:
                shutil.copyfileobj(src, dst)


@dataclass(frozen=True)
class Example:
    """One multiple-choice example: the prompt's query part, its choices, the correct one."""

    query: str  # input prefix + input (+ choices) + output prefix
    choices: tuple[str, ...]
    gold: int

    def as_doc(self) -> dict:
        """The row lm-evaluation-harness reads (``doc_to_text``, ``doc_to_choice``, ``doc_to_target``)."""
        return {"query": self.query, "choices": list(self.choices), "gold": self.gold}


@dataclass(frozen=True)
class Task:
    """A BIG-bench multiple-choice task, read and checked."""

    name: str
    path: Path
    prefix: str  # the task_prefix, said once before the shots
    separator: str  # between shots and the query
    examples: tuple[Example, ...]

    @property
    def chance(self) -> float:
        """The accuracy of a uniform guess, averaged over the examples (1 / choices each)."""
        return sum(1.0 / len(e.choices) for e in self.examples) / len(self.examples)

    def splits(self, seed: int, shots: int, validation: int, test: int) -> dict[str, list[Example]]:
        """Fixed seeded splits, disjoint: ``train`` (the pool shots are drawn from), ``validation``
        (what a tuning reads) and ``test`` (the verdict). A task too small for them is refused."""
        need = shots + validation + test
        check(
            len(self.examples) >= need,
            f"BIG-bench task {self.name!r} has {len(self.examples)} usable examples; its splits need {need}: "
            f"{shots} for the shot pool, {validation} validation (held out by every judge, so that their test "
            f"splits are the same examples) and {test} test",
        )
        order = list(self.examples)
        random.Random(seed).shuffle(order)
        return {"train": order[:shots], "validation": order[shots : shots + validation], "test": order[shots + validation : need]}


def task_file(name_or_path: str) -> Path:
    """A task's JSON file from its BIG-bench name (``navigate``, ``abstract_narrative_understanding/4_distractors``)
    or a path to a ``task.json``; names fetch the task files on first use."""
    given = Path(name_or_path)
    if given.suffix == ".json":
        check(given.is_file(), f"no task file at {given}")
        return given
    check(".." not in given.parts and not given.is_absolute(), f"not a BIG-bench task name: {name_or_path!r}")
    root = fetch()
    path = root / given / "task.json"
    if not path.is_file():
        near = sorted(p.parent.name for p in root.glob("*/task.json") if p.parent.name.startswith(name_or_path[:3]))[:5]
        raise SinklabError(
            f"no BIG-bench task named {name_or_path!r} in {root}" + (f" (similar: {', '.join(near)})" if near else "")
        )
    return path


def read_task(name_or_path: str) -> Task:
    """A multiple-choice task: every example has ``input`` and ``target_scores`` with one best choice."""
    path = task_file(name_or_path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SinklabError(f"{path} is not a readable JSON task file: {exc}") from None
    where = f"{path} is not a BIG-bench multiple-choice task"
    check(isinstance(data, dict) and isinstance(data.get("examples"), list) and data["examples"], f"{where}: no 'examples' list")
    fields = {key: data.get(key, default) for key, default in FORMAT_DEFAULTS.items()}
    check(all(isinstance(e, dict) for e in data["examples"]), f"{where}: an example is not a JSON object")
    unique = {json.dumps([e.get("input"), e.get("target_scores")], sort_keys=True): e for e in data["examples"]}
    name = str(data.get("name") or path.parent.name)
    examples = tuple(_example(e, i, fields, where, f"{name}:{i}") for i, e in enumerate(unique.values()))
    return Task(name, path, str(fields["task_prefix"]), str(fields["few_shot_example_separator"]), examples)


def _example(raw, index: int, fields: dict, where: str, seed: str) -> Example:
    check(isinstance(raw, dict) and isinstance(raw.get("input"), str), f"{where}: example {index} has no 'input' text")
    scores = raw.get("target_scores")
    check(
        isinstance(scores, dict) and len(scores) >= 2 and all(isinstance(v, (int, float)) for v in scores.values()),
        f"{where}: example {index} has no 'target_scores' with two or more scored choices",
    )
    choices = sorted(str(c) for c in scores)
    random.Random(seed).shuffle(choices)
    best = max(scores.values())
    winners = [i for i, c in enumerate(choices) if scores[c] == best]
    check(len(winners) == 1, f"{where}: example {index} has {len(winners)} best choices (one correct answer is needed)")
    query = fields["example_input_prefix"] + raw["input"]
    if fields["append_choices_to_input"]:
        query += fields["choice_prefix"] + fields["choice_prefix"].join(choices)
    return Example(query + fields["example_output_prefix"], tuple(choices), winners[0])
