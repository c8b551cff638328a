"""Figures and terminal tables built from run results.

Every text that can come from a model or a user (token strings, run names) goes through
:func:`safe_text` before it reaches a figure, so matplotlib never interprets it as mathtext and no
control characters end up in a file.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Callable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .runs import save_figure  # noqa: E402


def safe_text(text: str, limit: int = 40) -> str:
    """A label safe to render: escaped mathtext, visible whitespace, no control characters."""
    text = str(text).replace("\\", "\\\\").replace("$", r"\$")
    text = text.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    text = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_table(rows: Sequence[dict], columns: Sequence[tuple[str, str, str]]) -> str:
    """A fixed-width text table; ``columns`` are (header, key, format spec)."""
    cells = [[h for h, _, _ in columns]]
    for row in rows:
        cells.append([_fmt(row.get(key), spec) for _, key, spec in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(value, spec: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


# --------------------------------------------------------------------------- trigger lab


def trigger_table(records: Sequence[dict]) -> str:
    """One line per trained trigger model."""
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
    return format_table(
        rows,
        [
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
        ],
    )


def trigger_figures(out: Path, configs, records, load_maps: Callable) -> list[str]:
    """Mean and std attention heatmaps, every layer and head, attention variants side by side."""
    groups: dict[tuple, list] = defaultdict(list)
    for cfg in configs:
        groups[(cfg.layers, cfg.heads, cfg.gate, cfg.head_norm, cfg.bos_cap, cfg.seed)].append(cfg)
    paths = []
    for (layers, heads, gate, head_norm, cap, seed), cfgs in groups.items():
        extras = "".join(["_gate" if gate else "", "_hnorm" if head_norm else "", f"_cap{cap:g}" if cap else ""])
        name = f"attention_{layers}x{heads}{extras}_seed{seed}.png"
        fig = _attention_grid([(c.attn, load_maps(out, c.key)) for c in cfgs], layers, heads)
        fig.suptitle(f"{layers} layer(s) x {heads} head(s){extras.replace('_', ' ')}, seed {seed}: attention over 1,000 eval sequences (trigger at 0-indexed 7)")
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


# --------------------------------------------------------------------------- scanner


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


def scan_figures(summary: dict, record, out: Path) -> list[str]:
    """Heatmap of first-token mass, per-layer sink share, massive-activation map, dominance and
    variance curves (and the mean attention pattern of a few layers when it was kept)."""
    name = safe_text(summary["model"], 60)
    paths = [
        _heatmap(summary["first_token_mass"], "head", "layer", f"{name}: first-token attention mass (T={summary['tokens']})", out / "first_token_mass.png", vmax=1.0),
        _sink_share(summary, name, out / "sink_share.png"),
        _heatmap(record.max_abs.clamp_min(1e-3).log10().tolist(), "position", "layer", f"{name}: log10 max |h| of the residual stream", out / "massive_activations.png"),
        _dominance(summary, name, out / "dominance_ratio.png"),
    ]
    if summary.get("variance_by_position"):
        paths.append(_variance(summary["variance_by_position"], name, out / "variance_by_position.png"))
    if record.patterns is not None:
        paths.append(attention_maps(record.patterns, f"{name}: mean attention (heads averaged)", out / "attention.png"))
    return [p.name for p in paths]


def _heatmap(values, xlabel: str, ylabel: str, title: str, path: Path, vmax=None) -> Path:
    fig, ax = plt.subplots(figsize=(7, 5))
    im = ax.imshow(values, aspect="auto", cmap="viridis", vmin=0 if vmax else None, vmax=vmax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax)
    return save_figure(fig, path)


def _sink_share(summary: dict, name: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    layers = range(summary["layers"])
    ax.bar(layers, summary["sink_share_by_layer"], alpha=0.6, label=f"share of heads with alpha_{summary['sink_rate']['k']} > {summary['sink_rate']['eps']:g}")
    ax.plot(layers, summary["first_token_mass_by_layer"], color="k", marker=".", label="mean first-token mass")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("layer")
    ax.legend(fontsize=8)
    ax.set_title(f"{name}: Sink_{summary['sink_rate']['k']}^{summary['sink_rate']['eps']:g} = {summary['sink_rate']['value']:.2f}", fontsize=9)
    return save_figure(fig, path)


def _dominance(summary: dict, name: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(summary["dominance_ratio_first"], marker="o", label="first token")
    ax.plot(summary["dominance_ratio_rest"], marker=".", label="other positions (mean)")
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel("max|h| / mean|h|")
    ax.legend(fontsize=8)
    ax.set_title(f"{name}: dimension disparity (dominance ratio)", fontsize=9)
    return save_figure(fig, path)


def _variance(variance: list, name: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
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
    fig, axes = plt.subplots(1, len(layers), figsize=(3.2 * len(layers), 3.2), squeeze=False)
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


# --------------------------------------------------------------------------- interventions


def _layer_mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def intervention_table(summary: dict) -> str:
    base = summary["baseline"]
    rows = []
    for r in summary["results"]:
        k = str(r["k"])
        rows.append(
            {
                "label": r["label"],
                "k_before": _layer_mean(base["share_at"][k]),
                "k_after": _layer_mean(r["share_at_k"]),
                "0_before": _layer_mean(base["share_at_0"]),
                "0_after": _layer_mean(r["share_at_0"]),
                "ppl_before": base["ppl"],
                "ppl_after": r["ppl"],
            }
        )
    return format_table(
        rows,
        [
            ("intervention", "label", "s"),
            ("share at k before", "k_before", ".3f"),
            ("after", "k_after", ".3f"),
            ("share at 0 before", "0_before", ".3f"),
            ("after", "0_after", ".3f"),
            ("ppl before", "ppl_before", ".2f"),
            ("ppl after", "ppl_after", ".2f"),
        ],
    )


def intervention_figures(summary: dict, base_record, records: dict, out: Path) -> list[str]:
    """Per-layer share at k against the baseline, the lam curves, and before/after heatmaps."""
    paths = [_share_by_layer(summary, out / "share_by_layer.png")]
    if any(r["lam"] is not None for r in summary["results"]):
        paths.append(_lam_curves(summary, out / "lam_curve.png"))
    shown = _strongest_per_kind(summary["results"])
    for i, label in enumerate(shown):
        rec = records[label]
        if base_record.patterns is None or rec.patterns is None:
            break
        paths.append(_before_after(base_record.patterns, rec.patterns, safe_text(label, 60), out / f"attention_{i}.png"))
    return [p.name for p in paths]


def _strongest_per_kind(results: list[dict]) -> list[str]:
    """One label per intervention type: the largest lam of a sweep, else each setting."""
    best: dict[str, dict] = {}
    for r in results:
        kind = r["label"].split(" lam=")[0]
        if kind not in best or (r["lam"] or 0) > (best[kind]["lam"] or 0):
            best[kind] = r
    return [r["label"] for r in best.values()]


def _share_by_layer(summary: dict, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 4))
    base = summary["baseline"]
    for label in _strongest_per_kind(summary["results"]):
        r = next(x for x in summary["results"] if x["label"] == label)
        (line,) = ax.plot(r["share_at_k"], marker=".", label=safe_text(label, 50))
        ax.plot(base["share_at"][str(r["k"])], linestyle=":", color=line.get_color(), label=f"baseline at k={r['k']}")
    ax.set_xlabel("layer")
    ax.set_ylabel("mean attention from later queries to k")
    ax.set_title(f"{safe_text(summary['model'], 60)}: share of attention at k, before (dotted) and after", fontsize=9)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def _lam_curves(summary: dict, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
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
    fig, axes = plt.subplots(2, len(layers), figsize=(3 * len(layers), 6), squeeze=False)
    for col, layer in enumerate(layers):
        for row, (name, pat) in enumerate((("before", before), ("after", after))):
            ax = axes[row][col]
            ax.imshow(pat[layer].mean(0).float().numpy(), cmap="viridis", vmin=0, vmax=1)
            ax.set_title(f"{name}, layer {layer}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle(f"{label}: head-averaged attention", fontsize=9)
    return save_figure(fig, path)


def trigger_intervention_table(results: list[dict]) -> str:
    return format_table(
        results,
        [
            ("model", "model", "s"),
            ("intervention", "intervention", "s"),
            ("MSE non-trigger before", "mse_nontrigger_before", ".2e"),
            ("after", "mse_nontrigger_after", ".2e"),
            ("MSE trigger before", "mse_trigger_before", ".2e"),
            ("after", "mse_trigger_after", ".2e"),
            ("BOS mass before", "bos_mass_nontrigger_before", ".3f"),
            ("after", "bos_mass_nontrigger_after", ".3f"),
        ],
    )


# --------------------------------------------------------------------------- pretraining


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


# --------------------------------------------------------------------------- streaming


def _moving_average(x, y, width: int):
    """(x, y) smoothed by a trailing moving average of ``width`` points (unchanged if shorter)."""
    import torch

    y = torch.as_tensor(y, dtype=torch.float64)
    x = torch.as_tensor(x)
    if len(y) <= width or width <= 1:
        return x, y
    kernel = torch.ones(1, 1, width, dtype=torch.float64) / width
    return x[width - 1 :], torch.nn.functional.conv1d(y.view(1, 1, -1), kernel).flatten()


def stream_figures(curves: dict, entries: dict, summary: dict, out: Path) -> list[str]:
    """Smoothed NLL against position for every policy, and per-token latency along the stream."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
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
    fig, ax = plt.subplots(figsize=(8, 4))
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


def stream_table(summary: dict) -> str:
    rows = []
    for name, p in {**summary["policies"], **{f"sink x{n}": a for n, a in summary.get("ablation", {}).items()}}.items():
        chunks = p["ppl_by_chunk"]
        rows.append({"policy": name, "ppl": p["ppl"], "first": chunks[0]["ppl"], "last": chunks[-1]["ppl"],
                     "tps": p.get("tokens_per_s"), "cache": p["peak_cache_bytes"] / 2**20 if "peak_cache_bytes" in p else None})
    return format_table(rows, [("policy", "policy", "s"), ("ppl", "ppl", ".2f"), ("ppl first chunk", "first", ".2f"),
                               ("ppl last chunk", "last", ".2f"), ("tokens/s", "tps", ".1f"), ("peak cache MiB", "cache", ".1f")])
