"""Figures comparing pretraining runs: validation loss curves and first-token mass by layer."""

from __future__ import annotations

from pathlib import Path

from ..core.figures import plt, save_figure
from ..core.text import safe_text


def loss_curves(metrics_by_run: dict, path: Path) -> Path:
    """Validation loss against steps, one line per run."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
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
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, mass in mass_by_run.items():
        ax.plot(range(len(mass)), mass, marker="o", label=safe_text(name, 50))
    ax.set_xlabel("layer")
    ax.set_ylabel("first-token attention mass")
    ax.set_ylim(0, 1.02)
    ax.set_title("Attention on the first position, per layer", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    return save_figure(fig, path)

