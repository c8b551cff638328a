"""The trigger lab's plots, each defined once (the PNG files of a lab run and its report page draw
the same plotly figures), read from a lab run directory: mean and std attention maps of every
layer and head with the normalisations side by side (one figure per shape, extras, cap and seed,
for the first :data:`MAP_SEEDS` seeds), every seed's BOS mass per configuration, and the error
against the BOS cap."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Iterable

from safetensors.torch import load_file

from ..core.attention import AttentionSpec
from ..core.figures import GRID_TOP, title
from ..core.text import html_text
from .evaluate import mean_bos_mass
from .report import runs_of, seed_rows, several_seeds

MAP_SEEDS = 4  # attention heatmaps are drawn for the first few seeds of each configuration


def figures(summary: dict, run_dir: Path) -> dict:
    """Every static figure of a lab run, by file name (the maps are read from ``run_dir/maps``)."""
    if "runs" not in summary:  # the hand-built ReLU solution: a table only
        return {}
    built = {}
    for (layers, heads, extras, cap), by_seed in map_groups(summary["runs"]).items():
        for seed in map_seeds(by_seed):
            built[map_name(layers, heads, extras, cap, seed)] = attention_grid(
                run_dir, by_seed[seed], layers, heads, f"{group_name(layers, heads, extras, cap)}, seed {seed}"
            )
    if several_seeds(summary["across_seeds"]):
        built["seeds.png"] = seeds_figure(summary["across_seeds"], summary["runs"])
    if "cap_tradeoff" in summary:
        built["cap_tradeoff.png"] = cap_figure(summary["cap_tradeoff"])
    return built


def map_seeds(seeds: Iterable[int]) -> list[int]:
    """The seeds whose attention maps are drawn."""
    return sorted(set(seeds))[:MAP_SEEDS]


def map_groups(runs: list[dict]) -> dict[tuple, dict[int, list[dict]]]:
    """Runs by (layers, heads, extras, cap), then by seed: one figure per seed, normalisations side by side."""
    groups: dict[tuple, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        extras = AttentionSpec.from_flags(r).extras
        groups[(r["layers"], r["heads"], extras, r["bos_cap"])][r["seed"]].append(r)
    return groups


def group_name(layers: int, heads: int, extras: tuple, cap) -> str:
    return f"{layers}x{heads}" + "".join(f"+{e}" for e in extras) + (f", BOS cap {cap:g}" if cap else "")


def map_name(layers: int, heads: int, extras: tuple, cap, seed: int) -> str:
    """The PNG of one group and seed, e.g. ``attention_2x2+gate_cap0.5_seed0.png``."""
    return f"attention_{layers}x{heads}" + "".join(f"+{e}" for e in extras) + (f"_cap{cap:g}" if cap else "") + f"_seed{seed}.png"


def attention_grid(run_dir: Path, runs: list[dict], layers: int, heads: int, name: str):
    """Mean and std attention over the evaluation set: a row per (layer, head), a column pair per normalisation."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    cols = [(r, stat) for r in runs for stat in ("mean", "std")]
    titles = [
        f"{html_text(r['attn'])} {stat} L{layer} H{head}" for layer in range(layers) for head in range(heads) for r, stat in cols
    ]
    fig = make_subplots(
        rows=layers * heads,
        cols=len(cols),
        subplot_titles=titles,
        horizontal_spacing=0.04,
        vertical_spacing=0.25 / (layers * heads),
    )
    maps = {r["key"]: load_file(str(Path(run_dir) / "maps" / f"{r['key']}.safetensors")) for r in runs}
    for c, (r, stat) in enumerate(cols):
        for layer in range(layers):
            for head in range(heads):
                z = maps[r["key"]][stat][layer, head]
                fig.add_trace(
                    go.Heatmap(
                        z=z.float().numpy(),
                        coloraxis="coloraxis" if stat == "mean" else "coloraxis2",
                        hovertemplate=(
                            f"{html_text(r['attn'])} {stat}, layer {layer}, head {head}"
                            "<br>query %{y}, key %{x}: %{z:.3f}<extra></extra>"
                        ),
                    ),
                    row=layer * heads + head + 1,
                    col=c + 1,
                )
    fig.update_yaxes(autorange="reversed")
    fig.update_annotations(font_size=10)
    return fig.update_layout(
        title=title(html_text(name), "attention over the evaluation sequences"),
        height=170 * layers * heads + 150,
        margin_t=GRID_TOP,
        width=max(900, 220 * len(cols)),
        coloraxis=dict(colorscale="Viridis", cmin=0, cmax=1, colorbar=dict(title="mean", x=1.02)),
        coloraxis2=dict(colorscale="Magma", cmin=0, colorbar=dict(title="std", x=1.1)),
    )


def seeds_figure(across_seeds: list[dict], runs: list[dict]):
    """Per configuration, every seed's mean BOS mass at non-trigger rows, spread sideways (filled:
    solved; hover: its seed and steps)."""
    import plotly.graph_objects as go

    rows = seed_rows(across_seeds)
    x, y, symbols, text = [], [], [], []
    for i, row in enumerate(rows):
        seeds = runs_of(row, runs)
        for j, r in enumerate(seeds):
            x.append(i + (j / max(1, len(seeds) - 1) - 0.5) * 0.35)
            y.append(mean_bos_mass(r))
            symbols.append("circle" if r["converged"] else "circle-open")
            text.append(
                f"{html_text(row['model'])}, seed {r['seed']}: {r['steps']} steps, {'solved' if r['converged'] else 'not solved'}"
            )
    fig = go.Figure(
        go.Scatter(
            x=x,
            y=y,
            mode="markers",
            marker=dict(symbol=symbols, size=9),
            text=text,
            hovertemplate="%{text}<br>BOS mass %{y:.3f}<extra></extra>",
        )
    )
    return fig.update_layout(
        title="Each seed's BOS mass, mean over heads (filled: solved)",
        showlegend=False,
        height=380,
        xaxis=dict(
            tickvals=list(range(len(rows))), ticktext=[html_text(row["model"]) for row in rows], range=[-0.6, len(rows) - 0.4]
        ),
        yaxis=dict(title="BOS mass, non-trigger rows", range=[-0.03, 1.03]),
    )


def cap_figure(rows: list[dict]):
    """Evaluation error reached against the BOS-mass cap (log scale): the best seed and the mean +- std."""
    import plotly.graph_objects as go

    caps = [r["bos_cap"] for r in rows]
    fig = go.Figure(
        [
            go.Scatter(x=caps, y=[r["best_eval_mse"] for r in rows], name="best over seeds", mode="lines+markers"),
            go.Scatter(
                x=caps,
                y=[r["eval_mse_mean"] for r in rows],
                name="mean over seeds",
                mode="markers",
                error_y=dict(array=[r["eval_mse_std"] for r in rows]),
            ),
        ]
    )
    return fig.update_layout(
        title="One-layer softmax: error against the cap on BOS attention",
        xaxis_title="cap on BOS attention at query rows >= 1",
        yaxis=dict(type="log", title="evaluation MSE"),
        height=380,
    )
