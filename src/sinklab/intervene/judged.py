"""Accuracy as a judge of interventions (``sinklab intervene --accuracy TASKS``): each BIG-bench
task's test split scored intact and with each experiment's interventions applied, by
lm-evaluation-harness on the same examples, compared example by example (:mod:`sinklab.accuracy`).
Does a model need its sink to answer? ``--suppress-sink --accuracy navigate`` says, with a paired test.

The run directory holds the scores in lm-eval's own files too (:mod:`sinklab.accuracy.lm_eval_files`):
``lm_eval_results.json``, whose entries are ``<task>|intact`` and ``<task>|<the experiment's label>``
(a label given twice numbered ``#2``), and each entry's per-example ``samples_<task>_<run>.jsonl``."""

from __future__ import annotations

from typing import Sequence

from ..accuracy import Judged, LmEvalFiles, evaluate, lm_for, numbered, read_task, verdict
from ..models.subjects import Subject, transformers_model
from .hooked import _hooked


def judge_accuracy(subject: Subject, experiments: Sequence, cfg) -> tuple[list[dict], LmEvalFiles]:
    """Per ``--accuracy`` task of ``cfg`` (an :class:`~.run.InterveneConfig`) and experiment: intact
    and edited test-split figures (lm-eval's, each example asked under ``accuracy_rotations`` orders
    of its choices) and the paired verdict (:func:`~sinklab.accuracy.verdict`); and every scored
    run as lm-eval's files hold it."""
    loaded = transformers_model(subject)
    # an edit that reads each request's prompt rows (ACT) needs one request a forward: lm-eval pads a batch
    one_at_a_time = any(getattr(i, "reads_prompt_rows", False) for exp in experiments for i in exp.interventions)
    lm = lm_for(loaded.model, loaded.tokenizer, 1 if one_at_a_time else 8)
    judged = dict(split="test", shots=cfg.accuracy_shots, sizes=cfg.accuracy_sizes, rotations=cfg.accuracy_rotations)
    rows, runs, named = [], [], numbered([exp.label for exp in experiments])
    for name in cfg.accuracy:
        task = read_task(name)
        (intact,) = evaluate(lm, [task], **judged)
        runs.append(Judged(task.name, "intact", intact))
        for exp, run in zip(experiments, named):
            with _hooked(subject, exp.interventions):
                (edited,) = evaluate(lm, [task], **judged)
            runs.append(Judged(task.name, run, edited))
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
    return rows, LmEvalFiles(tuple(runs), subject.name, 0, cfg.accuracy_rotations, cfg.splits)
