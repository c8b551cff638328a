"""Evaluating a trigger model on the fixed evaluation set: errors, and where each head puts its
"do nothing" (BOS, an implicit slot, a closed gate, nowhere, or content); per-run records and
statistics over seeds."""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Optional, Sequence

import torch

from ..core.attention import ATTN_NORMS, AttentionSpec
from ..core.hooks import hook_name
from ..models.native import Transformer
from .config import EVAL_SEED, TriggerConfig, constraint_hooks
from .task import BOS
from .train import TrainLog


@torch.no_grad()
def evaluate_trigger(model: Transformer, cfg: TriggerConfig, extra_hooks: Sequence = ()) -> dict:
    """Error and per-head attention statistics on the fixed evaluation set.

    Non-trigger rows are the query rows 1..L-1 other than the trigger (row 0 can only see BOS).
    ``extra_hooks`` (e.g. interventions) are attached for the evaluation. Returns the metrics
    plus ``maps``: mean and std attention (L, H, T, T) over the sequences.
    """
    task = cfg.task
    batch = task.sample(cfg.eval_sequences, torch.Generator().manual_seed(EVAL_SEED), trigger=cfg.eval_trigger)
    inputs: dict[int, torch.Tensor] = {0: batch.x}

    def keep_input(x, point):
        inputs[point.layer + 1] = x

    with model.hooks.attached([*constraint_hooks(cfg), *extra_hooks, (hook_name("*", "hook_resid_post"), keep_input)]):
        out, weights = model(batch.x, need_weights=True)
    err = out - batch.y
    non_trigger = task.non_trigger_rows(batch.trigger)  # (B, L)
    sq = err.pow(2).mean(-1)  # (B, L)
    rows = torch.arange(task.length)
    heads = []
    for layer, w in enumerate(weights):  # w: (B, H, L, L)
        gates = _gate_values(model, layer, inputs[layer])  # (B, L, H) or None
        heads.extend(_head_stats(w, gates, non_trigger, cfg, layer, rows == cfg.eval_trigger))
    stacked = torch.stack(weights, dim=1)  # (B, layers, H, L, L)
    return {
        "eval_mse": err.pow(2).mean().item(),
        "eval_max_abs_error": err.abs().max().item(),
        "mse_nontrigger": sq[non_trigger].mean().item(),
        "mse_trigger": sq[:, cfg.eval_trigger].mean().item(),
        "heads_detail": heads,
        "maps": {"mean": stacked.mean(0), "std": stacked.std(0)},
    }


def _gate_values(model: Transformer, layer: int, block_input: torch.Tensor) -> Optional[torch.Tensor]:
    gate = getattr(model.blocks[layer].attn.head_out, "gate", None)
    return gate.values(block_input) if gate is not None else None


def _head_stats(w, gates, non_trigger, cfg: TriggerConfig, layer: int, trigger_row) -> list[dict]:
    """Per-head BOS mass, row mass and gate statistics (see :func:`evaluate_trigger`)."""
    implicit_slot = ATTN_NORMS[cfg.attention.attn].implicit_slot
    stats = []
    nt = non_trigger.unsqueeze(1).float()  # (B, 1, L)
    n_rows = nt.sum()
    bos = w[..., BOS]  # (B, H, L): weight each query row puts on BOS
    row_mass = w.sum(-1)  # (B, H, L)
    bos_by_row = bos.mean(0)  # (H, L)
    for h in range(w.shape[1]):
        bos_nt = (bos[:, h] * nt[:, 0]).sum() / n_rows
        rows_seen = non_trigger[0]
        record = {
            "layer": layer,
            "head": h,
            "bos_mass_nontrigger": bos_nt.item(),
            "bos_mass_nontrigger_min": bos_by_row[h][rows_seen].min().item(),
            "bos_mass_trigger": bos[:, h, trigger_row].mean().item(),
            "sinks": bool(bos_nt.item() >= cfg.sink_threshold),
            "row_mass_nontrigger": ((row_mass[:, h] * nt[:, 0]).sum() / n_rows).item(),
            "gate_nontrigger": ((gates[..., h] * nt[:, 0]).sum() / n_rows).item() if gates is not None else None,
        }
        record["do_nothing"] = classify_do_nothing(record, implicit_slot)
        stats.append(record)
    return stats


