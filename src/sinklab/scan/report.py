"""The scanner's figures and terminal tables; every model or token string goes through
:func:`~sinklab.core.text.safe_text`."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Sequence

from ..core.figures import save_figure, subplots
from ..core.text import format_table, safe_text


def scan_table(summary: dict) -> str:
    """One line per layer: first-token mass, sink share, dominance ratios, kurtosis, outliers."""
    massive = defaultdict(int)
    for entry in summary["massive_activations"]:
        massive[entry["layer"]] += 1
    supers = defaultdict(list)
    for entry in summary["super_neurons"]:
        supers[entry["layer"]].append(str(entry["neuron"]))
    rows = [
        {
            "layer": layer,
            "mass": summary["first_token_mass_by_layer"][layer],
            "share": summary["sink_share_by_layer"][layer],
            "dom0": summary["dominance_ratio_first"][layer],
            "dom": summary["dominance_ratio_rest"][layer],
            "max0": summary["max_abs_first"][layer],
            "kurt": summary["kurtosis"][layer],
            "massive": massive[layer],
            "super": ",".join(supers[layer][:3]) or "-",
        }
        for layer in range(summary["layers"])
    ]
    return format_table(
        rows,
        [
            ("layer", "layer", "d"),
            ("first-token mass", "mass", ".3f"),
            (f"heads with alpha>{summary['sink_rate']['eps']:g}", "share", ".2f"),
            ("dominance pos0", "dom0", ".1f"),
            ("dominance rest", "dom", ".1f"),
            ("max|h| pos0", "max0", ".1f"),
            ("kurtosis", "kurt", ".1f"),
            ("massive acts", "massive", "d"),
            ("super neurons", "super", "s"),
        ],
    )


def scan_figures(summary: dict, record: dict, out: Path) -> list[str]:
    """Heatmap of first-token mass, per-layer sink share, massive-activation map, dominance and
    variance curves (and the mean attention pattern of a few layers when it was kept)."""
    name = safe_text(summary["model"], 60)
    paths = [
        _heatmap(summary["first_token_mass"], "head", "layer", f"{name}: first-token attention mass (T={summary['tokens']})", out / "first_token_mass.png", vmax=1.0),
        _sink_share(summary, name, out / "sink_share.png"),
        _heatmap(record["max_abs"].clamp_min(1e-3).log10().tolist(), "position", "layer", f"{name}: log10 max |h| of the residual stream", out / "massive_activations.png"),
        _dominance(summary, name, out / "dominance_ratio.png"),
    ]
    if summary.get("variance_by_position"):
        paths.append(_variance(summary["variance_by_position"], name, out / "variance_by_position.png"))
    if "patterns" in record:
        paths.append(attention_maps(record["patterns"], f"{name}: mean attention (heads averaged)", out / "attention.png"))
    return [p.name for p in paths]


def _heatmap(values, xlabel: str, ylabel: str, title: str, path: Path, vmax=None) -> Path:
    fig, ax = subplots(figsize=(7, 5))
    im = ax.imshow(values, aspect="auto", cmap="viridis", vmin=0 if vmax else None, vmax=vmax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax)
    return save_figure(fig, path)


def _sink_share(summary: dict, name: str, path: Path) -> Path:
    fig, ax = subplots(figsize=(7, 3.5))
    layers = range(summary["layers"])
    ax.bar(layers, summary["sink_share_by_layer"], alpha=0.6, label=f"share of heads with alpha_{summary['sink_rate']['k']} > {summary['sink_rate']['eps']:g}")
    ax.plot(layers, summary["first_token_mass_by_layer"], color="k", marker=".", label="mean first-token mass")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("layer")
    ax.legend(fontsize=8)
    ax.set_title(f"{name}: Sink_{summary['sink_rate']['k']}^{summary['sink_rate']['eps']:g} = {summary['sink_rate']['value']:.2f}", fontsize=9)
    return save_figure(fig, path)


def _dominance(summary: dict, name: str, path: Path) -> Path:
    fig, ax = subplots(figsize=(7, 3.5))
    ax.plot(summary["dominance_ratio_first"], marker="o", label="first token")
    ax.plot(summary["dominance_ratio_rest"], marker=".", label="other positions (mean)")
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel("max|h| / mean|h|")
    ax.legend(fontsize=8)
    ax.set_title(f"{name}: dimension disparity (dominance ratio)", fontsize=9)
    return save_figure(fig, path)


def _variance(variance: list, name: str, path: Path) -> Path:
    fig, ax = subplots(figsize=(7, 4))
    n = len(variance)
    for layer in sorted({0, n // 4, n // 2, 3 * n // 4, n - 1}):
        ax.plot(variance[layer], label=f"layer {layer}")
    ax.set_yscale("log")
    ax.set_xlabel("position")
    ax.set_ylabel("variance across sequences")
    ax.legend(fontsize=8)
    ax.set_title(f"{name}: variance of the attention output by position", fontsize=9)
    return save_figure(fig, path)


def attention_maps(patterns, title: str, path: Path, layers: Sequence[int] = ()) -> Path:
    """Head-averaged attention patterns (L, H, T, T) of a few layers, side by side."""
    n = patterns.shape[0]
    layers = list(layers) or sorted({0, 1, n // 2, n - 1} & set(range(n)))
    fig, axes = subplots(1, len(layers), figsize=(3.2 * len(layers), 3.2), squeeze=False)
    for ax, layer in zip(axes[0], layers):
        ax.imshow(patterns[layer].mean(0).float().numpy(), cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"layer {layer}", fontsize=8)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


def scan_headline(summary: dict) -> str:
    """The few numbers a reader wants first, as text."""
    rate = summary["sink_rate"]
    lines = [
        f"{safe_text(summary['model'], 80)}: {summary['sequences']} x {summary['tokens']} tokens "
        f"({summary['inputs']['kind']}, BOS {'prepended' if summary['bos_prepended'] else 'not prepended'}), loss {summary['loss']:.3f}",
        f"Sink_{rate['k']}^{rate['eps']:g} = {rate['value']:.3f} (share of layer-head pairs); "
        f"sink share >= 0.5 from layer {summary['sink_start_layer']}, first-token mass >= 0.5 from layer {summary['first_token_mass_start_layer']}",
        f"massive activations: {len(summary['massive_activations'])}"
        + (f", largest {summary['massive_activations'][0]['value']:.1f} at layer {summary['massive_activations'][0]['layer']}, "
           f"position {summary['massive_activations'][0]['position']}, dim {summary['massive_activations'][0]['dim']}" if summary["massive_activations"] else ""),
        f"super neurons: {len(summary['super_neurons'])}"
        + "".join(f"; L{s['layer']}#{s['neuron']} (x{s['ratio']:.0f})" for s in summary["super_neurons"][:4]),
        "secondary sinks: " + (", ".join(f"pos {s['position']} {safe_text(repr(s['tokens'][0]))} ({s['alpha_mean']:.2f})" for s in summary["secondary_sinks"]) or "none"),
    ]
    return "\n".join(lines)

