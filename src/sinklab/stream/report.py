"""Figures and tables of streaming runs: NLL and latency along the stream per policy."""

from __future__ import annotations

from pathlib import Path

import torch

from ..core.figures import save_figure, subplots
from ..core.text import format_table, safe_text


def _moving_average(x, y, width: int):
    """(x, y) smoothed by a trailing moving average of ``width`` points (unchanged if shorter)."""
    y = torch.as_tensor(y, dtype=torch.float64)
    x = torch.as_tensor(x)
    if len(y) <= width or width <= 1:
        return x, y
    kernel = torch.ones(1, 1, width, dtype=torch.float64) / width
    return x[width - 1 :], torch.nn.functional.conv1d(y.view(1, 1, -1), kernel).flatten()


def stream_figures(nll_curves: dict, entries: dict, summary: dict, out: Path) -> list[str]:
    """Smoothed NLL against position for every policy, and per-token latency along the stream."""
    fig, ax = subplots(figsize=(8, 4.5))
    curves = {policy: (nll_curves[f"{policy}.positions"], nll) for policy, nll in nll_curves.items() if not policy.endswith(".positions")}
    for policy, (positions, nll) in curves.items():
        width = 256 if policy != "recompute" else 4  # recompute is scored sparsely
        ax.plot(*_moving_average(positions, nll, width), label=policy)
    if summary.get("max_positions") and summary["max_positions"] < summary["tokens"]:
        ax.axvline(summary["max_positions"], color="gray", linestyle="--", label="trained context")
    ax.set_xlabel("position in the stream")
    ax.set_ylabel("NLL (nats, moving average)")
    ax.set_title(f"{safe_text(summary['model'], 60)}: {summary['sinks']} sinks + {summary['window']} recent", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    paths = [save_figure(fig, out / "nll_by_position.png")]
    fig, ax = subplots(figsize=(8, 4))
    for policy, entry in entries.items():
        chunks = entry.get("ms_per_token_by_chunk") or []
        ax.plot([c.get("measured_at", c["start"]) for c in chunks], [c["ms"] for c in chunks], marker="o", label=policy)
    ax.set_yscale("log")
    ax.set_xlabel("position in the stream")
    ax.set_ylabel("ms per token")
    ax.set_title("Per-token latency along the stream", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    paths.append(save_figure(fig, out / "latency_by_position.png"))
    return [p.name for p in paths]


STREAM_COLUMNS = [("policy", "policy", "s"), ("ppl", "ppl", ".2f"), ("ppl first chunk", "first", ".2f"),
                  ("ppl last chunk", "last", ".2f"), ("tokens/s", "tps", ".1f"), ("peak cache MiB", "cache", ".1f")]


def stream_rows(summary: dict) -> list[dict]:
    """One row per policy and per ablation sink count."""
    rows = []
    for name, p in {**summary["policies"], **{f"sink x{n}": a for n, a in summary.get("ablation", {}).items()}}.items():
        chunks = p["ppl_by_chunk"]
        rows.append({"policy": name, "ppl": p["ppl"], "first": chunks[0]["ppl"], "last": chunks[-1]["ppl"],
                     "tps": p.get("tokens_per_s"), "cache": p["peak_cache_bytes"] / 2**20 if "peak_cache_bytes" in p else None})
    return rows


def stream_table(summary: dict) -> str:
    return format_table(stream_rows(summary), STREAM_COLUMNS)