def classify_do_nothing(head: dict, implicit_slot: bool, high: float = 0.5, closed: float = 0.1) -> str:
    """Where a head puts its "do nothing" at non-trigger rows.

    * ``BOS``: at least ``high`` of the attention goes to BOS (a sink);
    * ``implicit slot``: at least ``high`` of the probability mass is left out of the visible keys
      (the extra logit of softmax1 / sink_logit);
    * ``closed gate``: the head's gate is below ``closed`` on average;
    * ``nowhere``: the weights themselves are small (total below 1 - high) and there is no slot;
    * ``content``: none of these: the head spreads weight over content tokens.
    """
    if head["bos_mass_nontrigger"] >= high:
        return "BOS"
    if head["gate_nontrigger"] is not None and head["gate_nontrigger"] < closed:
        return "closed gate"
    if head["row_mass_nontrigger"] <= 1.0 - high:
        return "implicit slot" if implicit_slot else "nowhere"
    return "content"


def trigger_record(cfg: TriggerConfig, log: TrainLog, metrics: dict) -> dict:
    """One ``runs`` entry of ``summary.json`` (the documented contract plus extras)."""
    return {
        "key": cfg.key,
        **cfg.attention.flags(),
        "layers": cfg.layers,
        "heads": cfg.heads,
        "seed": cfg.seed,
        "bos_cap": cfg.bos_cap,
        "steps": log.steps,
        "converged": log.converged,
        "train_seconds": round(log.seconds, 3),
        "step_mode": log.step_mode,
        "compile_fallback": log.compile_fallback,
        "final_train_max_abs_error": log.final_max_abs_error,
        "eval_mse": metrics["eval_mse"],
        "eval_max_abs_error": metrics["eval_max_abs_error"],
        "heads_detail": metrics["heads_detail"],
    }


def summarise_seeds(records: Iterable[dict]) -> list[dict]:
    """Statistics over seeds, per configuration (attention variant, layers, heads, cap).

    ``solved`` is the fraction of seeds that met the stopping rule; ``every_layer_sinks`` the
    fraction in which every layer has a sinking head (what the paper proves softmax must do) and
    ``no_head_sinks`` the fraction in which none does (what ReLU can do);
    ``sinking_heads_per_layer`` counts, for each layer, the seeds with 0, 1, ... sinking heads.
    Every per-run metric gets its mean, std, min and max.
    """
    group_keys = (*AttentionSpec().flags(), "layers", "heads", "bos_cap")
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        variant = AttentionSpec.from_flags(r).flags()  # a record from before an extra existed: it is off
        groups.setdefault(tuple({**r, **variant}[k] for k in group_keys), []).append(r)
    return [_seed_statistics(dict(zip(group_keys, values)), rs) for values, rs in groups.items()]


def _seed_statistics(config: dict, runs: list[dict]) -> dict:
    sinking = [_sinking_heads_by_layer(r) for r in runs]  # per run: sinking heads in each layer
    row = {
        **config,
        "seeds": [r["seed"] for r in runs],
        "n_seeds": len(runs),
        "solved": _fraction(r["converged"] for r in runs),
        "every_layer_sinks": _fraction(min(layers) > 0 for layers in sinking),
        "no_head_sinks": _fraction(max(layers) == 0 for layers in sinking),
        "sinking_heads_per_layer": [
            {str(k): count for k, count in sorted(Counter(layers[i] for layers in sinking).items())}
            for i in range(config["layers"])
        ],
    }
    per_run = {
        "steps": [r["steps"] for r in runs],
        "train_seconds": [r["train_seconds"] for r in runs],
        "eval_mse": [r["eval_mse"] for r in runs],
        "eval_max_abs_error": [r["eval_max_abs_error"] for r in runs],
        "bos_mass_nontrigger": [mean_bos_mass(r) for r in runs],
        "sinking_heads": [sum(layers) for layers in sinking],
    }
    for name, values in per_run.items():
        t = torch.tensor(values, dtype=torch.float64)
        row[f"{name}_mean"] = t.mean().item()
        row[f"{name}_std"] = t.std().item() if len(values) > 1 else 0.0
        row[f"{name}_min"] = t.min().item()
        row[f"{name}_max"] = t.max().item()
    return row


def mean_bos_mass(record: dict) -> float:
    """A run's BOS mass at the non-trigger rows, averaged over its heads."""
    heads = record["heads_detail"]
    return sum(h["bos_mass_nontrigger"] for h in heads) / len(heads)


def _sinking_heads_by_layer(record: dict) -> list[int]:
    counts = [0] * record["layers"]
    for head in record["heads_detail"]:
        counts[head["layer"]] += head["sinks"]
    return counts


def _fraction(flags: Iterable[bool]) -> float:
    flags = list(flags)
    return sum(flags) / len(flags)
