"""Figures and tables of the trigger lab: attention heatmaps (variants side by side), the run
table and the BOS-cap trade-off curve."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Callable, Sequence

from ..core.figures import plt, save_figure
from ..core.text import format_table, safe_text

VARIANT_COLUMNS = [
    ("shape", "shape", "s"),
    ("attention", "variant", "s"),
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


def trigger_rows(records: Sequence[dict]) -> list[dict]:
    """One row per trained trigger model: its record plus per-model head summaries."""
    rows = []
    for r in records:
        heads = r["heads_detail"]
        rows.append(
            {
                **r,
                "model": r["key"].rsplit("_seed", 1)[0],
                "bos": sum(h["bos_mass_nontrigger"] for h in heads) / len(heads),
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
    """Mean and std attention heatmaps, every layer and head, attention variants side by side."""
    groups: dict[tuple, list] = defaultdict(list)
    for cfg in configs:  # one figure per shape, extras, cap and seed; the normalisations side by side
        groups[(cfg.layers, cfg.heads, cfg.attention.extras, cfg.bos_cap, cfg.seed)].append(cfg)
    paths = []
    for (layers, heads, extras, cap, seed), cfgs in groups.items():
        suffix = "".join(f"+{e}" for e in extras) + (f"_cap{cap:g}" if cap else "")
        name = f"attention_{layers}x{heads}{suffix}_seed{seed}.png"
        fig = _attention_grid([(c.attention.attn, load_maps(out, c.key)) for c in cfgs], layers, heads)
        fig.suptitle(f"{layers} layer(s) x {heads} head(s){suffix}, seed {seed}: attention over 1,000 eval sequences (trigger at 0-indexed 7)")
        paths.append(str(save_figure(fig, out / name).name))
    return paths


def _attention_grid(variants: list[tuple[str, dict]], layers: int, heads: int):
    n_rows, n_cols = layers * heads, 2 * len(variants)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(2.3 * n_cols, 2.2 * n_rows), squeeze=False)
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
    fig, ax = plt.subplots(figsize=(5, 3.5))
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

