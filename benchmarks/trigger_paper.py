"""Wall time of the paper reproduction, `sinklab trigger --paper`, from scratch.

The paper's reference code takes about 850 s on a 2-core machine for the three shapes with
softmax and ReLU (one seed). Run: `.venv/bin/python benchmarks/trigger_paper.py [--seeds 0]`.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from common import record

from sinklab.core.jobs import default_workers
from sinklab.trigger import TriggerConfig, paper_configs, run_lab

PAPER_REFERENCE_SECONDS = 850.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    configs = paper_configs(seeds, TriggerConfig())
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        summary = run_lab(configs, out, workers=args.workers)
        seconds = time.perf_counter() - start
    record(
        "trigger_paper",
        {
            "seeds": seeds,
            "workers": args.workers or default_workers(),
            "wall_seconds": round(seconds, 1),
            "paper_reference_seconds": PAPER_REFERENCE_SECONDS,
            "speedup_vs_paper_code": round(PAPER_REFERENCE_SECONDS * len(seeds) / seconds, 2),
            "runs": [
                {k: r[k] for k in ("key", "steps", "converged", "train_seconds", "eval_mse", "eval_max_abs_error")}
                | {"bos_mass_nontrigger": [round(h["bos_mass_nontrigger"], 4) for h in r["heads_detail"]]}
                for r in summary["runs"]
            ],
        },
    )


if __name__ == "__main__":
    main()
