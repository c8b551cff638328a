"""The tuning run's figures, each defined once (PNGs and the page draw the same plotly figures):
per task, the head profile as a heatmap (layers x heads; the derivative of the validation
objective with respect to each head's edit, blue where strengthening the edit helps), and the
test verdict (accuracy untouched against tuned, with chance). Terminal and page tables too.

The data is ``profiles``: task -> (L, H) float32, saved as ``profiles.safetensors``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch
from safetensors.torch import load_file, save_file

from ..core import html
from ..core.atomic import atomic_path
from ..core.figures import title
from ..core.text import format_table, html_text
from .frame import verdict_rows
from .methods import TUNINGS

PROFILES_FILE = "profiles.safetensors"

COLUMNS = [
    ("task", "task", "s"),
    ("n", "n", "d"),
    ("orders", "rotations", "d"),
    ("choices listed", "listed", ""),
    ("chance", "chance", ".3f"),
    ("acc untouched", "acc_untouched", ".3f"),
    ("tuned", "acc_tuned", ".3f"),
    ("change", "acc_change", "+.3f"),
    ("95% low", "acc_change_low", "+.3f"),
    ("high", "acc_change_high", "+.3f"),
    ("sign-flip p", "sign_flip_p", ".3g"),
    ("McNemar p (strict)", "mcnemar_p", ".3g"),
    ("gold logprob change", "gold_logprob_change", "+.3f"),
    ("chosen", "chosen", "s"),
]


def save_data(out: Path, data: dict) -> None:
    tensors = {task.replace("/", "__"): p.float().contiguous() for task, p in data["profiles"].items()}
    with atomic_path(Path(out) / PROFILES_FILE) as tmp:
        save_file(tensors, str(tmp))


def read_data(run_dir: Path) -> dict:
    path = Path(run_dir) / PROFILES_FILE
    profiles = {k.replace("__", "/"): v for k, v in load_file(str(path)).items()} if path.exists() else {}
    return {"profiles": profiles}


def table(summary: dict) -> str:
    """The verdicts as a terminal table."""
    return format_table(list(verdict_rows(summary)), COLUMNS)


def figures(summary: dict, data: dict) -> dict:
    """Every static figure of the run, by file name."""
    built = {"verdict.png": _verdict(summary)}
    for i, (task, profile) in enumerate(data["profiles"].items()):
        built[f"profile_{i}.png"] = _heatmap(summary, task, profile)
    return built


def sections(summary: dict, data: dict, uid: str, run_dir: Optional[Path] = None) -> list[html.Section]:
    """The page: the header, the verdict table and figure, the candidates, each task's profile."""
    rows = list(verdict_rows(summary))
    figures_ = {"method": summary["method"], "mode": summary["mode"], "shots": summary["shots"], "engine": summary["engine"]}
    parts = [
        html.Section("Run", html.header(summary["model"], figures_, run_dir)),
        html.Section("Test split: untouched against tuned (paired)", html.table(rows, COLUMNS)),
        html.Section("Accuracy on the test split", html.plot(_verdict(summary), f"{uid}-verdict")),
    ]
    maps = {
        task: html.plot(_heatmap(summary, task, p), f"{uid}-profile{i}") for i, (task, p) in enumerate(data["profiles"].items())
    }
    if maps:
        parts.append(
            html.Section("Head profiles (validation)", html.selector("task", {html_text(k): v for k, v in maps.items()}))
        )
    return parts


def _verdict(summary: dict):
    import plotly.graph_objects as go

    rows = list(verdict_rows(summary))
    tasks = [html_text(r["task"], 40) for r in rows]
    fig = go.Figure(
        [
            go.Bar(x=tasks, y=[r["acc_untouched"] for r in rows], name="untouched"),
            go.Bar(
                x=tasks,
                y=[r["acc_tuned"] for r in rows],
                name="tuned",
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[r["acc_change_high"] - r["acc_change"] for r in rows],
                    arrayminus=[r["acc_change"] - r["acc_change_low"] for r in rows],
                ),
            ),
            go.Scatter(
                x=tasks,
                y=[r["chance"] for r in rows],
                mode="markers",
                marker_symbol="line-ew-open",
                marker_size=30,
                name="chance",
            ),
        ]
    )
    heading = title(
        html_text(summary["model"], 60),
        f"{summary['method']} ({summary['mode']}), {summary['shots']}-shot; bars: 95% interval of the paired change",
    )
    return fig.update_layout(title=heading, barmode="group", yaxis=dict(title="accuracy", range=[0, 1]), height=420)


def _heatmap(summary: dict, task: str, profile: torch.Tensor):
    import plotly.graph_objects as go

    values = profile.float()
    bound = float(values.abs().max()) or 1.0
    edit = TUNINGS[summary["method"]].strength_label
    fig = go.Figure(go.Heatmap(z=values.tolist(), zmin=-bound, zmax=bound, colorscale="RdBu", colorbar=dict(title="d objective")))
    heading = title(html_text(task, 60), f"derivative of the validation objective ({summary['mode']}) w.r.t. {edit}")
    return fig.update_layout(title=heading, xaxis_title="head", yaxis_title="layer", height=520)
