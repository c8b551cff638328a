"""The trigger lab's interactive report: mean and std attention maps of every layer and head with
the normalisations side by side and a seed selector, the per-head BOS-mass table, and the
cap-sweep curve and variants table when the run has them. Also the page of the exact ReLU
construction check."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from safetensors.torch import load_file

from ..core import html
from ..core.attention import EXTRA_NAMES, AttentionSpec
from .evaluate import mean_bos_mass
from .report import (
    CAP_COLUMNS,
    MAP_SEEDS,
    SEED_COLUMNS,
    TRIGGER_COLUMNS,
    VARIANT_COLUMNS,
    map_seeds,
    runs_of,
    seed_rows,
    several_seeds,
    trigger_rows,
)

HEAD_COLUMNS = [
    ("model", "key", "s"),
    ("layer", "layer", "d"),
    ("head", "head", "d"),
    ("BOS mass, non-trigger rows", "bos_mass_nontrigger", ".3f"),
    ("BOS mass, trigger row", "bos_mass_trigger", ".3f"),
    ("row mass", "row_mass_nontrigger", ".3f"),
    ("gate", "gate_nontrigger", ".3f"),
    ("sinks", "sinks", ""),
    ("do-nothing goes to", "do_nothing", "s"),
]


def is_run(run_dir: Path) -> bool:
    summary = run_dir / "summary.json"
    return summary.exists() and ((run_dir / "records").is_dir() or "relu_construction" in json.loads(summary.read_text()))


def columns(run_dirs: list[Path]) -> list[tuple[str, list[html.Section]]]:
    return [(f"trigger lab: {run_dir.name}", sections(run_dir)) for run_dir in run_dirs]


def write(run_dir: Path) -> Path:
    return html.write_page(html.report_path(run_dir), f"sinklab trigger {run_dir.name}", columns([run_dir]))


def sections(run_dir: Path) -> list[html.Section]:
    summary = json.loads((run_dir / "summary.json").read_text())
    if "relu_construction" in summary:
        result = summary["relu_construction"]
        return [html.Section("Run", html.header(run_dir, None, result)), html.Section("Hand-built ReLU solution", html.table([result], [(k, k, ".3g") for k in result]))]
    runs, uid = summary["runs"], html.dom_id(run_dir)
    parts = [
        html.Section("Run", html.header(run_dir, None, _key_figures(runs))),
        *_seed_sections(summary["across_seeds"], runs, uid),
        html.Section("Trained models", html.table(trigger_rows(runs), TRIGGER_COLUMNS)),
        html.Section("Attention over the evaluation set (mean and std; normalisations side by side)", _maps(run_dir, runs, uid)),
        html.Section("Per head", html.table([{**h, "key": r["key"]} for r in runs for h in r["heads_detail"]], HEAD_COLUMNS)),
    ]
    if "cap_tradeoff" in summary:
        parts.append(html.Section("Error against the BOS cap", html.plot(_cap_curve(summary["cap_tradeoff"]), f"{uid}-cap", 380) + html.table(summary["cap_tradeoff"], CAP_COLUMNS)))
    if "variant_table" in summary:
        parts.append(html.Section("Variants", html.table(summary["variant_table"], VARIANT_COLUMNS)))
    return parts


def _seed_sections(across_seeds: list[dict], runs: list[dict], uid: str) -> list[html.Section]:
    """Statistics over seeds and every seed's BOS mass, when a configuration has several seeds."""
    if not several_seeds(across_seeds):
        return []
    import plotly.graph_objects as go

    rows = seed_rows(across_seeds)
    fig = go.Figure()
    for row in rows:
        seeds = runs_of(row, runs)
        bos = [mean_bos_mass(r) for r in seeds]
        text = [f"seed {r['seed']}: {r['steps']} steps, {'solved' if r['converged'] else 'not solved'}" for r in seeds]
        fig.add_trace(go.Box(y=bos, name=row["model"], boxpoints="all", jitter=0.4, pointpos=0, text=text, hovertemplate="%{text}<br>BOS mass %{y:.3f}<extra></extra>"))
    fig.update_layout(showlegend=False, yaxis=dict(title="BOS mass, non-trigger rows (mean over heads)", range=[-0.03, 1.03]))
    caption = f"<p>Attention maps below are drawn for the first {MAP_SEEDS} seeds of each configuration.</p>"
    return [html.Section("Across seeds", html.table(rows, SEED_COLUMNS) + html.plot(fig, f"{uid}-seeds", 380) + caption)]


