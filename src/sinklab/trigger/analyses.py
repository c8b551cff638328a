"""Analyses of the trigger lab: the all-variants table, the BOS-cap trade-off, and the
hand-built exact ReLU solution. Each is a pure function of the lab's records (or the task);
:mod:`.run` ends a lab with them."""

from __future__ import annotations

from collections import Counter

import torch

from ..core.attention import AttentionSpec
from ..models.native import ModelConfig, Transformer
from .task import TRIGGER, TriggerTask

VARIANT_SEEDS = tuple(range(8))  # a cell's "solved" and "sinks" are fractions over seeds: at least 8


def variant_table(records: list[dict]) -> dict:
    """Per (shape, variant): how many seeds solved the task and where the do-nothing mass went.

    Solved means the paper's training rule was met within the step budget. Masses are means over
    seeds and heads at non-trigger rows; ``where`` counts the heads in each class of
    :func:`~.evaluate.classify_do_nothing` over all seeds.
    """
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        variant = AttentionSpec.from_flags(r).label
        groups.setdefault((f"{r['layers']}x{r['heads']}", variant), []).append(r)
    rows = []
    for (shape, variant), rs in groups.items():
        heads = [h for r in rs for h in r["heads_detail"]]
        gates = [h["gate_nontrigger"] for h in heads if h["gate_nontrigger"] is not None]
        classes = Counter(h["do_nothing"] for h in heads)
        rows.append(
            {
                "shape": shape,
                "variant": variant,
                "n_seeds": len(rs),
                "solved": f"{sum(r['converged'] for r in rs)}/{len(rs)}",
                "eval_mse_mean": sum(r["eval_mse"] for r in rs) / len(rs),
                "bos_mass_nontrigger": _mean_of(heads, "bos_mass_nontrigger"),
                "row_mass_nontrigger": _mean_of(heads, "row_mass_nontrigger"),
                "gate_nontrigger": sum(gates) / len(gates) if gates else None,
                "where": ", ".join(f"{k} {v}/{len(heads)}" for k, v in classes.most_common()),
            }
        )
    return {"variant_table": rows}


def _mean_of(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def cap_tradeoff(records: list[dict]) -> dict:
    """Error reached against the BOS cap: the best (min over seeds) and the mean."""
    by_cap: dict[float, list[dict]] = {}
    for r in records:
        by_cap.setdefault(r["bos_cap"], []).append(r)
    rows = []
    for cap in sorted(by_cap):
        rs = by_cap[cap]
        errors = torch.tensor([r["eval_mse"] for r in rs], dtype=torch.float64)
        rows.append(
            {
                "bos_cap": cap,
                "best_eval_mse": errors.min().item(),
                "eval_mse_mean": errors.mean().item(),
                "eval_mse_std": errors.std().item() if len(rs) > 1 else 0.0,
                "bos_mass_nontrigger": sum(r["heads_detail"][0]["bos_mass_nontrigger"] for r in rs) / len(rs),
                "n_seeds": len(rs),
            }
        )
    return {"cap_tradeoff": rows}


def relu_construction(task: TriggerTask) -> Transformer:
    """A one-layer ReLU model whose weights solve the task exactly, set by hand.

    q_i = x_i[trigger] * e_0 and k_j = (x_j[bias] + x_j[trigger]) * e_0, so only the trigger row has
    non-zero scores, equal to 1 on every non-BOS key and 0 on BOS. ReLU attention divides row j by
    its j non-BOS keys, so with W_V = W_O = I the trigger row outputs mean(x_1..x_j) and every
    other row outputs exactly zero: a correct "do nothing" with no sink at all.
    """
    n = task.n
    model = Transformer(
        ModelConfig(d_model=n, n_layers=1, n_heads=1, head_dim=n, attention=AttentionSpec("relu"), max_seq_len=task.length)
    )
    with torch.no_grad():
        w_q, w_k, w_v = model.blocks[0].attn.qkv.weight.view(3, n, n)
        w_q.zero_()
        w_k.zero_()
        w_q[0, TRIGGER] = 1.0
        w_k[0, TRIGGER] = 1.0
        w_k[0, task.bias_channel] = 1.0
        w_v.copy_(torch.eye(n))
        model.blocks[0].attn.out.weight.copy_(torch.eye(n))
    return model


#: Largest |error| the hand-built ReLU solution may show (it is exact up to float32 rounding).
CONSTRUCTION_TOLERANCE = 1e-6


@torch.no_grad()
def check_relu_construction(task: TriggerTask, sequences: int = 10_000, seed: int = 0) -> dict:
    """Run the hand-built ReLU model on random sequences; report its error and non-trigger weights,
    and whether it ``passed``: error within :data:`CONSTRUCTION_TOLERANCE`, non-trigger rows exactly zero."""
    model = relu_construction(task)
    batch = task.sample(sequences, torch.Generator().manual_seed(seed))
    out, weights = model(batch.x, need_weights=True)
    non_trigger = task.non_trigger_rows(batch.trigger)
    w = weights[0][:, 0]  # (B, L, L)
    error, rows_zero = (out - batch.y).abs().max().item(), bool((w[non_trigger] == 0).all())
    return {
        "sequences": sequences,
        "max_abs_error": error,
        "non_trigger_weight_max": w[non_trigger].abs().max().item(),
        "non_trigger_rows_exactly_zero": rows_zero,
        "bos_weight_max": w[..., 0].abs().max().item(),
        "tolerance": CONSTRUCTION_TOLERANCE,
        "passed": error <= CONSTRUCTION_TOLERANCE and rows_zero,
    }
