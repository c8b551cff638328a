"""Task accuracy on real data: BIG-bench's multiple-choice tasks (offline, from the ``bigbench``
sdist) scored by lm-evaluation-harness on the user's model object, with the paired statistics
that compare two runs of the same examples. Every judge of accuracy in sinklab reads it: the
tunings (``sinklab tune``), and whatever runs inside a sinklab ``applied`` block."""

from .bigbench import Example, Task, fetch, read_task, tasks_dir
from .harness import Question, Scored, check_bos, evaluate, lm_for, questions
from .paired import above_chance, mcnemar, paired_bootstrap, paired_columns, verdict
from .suite import CANDIDATES, SUITE, clearly_above_chance

#: Split sizes per task: the shot pool, validation (what a tuning reads) and test (the verdict).
SIZES = {"shots": 5, "validation": 40, "test": 100}


def sizes_for(shots: int = 0, validation: int = SIZES["validation"], test: int = SIZES["test"]) -> dict:
    """The splits a judge with ``shots`` shots reads: the shot pool holds at least ``shots``
    examples (5 unless more are asked, which moves the later splits), then validation, then test."""
    return {"shots": max(shots, SIZES["shots"]), "validation": validation, "test": test}


def check_tasks(tasks, shots: int, test: int, tokenizer) -> None:
    """Before a judge runs (and before its run directory is claimed): every task readable and large
    enough for its splits, and a tokenizer with a BOS."""
    for name in tasks:
        read_task(name).splits(0, **sizes_for(shots, test=test))
    if tasks:
        check_bos(tokenizer)


def task_names(text: str) -> tuple[str, ...]:
    """``navigate,snarks`` -> ("navigate", "snarks"): the ``--accuracy`` flags' value."""
    return tuple(t.strip() for t in text.split(",") if t.strip())


__all__ = [
    "CANDIDATES",
    "SIZES",
    "SUITE",
    "Example",
    "Question",
    "Scored",
    "Task",
    "above_chance",
    "check_bos",
    "check_tasks",
    "clearly_above_chance",
    "evaluate",
    "fetch",
    "lm_for",
    "mcnemar",
    "paired_bootstrap",
    "paired_columns",
    "questions",
    "read_task",
    "sizes_for",
    "task_names",
    "tasks_dir",
    "verdict",
]
