"""Task accuracy on real data: BIG-bench's multiple-choice tasks (offline, from the ``bigbench``
sdist) scored by lm-evaluation-harness on the user's model object, with the paired statistics
that compare two runs of the same examples. Every judge of accuracy in sinklab reads it: the
tunings (``sinklab tune``), and whatever runs inside a sinklab ``applied`` block."""

from .bigbench import Example, Task, candidates, fetch, read_task, tasks_dir
from .harness import Question, Scored, check_bos, evaluate, lm_for, questions
from .paired import above_chance, mcnemar, paired_bootstrap, verdict

#: Split sizes per task: the shot pool, validation (what a tuning reads) and test (the verdict).
SIZES = {"shots": 5, "validation": 40, "test": 100}

__all__ = [
    "SIZES",
    "Example",
    "Question",
    "Scored",
    "Task",
    "above_chance",
    "candidates",
    "check_bos",
    "evaluate",
    "fetch",
    "lm_for",
    "mcnemar",
    "paired_bootstrap",
    "questions",
    "read_task",
    "tasks_dir",
    "verdict",
]
