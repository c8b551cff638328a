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
by the example's own input and scores (the same order whatever the task is named). Repeated
examples (the same input and scores) are kept once, as lm-eval's BIG-bench
tasks did, so that no example sits in two splits.
"""

from __future__ import annotations

import json
import os
import random
import re
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


def check_seed(seed, flag: str = "--seed") -> None:
    """Refuse a seed the splits and the paired statistics cannot use alike, in one line: Python's
    ``random`` takes a negative seed as its absolute value (-1 would draw seed 1's splits) and
    numpy's generators refuse it (a traceback after the whole run)."""
    check(
        isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0,
        f"{flag} must be a whole number, at least 0, got {seed!r}",
    )


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
            source = tar.extractfile(member)
            if source is None:
                raise SinklabError(f"{member.name} in {archive.name} cannot be read")
            with source as src, open(into / relative, "wb") as dst:
                shutil.copyfileobj(src, dst)


@dataclass(frozen=True)
class Example:
    """One multiple-choice example: its choices in the order they are listed, the correct one, and
    what the query is made of (the input, the choices listed after ``listing`` where the task lists
    them, the output prefix), so that the same example can be asked with its choices in another order."""

    stem: str  # input prefix + input
    choices: tuple[str, ...]
    gold: int
    listing: str | None  # the choice prefix, when the prompt lists the choices (append_choices_to_input)
    answer_prefix: str  # the output prefix, which ends the query

    @property
    def query(self) -> str:
        """Input prefix + input (+ the choices, in this order) + output prefix."""
        listed = self.listing + self.listing.join(self.choices) if self.listing is not None else ""
        return self.stem + listed + self.answer_prefix

    def rotated(self, shift: int) -> "Example":
        """The example with its listed choices rotated left by ``shift`` (the choice listed at
        position ``shift`` comes first), the correct one followed."""
        n = len(self.choices)
        choices = self.choices[shift % n :] + self.choices[: shift % n]
        return Example(self.stem, choices, (self.gold - shift) % n, self.listing, self.answer_prefix)

    def as_doc(self) -> dict:
        """The row lm-evaluation-harness reads (``doc_to_text``, ``doc_to_choice``, ``doc_to_target``)."""
        return {"query": self.query, "choices": list(self.choices), "gold": self.gold}


@dataclass(frozen=True)
class AccuracyTask:
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
        """Fixed seeded splits, disjoint, from one shuffle of the examples by ``seed``: ``test`` (the
        verdict) from the front, ``validation`` (what a tuning reads) after it, and ``train`` (the
        pool of ``shots`` examples the shots are drawn from) from the back. So the test examples are
        fixed by the seed alone, whatever the validation and shot counts (a larger test split holds
        a smaller one), and every judge of every command reads the same test examples for the same
        seed. A task too small for the three is refused."""
        check_seed(seed)
        check(
            min(shots, validation, test) >= 0 and test >= 1,
            f"split sizes must be >= 0 (test >= 1), got {shots} shots, {validation} validation, {test} test",
        )
        need = shots + validation + test
        parts = [f"{test} test", f"{validation} validation" if validation else "", f"{shots} for the shot pool" if shots else ""]
        check(
            len(self.examples) >= need,
            f"BIG-bench task {self.name!r} has {len(self.examples)} usable examples; its splits need {need}: "
            + ", ".join(part for part in parts if part),
        )
        order = list(self.examples)
        random.Random(seed).shuffle(order)
        pool = order[len(order) - shots :] if shots else []
        return {"test": order[:test], "validation": order[test : test + validation], "train": pool}


#: What a task may be named: its name titles tables and names files (``tuning-<name>.json``).
TASK_NAME = re.compile(r"[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)*")


def task_file(name_or_path: str) -> Path:
    """A task's JSON file from its BIG-bench name (``navigate``, ``abstract_narrative_understanding/4_distractors``)
    or a path to a JSON task file (``PATH.json:NAME`` names it); names fetch the task files on first use."""
    given = Path(_split_name(name_or_path)[0])
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


def _split_name(given: str) -> tuple[str, str | None]:
    """``PATH.json:NAME`` -> (PATH.json, NAME); anything else -> (it, None)."""
    path, sep, name = given.rpartition(":")
    return (path, name) if sep and path.endswith(".json") else (given, None)


def task_name(given: str, path: Path, data: dict) -> str:
    """The name a task goes by: ``NAME`` of ``PATH.json:NAME``; for a user's file its file name
    (``subset.json`` -> ``subset``), or its folder's for a ``task.json`` (``navigate/task.json`` ->
    ``navigate``), so two files of one folder, or two copies of one task, are told apart; for a
    BIG-bench name, the task file's own ``name``."""
    path_text, named = _split_name(given)
    if named is None and Path(path_text).suffix != ".json":
        return str(data.get("name") or path.parent.name)
    name = named if named is not None else (path.stem if path.name != "task.json" else path.parent.name)
    check(
        bool(TASK_NAME.fullmatch(name)),
        f"{given}: the task name {name!r} is not letters, digits, _ and - (name it: {path_text}:NAME)",
    )
    return name


def read_task(name_or_path: str) -> AccuracyTask:
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
    name = task_name(name_or_path, path, data)
    # the listed order is seeded by the example itself: a task renamed or copied lists its choices alike
    examples = tuple(_example(e, i, fields, where, key) for i, (key, e) in enumerate(unique.items()))
    return AccuracyTask(name, path, str(fields["task_prefix"]), str(fields["few_shot_example_separator"]), examples)


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
    listing = str(fields["choice_prefix"]) if fields["append_choices_to_input"] else None
    stem = fields["example_input_prefix"] + raw["input"]
    return Example(stem, tuple(choices), winners[0], listing, str(fields["example_output_prefix"]))