def _key_figures(runs: list[dict]) -> dict:
    return {
        "models": len(runs),
        "solved (paper's stopping rule)": f"{sum(r['converged'] for r in runs)}/{len(runs)}",
        "models with a sinking head": f"{sum(any(h['sinks'] for h in r['heads_detail']) for r in runs)}/{len(runs)}",
    }


def _maps(run_dir: Path, runs: list[dict], uid: str) -> str:
    """One selector per (shape, extras, cap): a figure per seed with every variant side by side."""
    groups: dict[tuple, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        extras = AttentionSpec(r["attn"], **{e: r[e] for e in EXTRA_NAMES}).extras
        groups[(r["layers"], r["heads"], extras, r["bos_cap"])][r["seed"]].append(r)
    blocks = []
    for n, ((layers, heads, extras, cap), by_seed) in enumerate(groups.items()):
        name = f"{layers}x{heads}" + "".join(f"+{e}" for e in extras) + (f", BOS cap {cap:g}" if cap else "")
        drawn = map_seeds(by_seed)
        options = {f"seed {seed}": html.plot(_grid(run_dir, by_seed[seed], layers, heads), f"{uid}-maps{n}-{seed}", 170 * layers * heads + 90) for seed in drawn}
        blocks.append(f"<h3>{html.esc(name)}</h3>" + html.selector("seed", options))
    return "".join(blocks)


def _grid(run_dir: Path, runs: list[dict], layers: int, heads: int):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    cols = [(r, stat) for r in runs for stat in ("mean", "std")]
    titles = [f"{r['attn']} {stat} L{layer} H{head}" for layer in range(layers) for head in range(heads) for r, stat in cols]
    fig = make_subplots(rows=layers * heads, cols=len(cols), subplot_titles=titles, horizontal_spacing=0.04, vertical_spacing=0.25 / (layers * heads))
    maps = {r["key"]: load_file(str(run_dir / "maps" / f"{r['key']}.safetensors")) for r in runs}
    for c, (r, stat) in enumerate(cols):
        for layer in range(layers):
            for head in range(heads):
                z = maps[r["key"]][stat][layer, head]
                fig.add_trace(go.Heatmap(z=z.tolist(), coloraxis="coloraxis" if stat == "mean" else "coloraxis2",
                                         hovertemplate=f"{r['attn']} {stat}, layer {layer}, head {head}<br>query %{{y}}, key %{{x}}: %{{z:.3f}}<extra></extra>"),
                              row=layer * heads + head + 1, col=c + 1)
    fig.update_yaxes(autorange="reversed")
    fig.update_annotations(font_size=10)
    return fig.update_layout(coloraxis=dict(colorscale="Viridis", cmin=0, cmax=1, colorbar=dict(title="mean", x=1.02)),
                             coloraxis2=dict(colorscale="Magma", cmin=0, colorbar=dict(title="std", x=1.1)))


def _cap_curve(rows: list[dict]):
    import plotly.graph_objects as go

    caps = [r["bos_cap"] for r in rows]
    fig = go.Figure([go.Scatter(x=caps, y=[r["best_eval_mse"] for r in rows], name="best over seeds", mode="lines+markers"),
                     go.Scatter(x=caps, y=[r["eval_mse_mean"] for r in rows], name="mean over seeds", mode="markers",
                                error_y=dict(array=[r["eval_mse_std"] for r in rows]))])
    return fig.update_layout(xaxis_title="cap on BOS attention at query rows >= 1", yaxis=dict(type="log", title="evaluation MSE"))
