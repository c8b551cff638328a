"""Tables of the trigger lab (its figures are in :mod:`.plots`): the run table, statistics over
seeds, the BOS-cap trade-off and the variants."""

from __future__ import annotations

from typing import Sequence

from ..core.attention import AttentionSpec
from ..core.text import format_table
from .evaluate import mean_bos_mass

VARIANT_COLUMNS = [
    ("shape", "shape", "s"),
    ("attention", "variant", "s"),
    ("seeds", "n_seeds", "d"),
    ("solved", "solved", "s"),
    ("eval MSE", "eval_mse_mean", ".2e"),
    ("BOS mass", "bos_mass_nontrigger", ".3f"),
    ("row mass", "row_mass_nontrigger", ".3f"),
    ("gate", "gate_nontrigger", ".3f"),
    ("do-nothing goes to", "where", "s"),
]

CAP_COLUMNS = [
    ("BOS cap", "bos_cap", "g"),
    ("best eval MSE", "best_eval_mse", ".3e"),
    ("mean eval MSE", "eval_mse_mean", ".3e"),
    ("BOS mass reached", "bos_mass_nontrigger", ".3f"),
    ("seeds", "n_seeds", "d"),
]

TRIGGER_COLUMNS = [
    ("model", "model", "s"),
    ("seed", "seed", "d"),
    ("steps", "steps", "d"),
    ("conv", "converged", ""),
    ("eval MSE", "eval_mse", ".2e"),
    ("max|err|", "eval_max_abs_error", ".2e"),
    ("BOS mass (non-trig, mean heads)", "bos", ".3f"),
    ("min row", "bos_min", ".3f"),
    ("sinking heads", "sinking", "s"),
    ("do-nothing goes to", "where", "s"),
]


SEED_COLUMNS = [
    ("model", "model", "s"),
    ("seeds", "n_seeds", "d"),
    ("solved", "solved", ".0%"),
    ("every layer sinks", "every_layer_sinks", ".0%"),
    ("no head sinks", "no_head_sinks", ".0%"),
    ("seeds with k sinking heads, per layer (k: seeds)", "sinking_per_layer", "s"),
    ("steps mean", "steps_mean", ".0f"),
    ("steps min-max", "steps_range", "s"),
    ("eval MSE mean", "eval_mse_mean", ".2e"),
    ("eval MSE max", "eval_mse_max", ".2e"),
    ("BOS mass mean +- std", "bos_mass", "s"),
]


def seed_rows(across_seeds: Sequence[dict]) -> list[dict]:
    """One row per configuration of ``summary.json``'s ``across_seeds``, formatted for a table."""
    return [
        {
            **row,
            "model": f"{AttentionSpec.from_flags(row).label} {row['layers']}x{row['heads']}"
            + (f" cap {row['bos_cap']:g}" if row["bos_cap"] is not None else ""),
            "sinking_per_layer": "; ".join(
                f"L{i} " + ", ".join(f"{k}: {n}" for k, n in layer.items())
                for i, layer in enumerate(row["sinking_heads_per_layer"])
            ),
            "steps_range": f"{row['steps_min']:.0f}-{row['steps_max']:.0f}",
            "bos_mass": f"{row['bos_mass_nontrigger_mean']:.3f} +- {row['bos_mass_nontrigger_std']:.3f}",
        }
        for row in across_seeds
    ]


def several_seeds(across_seeds: Sequence[dict]) -> bool:
    return any(row["n_seeds"] > 1 for row in across_seeds)


def runs_of(row: dict, records: Sequence[dict]) -> list[dict]:
    """The run records of one configuration row of ``across_seeds``."""
    same = lambda r: AttentionSpec.from_flags(r) == AttentionSpec.from_flags(row)  # noqa: E731
    return [
        r
        for r in records
        if r["seed"] in row["seeds"] and same(r) and all(r[k] == row[k] for k in ("layers", "heads", "bos_cap"))
    ]


def trigger_rows(records: Sequence[dict]) -> list[dict]:
    """One row per trained trigger model: its record plus per-model head summaries."""
    rows = []
    for r in records:
        heads = r["heads_detail"]
        rows.append(
            {
                **r,
                "model": r["key"].rsplit("_seed", 1)[0],
                "bos": mean_bos_mass(r),
                "bos_min": min(h["bos_mass_nontrigger_min"] for h in heads),
                "sinking": f"{sum(h['sinks'] for h in heads)}/{len(heads)}",
                "where": ",".join(sorted({h["do_nothing"] for h in heads})),
            }
        )
    return rows


def trigger_table(records: Sequence[dict]) -> str:
    """One line per trained trigger model."""
    return format_table(trigger_rows(records), TRIGGER_COLUMNS)
