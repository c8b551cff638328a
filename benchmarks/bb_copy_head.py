"""Where the Bigram-Backcopy copy head looks when it has nothing to copy.

For finished ``sinklab pretrain --corpus bb`` runs: the sink head their summary names, and its
attention on the validation batches the run was scored on, split by key into BOS, the query's own
token, the token before it (at a trigger row, the token to copy) and everything else, and the
largest weight of the row (1: all on one key; 1/t: spread evenly); for query rows whose token is
not a trigger (nothing to copy) and for trigger rows, from query position 2 on (at position 1 the
token before is BOS itself). A head that sinks puts its non-trigger rows on BOS; one that does not
must do nothing some other way, and this says which: parked on one token, or spread thin.

Run: `.venv/bin/python benchmarks/bb_copy_head.py RUN [RUN ...]`
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from common import record

from sinklab.core.text import format_table
from sinklab.models.native import Transformer
from sinklab.pretrain import PretrainConfig, load_trained, results
from sinklab.pretrain.bigram_backcopy import BigramBackcopy
from sinklab.pretrain.train import validation_batches

STATS = ("bos", "self", "previous", "rest", "largest")
ROWS = ("nontrigger", "trigger")


def load_run(run_dir: Path) -> tuple[Transformer, PretrainConfig, dict]:
    """The run's final model (eval mode), its configuration and its summary."""
    model, cfg = load_trained(run_dir)
    if cfg.corpus_kind != "bb" or cfg.sink_tokens:
        raise SystemExit(f"{run_dir}: a --corpus bb run without sink tokens is needed")
    return model, cfg, results.load_run(str(run_dir))[1]


@torch.no_grad()
def head_targets(model: Transformer, data: BigramBackcopy, batches: list[torch.Tensor], layer: int, head: int) -> dict:
    """One head's mean attention on BOS, self, previous and the rest, and its mean largest weight,
    at non-trigger and at trigger rows (STATS)."""
    sums, rows = torch.zeros(len(ROWS), len(STATS), dtype=torch.float64), torch.zeros(len(ROWS), dtype=torch.float64)
    for ids in batches:
        inputs = ids[:, :-1]
        _, weights = model(inputs, need_weights=True)
        w = weights[layer][:, head].double()  # (B, T, T)
        t = torch.arange(2, w.shape[1])
        bos, own, previous = w[:, t, 0], w[:, t, t], w[:, t, t - 1]
        rest, largest = w[:, t].sum(-1) - bos - own - previous, w[:, t].max(-1).values
        parts = torch.stack([bos, own, previous, rest, largest], dim=-1)  # (B, T-2, STATS)
        is_trigger = data.is_trigger[inputs[:, t]]
        for i, mask in enumerate((~is_trigger, is_trigger)):
            sums[i] += parts[mask].sum(0)
            rows[i] += mask.sum()
    means = sums / rows.clamp_min(1).unsqueeze(-1)
    return {kind: dict(zip(STATS, means[i].tolist())) for i, kind in enumerate(ROWS)}


def measure(run_dir: Path, data: BigramBackcopy) -> dict:
    model, cfg, summary = load_run(run_dir)
    layer, head = summary["sink_head"]["layer"], summary["sink_head"]["head"]
    targets = head_targets(model, data, validation_batches(data, cfg), layer, head)
    return {
        "run": str(run_dir),
        "variant": cfg.variant,
        "positions": cfg.positions,
        "lr": cfg.lr,
        "steps": cfg.steps,
        "seed": cfg.seed,
        "sink_head": {"layer": layer, "head": head},
        **targets,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run directories of sinklab pretrain --corpus bb")
    args = parser.parse_args()
    data = BigramBackcopy()
    results = [measure(run, data) for run in args.runs]
    table = [
        {
            "run": r["run"],
            "positions": r["positions"],
            "head": f"{r['sink_head']['layer']}.{r['sink_head']['head']}",
            **{f"{kind[:3]} {stat}": r[kind][stat] for kind in ROWS for stat in STATS},
        }
        for r in results
    ]
    columns = [("run", "run", "s"), ("positions", "positions", "s"), ("head", "head", "s")]
    columns += [(key, key, ".2f") for key in table[0] if key not in ("run", "positions", "head")]
    print(format_table(table, columns))
    record("bb_copy_head", {"runs": results})


if __name__ == "__main__":
    main()
