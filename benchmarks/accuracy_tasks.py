"""The default model's accuracy on BIG-bench's multiple-choice tasks, through lm-eval (BENCHMARKS.md 13).

Every task of ``sinklab.accuracy.CANDIDATES`` (or ``--tasks``), zero-shot and with
``--shots`` shots from the task's own examples, on the seeded validation split (the 40 examples a
tuning reads; the suite is chosen on them so that the test split's verdicts are not biased):
acc, acc_norm and their standard errors as lm-eval reports them, the chance level, the correct
choice's mean log-likelihood, the exact one-sided binomial p against chance and whether the
suite rule (``clearly_above_chance``) keeps the task. One row per task and shot count in
``results/accuracy_tasks.jsonl``.

Run: `.venv/bin/python benchmarks/accuracy_tasks.py [--shots 2] [--zero-shot-only | --few-shot-only]` (the BIG-bench
task files are fetched once on first use).
"""

from __future__ import annotations

import argparse
import time

from common import record

from sinklab.accuracy import CANDIDATES, above_chance, clearly_above_chance, evaluate, lm_for, read_task, sizes_for
from sinklab.core.progress import progress_bar
from sinklab.models.hf import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=",".join(CANDIDATES), help="BIG-bench task names (default: the candidates)")
    parser.add_argument("--shots", type=int, default=2, help="the few-shot setting measured beside zero-shot (default 2)")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--zero-shot-only", action="store_true", help="measure zero-shot only")
    only.add_argument("--few-shot-only", action="store_true", help="measure with --shots only (zero-shot measured before)")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    loaded = load_model(None)
    lm = lm_for(loaded.model, loaded.tokenizer, args.batch_size)
    sizes = sizes_for(args.shots)
    for name in progress_bar(args.tasks.split(","), desc="tasks", unit="task"):
        task = read_task(name)
        for shots in (0,) if args.zero_shot_only else (args.shots,) if args.few_shot_only else (0, args.shots):
            start = time.perf_counter()
            (scored,) = evaluate(lm, [task], "validation", shots, sizes, rotations=1)  # the earlier rule's one order
            row = scored.row()
            row.update(
                model=loaded.name,
                examples_in_task=len(task.examples),
                p_above_chance=above_chance(scored.correct, scored.chance),
                in_suite=clearly_above_chance(scored),
                seconds=round(time.perf_counter() - start, 2),
            )
            record("accuracy_tasks", row)


if __name__ == "__main__":
    main()
