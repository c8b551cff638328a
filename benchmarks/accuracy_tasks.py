"""The default model's accuracy on BIG-bench's multiple-choice tasks, through lm-eval (BENCHMARKS.md 13).

Every task of ``sinklab.accuracy.suite.CANDIDATES`` (or ``--tasks``), zero-shot and with
``--shots`` shots from the task's own examples, on the seeded test split (``--test`` examples):
acc, acc_norm and their standard errors as lm-eval reports them, the chance level, the correct
choice's mean log-likelihood, the exact one-sided binomial p against chance and whether the
suite rule (``clearly_above_chance``) keeps the task. One row per task and shot count in
``results/accuracy_tasks.jsonl``.

Run: `.venv/bin/python benchmarks/accuracy_tasks.py [--shots 3 --test 40]` (the BIG-bench task
files are fetched once on first use; about 45 minutes on 2 CPU cores at the defaults).
"""

from __future__ import annotations

import argparse
import time

from common import record

from sinklab.accuracy import SIZES, above_chance, evaluate, lm_for, read_task
from sinklab.accuracy.suite import CANDIDATES, clearly_above_chance
from sinklab.core.progress import progress_bar
from sinklab.models.hf import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=",".join(CANDIDATES), help="BIG-bench task names (default: the candidates)")
    parser.add_argument("--shots", type=int, default=3, help="the few-shot setting measured beside zero-shot (default 3)")
    parser.add_argument("--test", type=int, default=40, help="test examples per task (default 40)")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    loaded = load_model(None)
    lm = lm_for(loaded.model, loaded.tokenizer, args.batch_size)
    sizes = {**SIZES, "test": args.test}
    for name in progress_bar(args.tasks.split(","), desc="tasks", unit="task"):
        task = read_task(name)
        for shots in (0, args.shots):
            start = time.perf_counter()
            (scored,) = evaluate(lm, [task], "test", shots, sizes)
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
