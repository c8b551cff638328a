"""Task accuracy on real data: BIG-bench's multiple-choice tasks (offline, from the ``bigbench``
sdist) scored by lm-evaluation-harness on the user's model object, with the paired statistics
that compare two runs of the same examples. Every judge of accuracy in sinklab reads it: the
tunings (``sinklab tune``), and whatever runs inside a sinklab ``applied`` block. A judge's run
directory holds its scores in lm-eval's own layout too (:mod:`.lm_eval_files`)."""

from ..core.configs import setting
from ..core.errors import check
from .bigbench import AccuracyTask, Example, check_seed, fetch, read_task, tasks_dir
from .harness import Question, check_bos, evaluate, lm_for, longest_request, questions
from .lm_eval_files import RESULTS_FILE as LM_EVAL_RESULTS
from .lm_eval_files import Judged, LmEvalFiles, lm_eval_version, numbered
from .paired import above_chance, mcnemar, paired_bootstrap, paired_columns, verdict, verdict_columns
from .rotations import EVERY, ROTATIONS_HELP, check_rotations
from .scored import Scored, TaskOutput
from .suite import CANDIDATES, SUITE, clearly_above_chance

#: Split sizes per task: the shot pool, validation (what a tuning reads) and test (the verdict).
SIZES = {"shots": 5, "validation": 40, "test": 100}
#: The rule that draws a task's splits (:meth:`~.bigbench.AccuracyTask.splits`) and lists its choices, a
#: setting of every judge's config.json so that a run judged under an earlier rule is not taken for
#: today's: 1 put the shot pool first (the test examples moved with the shot and validation counts)
#: and permuted the choices by the task's name and the example's index; 2 draws the test examples
#: first and permutes the choices by the example's own content.
SPLIT_RULE = 2


def split_rule_setting():
    """The ``splits`` field of a config that judges accuracy (not a flag: the rule is sinklab's)."""
    return setting(SPLIT_RULE, cli=False, help="the rule that drew the splits (2: test first, fixed by the seed)")


def migrated_judge(saved: dict, tasks_key: str = "accuracy", rotations_key: str = "accuracy_rotations") -> dict:
    """A config.json from before the split rule and the rotations were recorded: where it judged
    accuracy (tasks under ``tasks_key``), split rule 1 and one order of the choices, what it ran;
    else today's defaults (it drew no split and asked no choice)."""
    judged = bool(saved.get(tasks_key))
    return {**saved, "splits": 1 if judged else SPLIT_RULE, rotations_key: 1 if judged else EVERY}


def sizes_for(shots: int = 0, validation: int = SIZES["validation"], test: int = SIZES["test"]) -> dict:
    """The splits a judge with ``shots`` shots reads (:meth:`~.bigbench.AccuracyTask.splits`): test, then
    validation, and a shot pool of at least ``shots`` examples (5 unless more are asked) from the
    other end of the shuffled examples, so neither the shots nor the validation count moves the test
    examples."""
    return {"shots": max(shots, SIZES["shots"]), "validation": validation, "test": test}


def check_tasks(tasks, tokenizer, sizes: dict, seed: int = 0) -> list[AccuracyTask]:
    """Before a judge runs (and before its run directory is claimed): every task readable, large
    enough for ``sizes`` (:func:`sizes_for`) and named once (a task's figures and files are named
    after it: a second task of the same name would overwrite the first), and a tokenizer with a BOS.
    Returns the tasks read."""
    read = [read_task(given) for given in tasks]
    for task in read:
        task.splits(seed, **sizes)
    names = [task.name for task in read]
    twice = sorted({n for n in names if names.count(n) > 1})
    check(
        not twice,
        f"the tasks name {', '.join(twice)} twice (a task's figures and files are named after it): "
        "name each task file with PATH.json:NAME",
    )
    if tasks:
        check_bos(tokenizer)
    return read


def check_judge_flags(shots: int, test: int, bos: str, min_shots: int = 0, shots_flag: str = "--accuracy-shots") -> None:
    """A run's ``--accuracy`` settings, as one-line errors: the shots and test examples it asks
    for, and a BOS first (lm-eval's judge puts it first everywhere in sinklab, so a run whose other
    measures go without it would judge two different sequences)."""
    why = ": the shots are the context a press compresses" if min_shots else ""
    check(shots >= min_shots, f"{shots_flag} must be at least {min_shots}{why}, got {shots}")
    check(test >= 2, f"--accuracy-test must be at least 2 (a standard error and a paired test need two examples), got {test}")
    check(bos != "no", "--accuracy puts the tokenizer's BOS first, as lm-eval's judge does everywhere in sinklab: drop --bos no")


def check_prompts_fit(
    tasks: list[AccuracyTask],
    tokenizer,
    shots: int,
    sizes: dict,
    max_positions,
    splits=("test",),
    seed=0,
    shots_flag="--accuracy-shots",
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
    "EVERY",
    "ROTATIONS_HELP",
    "CANDIDATES",
    "LM_EVAL_RESULTS",
    "SIZES",
    "SPLIT_RULE",
    "SUITE",
    "Example",
    "Judged",
    "LmEvalFiles",
    "Question",
    "Scored",
    "AccuracyTask",
    "TaskOutput",
    "above_chance",
    "check_bos",
    "check_judge_flags",
    "check_prompts_fit",
    "check_rotations",
    "check_seed",
    "check_tasks",
    "clearly_above_chance",
    "evaluate",
    "fetch",
    "lm_eval_version",
    "lm_for",
    "migrated_judge",
    "longest_request",
    "mcnemar",
    "numbered",
    "paired_bootstrap",
    "paired_columns",
    "questions",
    "read_task",
    "sizes_for",
    "split_rule_setting",
    "task_names",
    "tasks_dir",
    "verdict",
    "verdict_columns",
]
