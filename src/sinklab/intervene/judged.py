"""Accuracy as a judge of interventions (``sinklab intervene --accuracy TASKS``): each BIG-bench
task's test split scored intact and with each experiment's interventions applied, by
lm-evaluation-harness on the same examples, compared example by example (:mod:`sinklab.accuracy`).
Does a model need its sink to answer? ``--suppress-sink --accuracy navigate`` says, with a paired test."""

from __future__ import annotations

from typing import Sequence

from ..accuracy import evaluate, lm_for, read_task, sizes_for, verdict
from ..models.subjects import Subject, transformers_model
from .applied import applied


def accuracy_rows(subject: Subject, experiments: Sequence, tasks: Sequence[str], shots: int, test: int) -> list[dict]:
    """Per task and experiment: intact and edited test-split figures (lm-eval's acc, acc_norm, the
    gold answer's log-likelihood) and the paired verdict (McNemar, the changes' 95 % intervals)."""
    loaded = transformers_model(subject)
    lm = lm_for(loaded.model, loaded.tokenizer)
    sizes = sizes_for(shots, test=test)
    rows = []
    for name in tasks:
        task = read_task(name)
        (intact,) = evaluate(lm, [task], "test", shots, sizes)
        for exp in experiments:
            with applied(subject, exp.interventions):
                (edited,) = evaluate(lm, [task], "test", shots, sizes)
            rows.append(
                {
                    "task": task.name,
                    "experiment": exp.label,
                    "chance": task.chance,
                    "intact": intact.row(),
                    "edited": edited.row(),
                    **verdict(intact, edited),
                }
            )
    return rows
