"""Every attention variant pretrained under one budget, several seeds, then compared.

Text (default): the 8 variants, 2 seeds, the default text budget, one run after another (each
uses every core) into runs/sweep/. Bigram-Backcopy (`--corpus bb`, `make sweep-bb`): the 9 variants
of the mitigation sweep (every normalisation, +gate, +head_norm, softmax with one learned sink
token), 3 seeds, the calibrated BB budget, two single-threaded runs at a time into runs/sweep-bb/.
Finished runs are kept and half-finished ones resumed, so a sweep can be stopped and restarted.

Run: `.venv/bin/python benchmarks/pretrain_sweep.py [--corpus bb] [--seeds 0,1,2] [--steps N] [--root DIR]`
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from common import RUNS, record

from sinklab.core.attention import ATTN_NORMS, AttentionSpec
from sinklab.core.checkpoint import latest_checkpoint
from sinklab.core.jobs import run_jobs
from sinklab.core.text import format_table
from sinklab.pretrain import COLUMNS, PretrainConfig, compare_runs, train_lm

SETTINGS = {  # corpus -> (default seeds, worker processes, extra variants, run root)
    "shakespeare": ("0,1", 1, [], "sweep"),
    "bb": ("0,1,2", 2, [{"sink_tokens": 1}], "sweep-bb"),
}


def sweep_configs(corpus: str, seeds, steps=None) -> list[PretrainConfig]:
    base = PretrainConfig(corpus=corpus, steps=steps)
    variants = [{"attention": AttentionSpec(name)} for name in ATTN_NORMS] + [{"attention": s} for s in AttentionSpec().with_each_extra()]
    return [replace(base, **v, seed=s, max_seq_len=None) for s in seeds for v in variants + SETTINGS[corpus][2]]


def train_one(cfg: PretrainConfig) -> str:
    """Train (or resume, or skip when finished) one run; returns its directory. A finished run of
    another budget is refused rather than reused."""
    summary = Path(cfg.out) / "summary.json"
    if not summary.exists():
        train_lm(cfg, resume=latest_checkpoint(Path(cfg.out)) is not None, progress=False)
    elif (steps := json.loads(summary.read_text())["steps"]) != cfg.steps:
        raise SystemExit(f"{cfg.out} holds a finished run of {steps} steps, not {cfg.steps}; give the sweep its own --root")
    return cfg.out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", choices=list(SETTINGS), default="shakespeare")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (default: 0,1 for text, 0,1,2 for bb)")
    parser.add_argument("--steps", type=int, default=None, help="override the default budget (for a quick look)")
    parser.add_argument("--workers", type=int, default=None, help="runs at a time (default: 1 for text, 2 single-threaded for bb)")
    parser.add_argument("--root", default=None, help="folder of the run directories (default: runs/sweep, runs/sweep-bb)")
    args = parser.parse_args()
    seeds, workers, _, root_name = SETTINGS[args.corpus]
    root = Path(args.root) if args.root else RUNS / root_name
    configs = sweep_configs(args.corpus, [int(s) for s in (args.seeds or seeds).split(",")], args.steps)
    for cfg in configs:
        cfg.out = str(root / f"{cfg.variant}-seed{cfg.seed}")
    runs = run_jobs(train_one, configs, args.workers or workers, desc=f"sweep {args.corpus}", label=lambda c: Path(c.out).name)
    result = compare_runs(runs, None, str(root / "compare"))
    print(format_table(result["by_variant"], [("variant", "variant", "s"), ("seeds", "seeds", "d")] + [(h, k, f) for h, k, f in COLUMNS if k not in ("run", "variant", "seed")]))
    record("pretrain_sweep" + ("_bb" if args.corpus == "bb" else ""),
           {"corpus": args.corpus, "steps": configs[0].steps, "target": result["target"], "by_variant": result["by_variant"], "rows": result["rows"]})


if __name__ == "__main__":
    main()
