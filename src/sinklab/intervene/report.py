"""Figures and tables of interventions: the share of attention at k before and after, the lam
curves, attention maps before and after, and the trigger-model table."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Sequence

from ..core.figures import save_figure, subplots
from ..core.text import format_table, safe_text


def _layer_mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


INTERVENTION_COLUMNS = [
    ("intervention", "label", "s"),
    ("share at k before", "k_before", ".3f"),
    ("after", "k_after", ".3f"),
    ("share at 0 before", "0_before", ".3f"),
    ("after", "0_after", ".3f"),
    ("ppl before", "ppl_before", ".2f"),
    ("ppl after", "ppl_after", ".2f"),
]


def intervention_rows(summary: dict) -> list[dict]:
    """One row per experiment: shares at k and at 0 (means over layers) and ppl, before and after."""
    base = summary["baseline"]
    return [
        {
            "label": r["label"],
            "k_before": _layer_mean(base["share_at"][str(r["k"])]),
            "k_after": _layer_mean(r["share_at_k"]),
            "0_before": _layer_mean(base["share_at_0"]),
            "0_after": _layer_mean(r["share_at_0"]),
            "ppl_before": base["ppl"],
            "ppl_after": r["ppl"],
        }
        for r in summary["results"]
    ]


def intervention_table(summary: dict) -> str:
    return format_table(intervention_rows(summary), INTERVENTION_COLUMNS)


def intervention_figures(summary: dict, maps: dict, out: Path) -> list[str]:
    """Per-layer share at k against the baseline, the lam curves, and before/after heatmaps of the
    head-averaged maps (L, T, T) kept for short inputs."""
    paths = [_share_by_layer(summary, out / "share_by_layer.png")]
    if any(r["lam"] is not None for r in summary["results"]):
        paths.append(_lam_curves(summary, out / "lam_curve.png"))
    for i, label in enumerate(label for label in maps if label != "baseline"):
        paths.append(_before_after(maps["baseline"], maps[label], safe_text(label, 60), out / f"attention_{i}.png"))
    return [p.name for p in paths]


def strongest_per_kind(results: list[dict]) -> list[str]:
    """One label per intervention type: the largest lam of a sweep, else each setting."""
    best: dict[str, dict] = {}
    for r in results:
        kind = r["label"].split(" lam=")[0]
        if kind not in best or (r["lam"] or 0) > (best[kind]["lam"] or 0):
            best[kind] = r
    return [r["label"] for r in best.values()]


def _share_by_layer(summary: dict, path: Path) -> Path:
    fig, ax = subplots(figsize=(8, 4))
    base = summary["baseline"]
    for label in strongest_per_kind(summary["results"]):
        r = next(x for x in summary["results"] if x["label"] == label)
        (line,) = ax.plot(r["share_at_k"], marker=".", label=safe_text(label, 50))
        ax.plot(base["share_at"][str(r["k"])], linestyle=":", color=line.get_color(), label=f"baseline at k={r['k']}")
    ax.set_xlabel("layer")
    ax.set_ylabel("mean attention from later queries to k")
    ax.set_title(f"{safe_text(summary['model'], 60)}: share of attention at k, before (dotted) and after", fontsize=9)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def _lam_curves(summary: dict, path: Path) -> Path:
    fig, ax = subplots(figsize=(6, 4))
    kinds: dict[str, list] = defaultdict(list)
    for r in summary["results"]:
        if r["lam"] is not None:
            kinds[r["intervention"]["type"]].append((r["lam"], _layer_mean(r["share_at_k"]), r["k"]))
    for kind, points in kinds.items():
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{kind} (k={points[0][2]})")
    base = summary["baseline"]
    for k in sorted({p[2] for pts in kinds.values() for p in pts}):
        ax.axhline(_layer_mean(base["share_at"][str(k)]), color="gray", linestyle=":", label=f"baseline at k={k}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("lam")
    ax.set_ylabel("sink score at k (mean over layers)")
    ax.set_title("Mean-centred amplification vs plain scaling", fontsize=9)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def _before_after(before, after, label: str, path: Path) -> Path:
    n = before.shape[0]
    layers = sorted({1, n // 3, 2 * n // 3, n - 1} & set(range(n)))
    fig, axes = subplots(2, len(layers), figsize=(3 * len(layers), 6), squeeze=False)
    for col, layer in enumerate(layers):
        for row, (name, pat) in enumerate((("before", before), ("after", after))):
            ax = axes[row][col]
            ax.imshow(pat[layer].float().numpy(), cmap="viridis", vmin=0, vmax=1)
            ax.set_title(f"{name}, layer {layer}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle(f"{label}: head-averaged attention", fontsize=9)
    return save_figure(fig, path)


TRIGGER_INTERVENTION_COLUMNS = [
    ("model", "model", "s"),
    ("intervention", "intervention", "s"),
    ("MSE non-trigger before", "mse_nontrigger_before", ".2e"),
    ("after", "mse_nontrigger_after", ".2e"),
    ("MSE trigger before", "mse_trigger_before", ".2e"),
    ("after", "mse_trigger_after", ".2e"),
    ("BOS mass before", "bos_mass_nontrigger_before", ".3f"),
    ("after", "bos_mass_nontrigger_after", ".3f"),
]


def trigger_intervention_table(results: list[dict]) -> str:
    return format_table(results, TRIGGER_INTERVENTION_COLUMNS)

