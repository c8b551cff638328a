"""The accuracy suite screened on enough data (issue 50; BENCHMARKS.md 13).

Every task of ``sinklab.accuracy.CANDIDATES`` (or ``--tasks``) is scored zero-shot (or with
``--shots``) by lm-eval on the default model, each example under every cyclic order of its listed
choices, on up to ``--examples`` (1,000) examples outside the seeded test split (all of them where
fewer; at least ``SELECTION``, 200, where the task has them; ``--examples-for TASK=N`` scores fewer,
never under ``SELECTION``, for a task whose examples are long): the rotation-averaged accuracy with its
95 % t interval, the strict accuracy, the position bias, and the suite rule
(``sinklab.accuracy.suite.screen``: one-sided t-test against chance, Holm's correction over every
candidate screened, the margin). Each kept task is then scored on its test split
(``confirmed``). One row per task screened, one per task confirmed (``split: test``, with its
one-sided p, chance, interval and per-example scores) and one for the screen in
``results/suite_screen.jsonl``; the task rows hold their wall and CPU time. ``--confirm-only TASKS``
scores only the named tasks' test splits (their rows, no screen).

Resumable: each task's scores are kept under ``runs/suite_screen/<commit>/`` as they finish, one
file per task, shots and example count, and a run of the same commit scores only what is not kept.

Run: `.venv/bin/python benchmarks/suite_screen.py [--shots 0] [--examples 1000]` (the BIG-bench task
files are fetched once on first use). Hours on 2 CPU cores for the 24 candidates.
"""

from __future__ import annotations

import argparse
import json
import time

from common import REVISION, RUNS, record

from sinklab.accuracy import CANDIDATES, SIZES, evaluate, lm_for, read_task, sizes_for
from sinklab.accuracy.scored import Scored
from sinklab.accuracy.suite import REPORTED, SELECTION, above_chance_t, confirmed, interval, screen
from sinklab.core.atomic import write_json
from sinklab.core.progress import progress_bar
from sinklab.models.hf import load_model


def examples_for(overrides: list[str], default: int) -> dict[str, int]:
    """``TASK=N`` pairs as a dict; a count under ``SELECTION`` is refused (the issue's floor), and so
    is a ``default`` (``--examples``) under it."""
    if default < SELECTION:
        raise SystemExit(f"--examples must be at least {SELECTION}; got {default}")
    counts = {}
    for pair in overrides:
        name, _, count = pair.partition("=")
        if not count.isdigit() or int(count) < SELECTION:
            raise SystemExit(f"--examples-for takes TASK=N with N >= {SELECTION}; got {pair!r}")
        counts[name] = int(count)
    return counts


def scored_row(scored: Scored, model: str, **extra) -> dict:
    """A task's row: lm-eval's figures, the position bias, the per-example scores and ``extra``."""
    return {
        **scored.row(),
        "model": model,
        "acc_by_position": scored.acc_by_position,
        "picks_by_position": scored.picks_by_position,
        "score": scored.score,
        **extra,
    }


def confirm(lm, task, shots: int, model: str) -> Scored:
    """Score ``task``'s test split and record it with the one-sided t-test the suite rule reads."""
    wall, cpu = time.perf_counter(), time.process_time()
    (test,) = evaluate(lm, [task], "test", shots, sizes_for(shots, 0))
    low, high = interval(test)
    timing = {"wall_s": round(time.perf_counter() - wall, 1), "cpu_s": round(time.process_time() - cpu, 1)}
    extra = {"p": above_chance_t(test), "acc_low": low, "acc_high": high, "confirmed": confirmed(test), **timing}
    record("suite_screen", scored_row(test, model, **extra))
    return test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=",".join(CANDIDATES), help="BIG-bench task names (default: the candidates)")
    parser.add_argument("--shots", type=int, default=0)
    parser.add_argument("--examples", type=int, default=REPORTED, help="the most examples scored outside the test split")
    parser.add_argument(
        "--examples-for",
        action="append",
        default=[],
        metavar="TASK=N",
        help=f"fewer examples for one task (at least {SELECTION}); repeatable",
    )
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--confirm-only", metavar="TASKS", help="only score these tasks' test splits (comma-separated)")
    args = parser.parse_args()
    counts = examples_for(args.examples_for, args.examples)
    loaded = load_model(None)
    lm = lm_for(loaded.model, loaded.tokenizer, args.batch_size)
    if args.confirm_only:
        for name in progress_bar(args.confirm_only.split(","), desc="confirming", unit="task"):
            confirm(lm, read_task(name), args.shots, loaded.name)
        return
    pool = max(args.shots, SIZES["shots"])
    kept = RUNS / "suite_screen" / REVISION / f"shots{args.shots}"
    kept.mkdir(parents=True, exist_ok=True)
    selected, tasks = [], {}
    for name in progress_bar(args.tasks.split(","), desc="screening", unit="task"):
        task = tasks[name] = read_task(name)
        wanted = counts.get(name, args.examples)
        cached = kept / f"{name}-examples{wanted}.json"
        if cached.exists():  # scored by an earlier run of this commit and settings
            selected.append(Scored.from_record(json.loads(cached.read_text())))
            continue
        outside = min(wanted, len(task.examples) - SIZES["test"] - pool)
        wall, cpu = time.perf_counter(), time.process_time()
        (scored,) = evaluate(lm, [task], "validation", args.shots, sizes_for(args.shots, outside))
        selected.append(scored)
        write_json(cached, scored.record())
        timing = {"wall_s": round(time.perf_counter() - wall, 1), "cpu_s": round(time.process_time() - cpu, 1)}
        record("suite_screen", scored_row(scored, loaded.name, examples_in_task=len(task.examples), **timing))
    rows = screen(selected)
    for row in rows:
        if row["kept"]:
            test = confirm(lm, tasks[row["task"]], args.shots, loaded.name)
            row.update(test_acc=test.acc, test_n=test.n, confirmed=confirmed(test))
    record("suite_screen", {"model": loaded.name, "shots": args.shots, "screen": rows})


if __name__ == "__main__":
    main()
