"""Figures and tables of the trigger lab: attention heatmaps (variants side by side), the run
table, statistics over seeds and the BOS-cap trade-off curve."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..core.attention import EXTRA_NAMES, AttentionSpec
from ..core.figures import save_figure, subplots
from ..core.text import format_table, safe_text
from .evaluate import mean_bos_mass

MAP_SEEDS = 4  # attention heatmaps are drawn for the first few seeds of each configuration

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
            "model": f"{AttentionSpec(row['attn'], **{e: row[e] for e in EXTRA_NAMES}).label} {row['layers']}x{row['heads']}"
            + (f" cap {row['bos_cap']:g}" if row["bos_cap"] is not None else ""),
            "sinking_per_layer": "; ".join(
                f"L{i} " + ", ".join(f"{k}: {n}" for k, n in layer.items()) for i, layer in enumerate(row["sinking_heads_per_layer"])
            ),
            "steps_range": f"{row['steps_min']:.0f}-{row['steps_max']:.0f}",
            "bos_mass": f"{row['bos_mass_nontrigger_mean']:.3f} +- {row['bos_mass_nontrigger_std']:.3f}",
        }
        for row in across_seeds
    ]


def several_seeds(across_seeds: Sequence[dict]) -> bool:
    return any(row["n_seeds"] > 1 for row in across_seeds)


def seeds_figure(rows: Sequence[dict], records: Sequence[dict], path: Path) -> Path:
    """Per configuration, every seed's mean BOS mass at non-trigger rows (filled: solved)."""
    models = [r["model"] for r in seed_rows(rows)]
    fig, ax = subplots(figsize=(max(5, 0.9 * len(models) + 2), 3.8))
    for x, row in enumerate(rows):
        runs = runs_of(row, records)
        for i, r in enumerate(runs):
            bos = mean_bos_mass(r)
            jitter = (i / max(1, len(runs) - 1) - 0.5) * 0.35
            ax.scatter(x + jitter, bos, s=18, color="C0" if r["converged"] else "white", edgecolors="C0")
    ax.set_xticks(range(len(models)), [safe_text(m) for m in models], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("BOS mass, non-trigger rows", fontsize=9)
    ax.set_ylim(-0.03, 1.03)
    ax.set_title("Each seed's BOS mass, mean over heads (filled: solved)", fontsize=10)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def runs_of(row: dict, records: Sequence[dict]) -> list[dict]:
    """The run records of one configuration row of ``across_seeds``."""
    keys = (*EXTRA_NAMES, "attn", "layers", "heads", "bos_cap")
    return [r for r in records if r["seed"] in row["seeds"] and all(r[k] == row[k] for k in keys)]


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


def trigger_figures(out: Path, configs, records, load_maps: Callable) -> list[str]:
    """Mean and std attention heatmaps, every layer and head, attention variants side by side,
    for the first ``MAP_SEEDS`` seeds."""
    groups: dict[tuple, list] = defaultdict(list)
    drawn = map_seeds(c.seed for c in configs)
    for cfg in configs:  # one figure per shape, extras, cap and seed; the normalisations side by side
        if cfg.seed in drawn:
            groups[(cfg.layers, cfg.heads, cfg.attention.extras, cfg.bos_cap, cfg.seed)].append(cfg)
    paths = []
    for (layers, heads, extras, cap, seed), cfgs in groups.items():
        suffix = "".join(f"+{e}" for e in extras) + (f"_cap{cap:g}" if cap else "")
        name = f"attention_{layers}x{heads}{suffix}_seed{seed}.png"
        fig = _attention_grid([(c.attention.attn, load_maps(out, c.key)) for c in cfgs], layers, heads)
        fig.suptitle(f"{layers} layer(s) x {heads} head(s){suffix}, seed {seed}: attention over 1,000 eval sequences (trigger at 0-indexed 7)")
        paths.append(str(save_figure(fig, out / name).name))
    return paths


def map_seeds(seeds: Iterable[int]) -> list[int]:
    """The seeds whose attention maps are drawn."""
    return sorted(set(seeds))[:MAP_SEEDS]


def _attention_grid(variants: list[tuple[str, dict]], layers: int, heads: int):
    n_rows, n_cols = layers * heads, 2 * len(variants)
    fig, axes = subplots(n_rows, n_cols, figsize=(2.3 * n_cols, 2.2 * n_rows), squeeze=False)
    for v, (attn, maps) in enumerate(variants):
        for stat_i, stat in enumerate(("mean", "std")):
            col = 2 * v + stat_i
            for layer in range(layers):
                for head in range(heads):
                    ax = axes[layer * heads + head][col]
                    data = maps[stat][layer, head].numpy()
                    im = ax.imshow(data, cmap="viridis" if stat == "mean" else "magma", vmin=0)
                    ax.set_title(f"{safe_text(attn)} {stat} L{layer} H{head}", fontsize=7)
                    ax.set_xticks([])
                    ax.set_yticks([])
                    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02).ax.tick_params(labelsize=5)
    return fig


def cap_tradeoff_figure(rows: Sequence[dict], path: Path) -> Path:
    """Best evaluation error reached against the BOS-mass cap (log scale)."""
    fig, ax = subplots(figsize=(5, 3.5))
    caps = [r["bos_cap"] for r in rows]
    ax.plot(caps, [r["best_eval_mse"] for r in rows], marker="o", label="best over seeds")
    ax.errorbar(caps, [r["eval_mse_mean"] for r in rows], yerr=[r["eval_mse_std"] for r in rows], marker=".", capsize=3, alpha=0.6, label="mean +- std")
    ax.legend(fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("cap on BOS attention at query rows >= 1")
    ax.set_ylabel("best evaluation MSE")
    ax.set_title("One-layer softmax: error falls only as BOS mass -> 1")
    ax.grid(alpha=0.3)
    return save_figure(fig, path)

