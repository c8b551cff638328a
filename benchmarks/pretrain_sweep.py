"""Every attention variant, pretrained with the default budget and 2 seeds, then compared.

Runs one after another (each uses every core) into runs/sweep/<variant>-seed<s>. Finished runs
are kept and half-finished ones resumed, so the sweep can be stopped and restarted.

Run: `.venv/bin/python benchmarks/pretrain_sweep.py [--seeds 0,1] [--steps N]` (also `make sweep`)
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from common import RUNS, record

from sinklab.core.attention import ATTN_NORMS, AttentionSpec
from sinklab.core.text import format_table
from sinklab.pretrain import COLUMNS, PretrainConfig, compare_runs, train_lm
from sinklab.pretrain.checkpoint import latest_checkpoint


def sweep_configs(seeds, steps=None) -> list[PretrainConfig]:
    base = PretrainConfig() if steps is None else PretrainConfig(steps=steps)
    variants = [AttentionSpec(name) for name in ATTN_NORMS] + AttentionSpec().with_each_extra()
    return [replace(base, attention=v, seed=s) for s in seeds for v in variants]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--steps", type=int, default=None, help="override the default budget (for a quick look)")
    parser.add_argument("--root", default=str(RUNS / "sweep"))
    args = parser.parse_args()
    runs = []
    for cfg in sweep_configs([int(s) for s in args.seeds.split(",")], args.steps):
        cfg.out = str(Path(args.root) / f"{cfg.variant}-seed{cfg.seed}")
        runs.append(cfg.out)
        if (Path(cfg.out) / "summary.json").exists():
            continue
        train_lm(cfg, resume=latest_checkpoint(Path(cfg.out)) is not None)
    result = compare_runs(runs, None, str(Path(args.root) / "compare"))
    print(format_table(result["rows"], COLUMNS))
    record("pretrain_sweep", {"steps": PretrainConfig().steps if args.steps is None else args.steps, "target": result["target"], "by_variant": result["by_variant"], "rows": result["rows"]})


if __name__ == "__main__":
    main()
