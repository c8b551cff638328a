"""The trigger lab's interactive report: mean and std attention maps of every layer and head with
the normalisations side by side and a seed selector, the per-head BOS-mass table, and the
cap-sweep curve and variants table when the run has them (the plots are :mod:`.plots`' figures).
Also the page of the exact ReLU construction check."""

from __future__ import annotations

from pathlib import Path

from ..core import html
from . import plots
from .report import CAP_COLUMNS, SEED_COLUMNS, TRIGGER_COLUMNS, VARIANT_COLUMNS, seed_rows, several_seeds, trigger_rows

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
    summary = html.read_summary(run_dir)
    return summary is not None and ((run_dir / "records").is_dir() or "relu_construction" in summary)


def columns(run_dirs: list[Path]) -> list[tuple[str, list[html.Section]]]:
    return [(f"trigger lab: {run_dir.name}", sections(run_dir)) for run_dir in run_dirs]


def write(run_dir: Path) -> Path:
    return html.write_page(html.report_path(run_dir), f"sinklab trigger {run_dir.name}", columns([run_dir]))


def sections(run_dir: Path) -> list[html.Section]:
    summary = html.read_summary(run_dir)
    if "relu_construction" in summary:
        result = summary["relu_construction"]
        return [
            html.Section("Run", html.header(None, result, run_dir)),
            html.Section("Hand-built ReLU solution", html.table([result], [(k, k, ".3g") for k in result])),
        ]
    runs, uid = summary["runs"], html.dom_id(run_dir)
    parts = [
        html.Section("Run", html.header(None, _key_figures(runs), run_dir)),
        *_seed_sections(summary["across_seeds"], runs, uid),
        html.Section("Trained models", html.table(trigger_rows(runs), TRIGGER_COLUMNS)),
        html.Section("Attention over the evaluation set (mean and std; normalisations side by side)", _maps(run_dir, runs, uid)),
        html.Section("Per head", html.table([{**h, "key": r["key"]} for r in runs for h in r["heads_detail"]], HEAD_COLUMNS)),
    ]
    if "cap_tradeoff" in summary:
        parts.append(
            html.Section(
                "Error against the BOS cap",
                html.plot(plots.cap_figure(summary["cap_tradeoff"]), f"{uid}-cap")
                + html.table(summary["cap_tradeoff"], CAP_COLUMNS),
            )
        )
    if "variant_table" in summary:
        parts.append(html.Section("Variants", html.table(summary["variant_table"], VARIANT_COLUMNS)))
    return parts


def _seed_sections(across_seeds: list[dict], runs: list[dict], uid: str) -> list[html.Section]:
    """Statistics over seeds and every seed's BOS mass, when a configuration has several seeds."""
    if not several_seeds(across_seeds):
        return []
    caption = f"<p>Attention maps below are drawn for the first {plots.MAP_SEEDS} seeds of each configuration.</p>"
    figure = html.plot(plots.seeds_figure(across_seeds, runs), f"{uid}-seeds")
    return [html.Section("Across seeds", html.table(seed_rows(across_seeds), SEED_COLUMNS) + figure + caption)]


def _key_figures(runs: list[dict]) -> dict:
    return {
        "models": len(runs),
        "solved (paper's stopping rule)": f"{sum(r['converged'] for r in runs)}/{len(runs)}",
        "models with a sinking head": f"{sum(any(h['sinks'] for h in r['heads_detail']) for r in runs)}/{len(runs)}",
    }


def _maps(run_dir: Path, runs: list[dict], uid: str) -> str:
    """One selector per (shape, extras, cap): a figure per seed with every variant side by side."""
    blocks = []
    for n, ((layers, heads, extras, cap), by_seed) in enumerate(plots.map_groups(runs).items()):
        name = plots.group_name(layers, heads, extras, cap)
        options = {
            f"seed {seed}": html.plot(
                plots.attention_grid(run_dir, by_seed[seed], layers, heads, f"{name}, seed {seed}"), f"{uid}-maps{n}-{seed}"
            )
            for seed in plots.map_seeds(by_seed)
        }
        blocks.append(f"<h3>{html.esc(name)}</h3>" + html.selector("seed", options))
    return "".join(blocks)
