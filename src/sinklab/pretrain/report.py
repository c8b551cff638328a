"""Figures comparing pretraining runs: validation loss curves and first-token mass by layer."""

from __future__ import annotations

from pathlib import Path

from ..core.figures import save_figure, subplots
from ..core.text import safe_text


def loss_curves(metrics_by_run: dict, path: Path) -> Path:
    """Validation loss against steps, one line per run."""
    fig, ax = subplots(figsize=(7, 4.5))
    for name, rows in metrics_by_run.items():
        ax.plot([r["step"] for r in rows], [r["val_loss"] for r in rows], marker=".", label=safe_text(name, 50))
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_title("Validation loss", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    return save_figure(fig, path)


def first_token_mass_by_layer(mass_by_run: dict, path: Path) -> Path:
    """Mean first-token attention per layer, one line per run."""
    fig, ax = subplots(figsize=(7, 4.5))
    for name, mass in mass_by_run.items():
        ax.plot(range(len(mass)), mass, marker="o", label=safe_text(name, 50))
    ax.set_xlabel("layer")
    ax.set_ylabel("first-token attention mass")
    ax.set_ylim(0, 1.02)
    ax.set_title("Attention on the first position, per layer", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    return save_figure(fig, path)



#: Curves against the step (metrics.jsonl key -> label), in the order they are plotted.
EMERGENCE_CURVES = {
    "val_loss": "validation loss",
    "val_loss_gap": "gap to the optimum (bb)",
    "first_token_mass_mean": "first-token mass",
    "sink_rate_value": "Sink_1^0.3",
    "sink_head_bos_mass_nontrigger": "sink head: BOS mass, non-trigger rows (bb)",
    "sink_head_bos_mass_trigger": "sink head: BOS mass, trigger rows (bb)",
    "null_mass_mean": "null mass (slot or sink tokens)",
    "value_drain_max": "value drain (max over layers)",
    "residual_peak_max": "residual peak (max over layers)",
}


def emergence(metrics_by_run: dict, path: Path) -> Path:
    """Sink metrics against the step, one panel per metric recorded, one line per run (Gu et al. Fig. 4 style)."""
    present = [k for k in EMERGENCE_CURVES if any(k in r for rows in metrics_by_run.values() for r in rows)]
    cols = 3
    fig, axes = subplots(-(-len(present) // cols), cols, figsize=(4.2 * cols, 2.8 * -(-len(present) // cols)), squeeze=False)
    for ax, key in zip(axes.flat, present):
        for name, rows in metrics_by_run.items():
            points = [(r["step"], r[key]) for r in rows if key in r]
            ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=safe_text(name, 30))
        ax.set_title(EMERGENCE_CURVES[key], fontsize=8)
        ax.set_xlabel("step", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(present):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.tight_layout()
    return save_figure(fig, path)
