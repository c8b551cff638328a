"""Wall time of the paper reproduction, `sinklab trigger --paper`, from scratch.

There is no reference time in this script: the paper's code is not part of this repository, so a
speed-up can only be quoted from a side-by-side measurement made elsewhere. BENCHMARKS.md states
the one we have, with its source and date.

Run: `.venv/bin/python benchmarks/trigger_paper.py [--seeds 0]` (the run directory is emptied first,
so nothing is resumed)
"""

from __future__ import annotations

import argparse
import shutil
import time

from common import RUNS, record

from sinklab.core.jobs import default_workers
from sinklab.trigger import TriggerConfig, paper_configs, run_lab


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--out", default=str(RUNS / "trigger-paper"))
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    configs = paper_configs(seeds, TriggerConfig())
    shutil.rmtree(args.out, ignore_errors=True)
    start = time.perf_counter()
    summary = run_lab(configs, args.out, workers=args.workers).summary
    seconds = time.perf_counter() - start
    record(
        "trigger_paper",
        {
            "seeds": seeds,
            "workers": args.workers or default_workers(),
            "wall_seconds": round(seconds, 1),
            "runs": [
                {
                    k: r[k]
                    for k in (
                        "key",
                        "steps",
                        "converged",
                        "train_seconds",
                        "eval_mse",
                        "eval_max_abs_error",
                        "step_mode",
                        "compile_fallback",
                    )
                }
                | {"bos_mass_nontrigger": [round(h["bos_mass_nontrigger"], 4) for h in r["heads_detail"]]}
                for r in summary["runs"]
            ],
        },
    )


if __name__ == "__main__":
    main()
