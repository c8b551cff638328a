"""Task accuracy on real data: BIG-bench's multiple-choice tasks (offline, from the ``bigbench``
sdist) scored by lm-evaluation-harness on the user's model object, with the paired statistics
that compare two runs of the same examples. Every judge of accuracy in sinklab reads it: the
tunings (``sinklab tune``), and whatever runs inside a sinklab ``applied`` block."""

from ..core.errors import check
from .bigbench import Example, Task, fetch, read_task, tasks_dir
from .harness import Question, Scored, check_bos, evaluate, lm_for, longest_request, questions
from .paired import above_chance, mcnemar, paired_bootstrap, paired_columns, verdict, verdict_columns
from .suite import CANDIDATES, SUITE, clearly_above_chance

#: Split sizes per task: the shot pool, validation (what a tuning reads) and test (the verdict).
SIZES = {"shots": 5, "validation": 40, "test": 100}


def sizes_for(shots: int = 0, validation: int = SIZES["validation"], test: int = SIZES["test"]) -> dict:
    """The splits a judge with ``shots`` shots reads: the shot pool holds at least ``shots``
    examples (5 unless more are asked, which moves the later splits), then validation, then test."""
    return {"shots": max(shots, SIZES["shots"]), "validation": validation, "test": test}


def check_tasks(tasks, tokenizer, sizes: dict, seed: int = 0) -> list[Task]:
    """Before a judge runs (and before its run directory is claimed): every task readable, large
    enough for ``sizes`` (:func:`sizes_for`) and named once (a task's figures and files are named
    after it: a second task of the same name would overwrite the first), and a tokenizer with a BOS.
    Returns the tasks read."""
    read = [read_task(given) for given in tasks]
    for task in read:
        task.splits(seed, **sizes)
    names = [task.name for task in read]
    twice = sorted({n for n in names if names.count(n) > 1})
    check(not twice, f"the tasks name {', '.join(twice)} twice (a task's figures and files are named after it)")
    if tasks:
        check_bos(tokenizer)
    return read


def check_judge_flags(shots: int, test: int, bos: str, min_shots: int = 0, shots_flag: str = "--accuracy-shots") -> None:
    """A run's ``--accuracy`` settings, as one-line errors: the shots and test examples it asks
    for, and a BOS first (lm-eval's judge puts it first everywhere in sinklab, so a run whose other
    measures go without it would judge two different sequences)."""
    why = ": the shots are the context a press compresses" if min_shots else ""
    check(shots >= min_shots, f"{shots_flag} must be at least {min_shots}{why}, got {shots}")
    check(test >= 1, f"--accuracy-test must be at least 1, got {test}")
    check(bos != "no", "--accuracy puts the tokenizer's BOS first, as lm-eval's judge does everywhere in sinklab: drop --bos no")


def check_prompts_fit(
    tasks: list[Task], tokenizer, shots: int, sizes: dict, max_positions, splits=("test",), seed=0, shots_flag="--accuracy-shots"
) -> None:
    """Every judged split's longest prompt with its longest choice within the model's positions
    (``max_positions``; None: no limit known). lm-eval would cut a longer one from the left, BOS
    first, and the judge would score a prompt other than the one it reads."""
    if max_positions is None:
        return
    for task in tasks:
        longest = max(longest_request(task, tokenizer, split, shots, sizes, seed) for split in splits)
        remedy = f"give fewer {shots_flag}" if shots else "the task does not fit this model"
        check(
            longest <= max_positions,
            f"{task.name}: its longest {shots}-shot prompt and choice is {longest} tokens and the model has "
            f"{max_positions} positions; {remedy}",
        )


def task_names(given) -> tuple[str, ...]:
    """``navigate,snarks`` (the ``--accuracy`` and ``--tasks`` flags' value) or a sequence of names
    -> ("navigate", "snarks"); ``suite`` stands for the suite's tasks (:data:`SUITE`), in its place."""
    named = given.split(",") if isinstance(given, str) else [str(name) for name in given]
    return tuple(task for name in (n.strip() for n in named) if name for task in (SUITE if name == "suite" else (name,)))


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
    "check_judge_flags",
    "check_prompts_fit",
    "check_tasks",
    "clearly_above_chance",
    "evaluate",
    "fetch",
    "lm_for",
    "longest_request",
    "mcnemar",
    "paired_bootstrap",
    "paired_columns",
    "questions",
    "read_task",
    "sizes_for",
    "task_names",
    "tasks_dir",
    "verdict",
    "verdict_columns",
]
