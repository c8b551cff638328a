"""``sinklab trigger``: the lab's two capabilities for the one pipeline.

``LAB`` trains a grid of trigger models into its run directory (each model saved as its job
finishes, so the same command resumes) and ends with an analysis: none (``grid``), the
all-variants table (``variants``) or the error-against-cap trade-off (``cap_sweep``).
``CONSTRUCT`` checks the hand-built exact ReLU solution; its failure is a failed numerical check.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Optional, Sequence

from ..core import pipeline
from ..core.attention import with_extras_off
from ..core.configs import setting
from ..core.errors import NumericalCheckFailed, check
from ..core.launchers import LOCAL, LauncherSettings
from ..core.provenance import THREADS_HELP, check_threads, migrated_threads
from ..core.results import Capability, RunContext, RunResult, register, stamped, table_rows
from . import page, plots
from .analyses import cap_tradeoff, check_relu_construction, variant_table
from .config import TriggerConfig
from .ensemble import Placement, check_memory
from .evaluate import summarise_seeds
from .lab import run_grid
from .task import TriggerTask

#: What a lab ends with: the analysis of its records, by name.
ANALYSES = {"grid": None, "variants": variant_table, "cap_sweep": cap_tradeoff}


def migrated_extras(saved: dict) -> dict:
    """A lab's models from before an extra existed ran without it."""
    return {**saved, "configs": [with_extras_off(c) for c in saved["configs"]]}


def migrated_lab(saved: dict) -> dict:
    """Runs before config version 1 recorded only their models; the analysis is read off them (a
    cap sweep caps the BOS mass; the variants table trains per-head extras or more than the
    paper's two normalisations), and the placement, never recorded, takes its defaults."""
    configs = saved["configs"]
    capped = any(c.get("bos_cap") is not None for c in configs)
    varied = len({c["attention"]["attn"] for c in configs}) > 2 or any(
        v for c in configs for k, v in c["attention"].items() if k != "attn"
    )
    analysis = "cap_sweep" if capped else "variants" if varied else "grid"
    return {"configs": configs, "analysis": analysis, "workers": None, "device": "cpu", "ensembles": None}


@dataclass
class LabConfig:
    """The models a lab trains, the analysis it ends with, and where they train (``workers``,
    ``device`` and ``ensembles`` place the jobs: they do not change what a model computes beyond
    float rounding, and a lab resumes under another placement)."""

    VERSION: ClassVar[int] = 4
    MIGRATIONS: ClassVar[dict] = {
        0: migrated_lab,
        1: migrated_threads,
        2: migrated_extras,  # value_gate
        3: migrated_extras,  # vga
    }

    configs: tuple[TriggerConfig, ...] = setting((), help="the models, one per configuration and seed", cli=False)
    analysis: str = setting("grid", help="what the lab ends with", choices=tuple(ANALYSES), cli=False)
    workers: Optional[int] = setting(None, help="parallel training processes (default: one per core)", result=False)
    device: str = setting(
        "cpu",
        choices=("cpu", "cuda"),
        help="where models train (cuda: one process, the seeds of a configuration as one ensemble)",
        result=False,
    )
    ensembles: Optional[bool] = setting(
        None, help="train the seeds of a configuration as one batched ensemble (default: on a GPU)", result=False, cli=False
    )
    threads: Optional[int] = setting(None, help=THREADS_HELP, cli=False)

    def __post_init__(self) -> None:
        self.configs = tuple(c if isinstance(c, TriggerConfig) else TriggerConfig.from_dict(c) for c in self.configs)
        check(bool(self.configs), "a lab trains at least one model")
        check_threads(self.threads)
        check(self.analysis in ANALYSES, f"unknown analysis {self.analysis!r}; choose from: {', '.join(ANALYSES)}")

    @property
    def placement(self) -> Placement:
        return Placement(self.workers, self.device, self.ensembles, self.threads)


def fits_in_memory(cfg: LabConfig, context: RunContext) -> None:
    """Jobs that would not fit in this machine's memory, where they run here, are refused before
    anything is written."""
    if (context.launcher or LOCAL).runs_here:
        check_memory(cfg.placement.jobs(list(cfg.configs)), cfg.placement.processes, cfg.placement.device)


def measure(cfg: LabConfig, context: RunContext) -> RunResult:
    """Train every model not already in the run directory (jobs on ``context.launcher``), then
    summarise their records."""
    records = run_grid(cfg.configs, context.workdir, cfg.placement, context.launcher or LOCAL)
    thresholds = sorted({c.sink_threshold for c in cfg.configs})
    summary = {
        "sink_threshold": thresholds[0] if len(thresholds) == 1 else thresholds,
        "non_trigger_rows": "query rows 1..L-1 except the trigger",
        "runs": records,
        "across_seeds": summarise_seeds(records),
        "compile_fallbacks": {r["key"]: r["compile_fallback"] for r in records if r.get("compile_fallback")},
    }
    if ANALYSES[cfg.analysis] is not None:
        summary.update(ANALYSES[cfg.analysis](records))
    return RunResult(stamped("trigger", summary))


def figures(result: RunResult) -> dict:
    """The attention heatmaps of the first seeds (read from the lab's maps), the seeds figure and
    the cap trade-off."""
    return plots.figures(result.summary, result.out)


def trained(run_dir: Path) -> bool:
    """A lab always resumes: its finished models are kept, the others trained."""
    return True


def run_rows(summary: dict):
    """One row per trained model: its record (configuration, steps, error, sink figures)."""
    return table_rows(summary, [{k: v for k, v in r.items() if k != "heads_detail"} for r in summary["runs"]])


LAB = register(
    Capability(
        "trigger",
        LabConfig,
        measure,
        lambda out, result: [],
        tables={"runs": run_rows, "across_seeds": lambda s: table_rows(s, s["across_seeds"])},
        write_page=page.write,
        resumable=trained,
        needs_run_dir=True,
        figures=figures,
        preflight=fits_in_memory,
    )
)


def run_lab(
    configs: Sequence[TriggerConfig],
    out: str | os.PathLike,
    analysis: str = "grid",
    workers: Optional[int] = None,
    device: str = "cpu",
    ensembles: Optional[bool] = None,
    launcher: Optional[LauncherSettings] = None,
    overwrite: bool = False,
) -> RunResult:
    """``sinklab trigger`` in Python: train ``configs`` into the lab ``out`` (resuming it: models
    it holds are kept) and end with ``analysis``; ``workers``, ``device`` and ``ensembles`` place the
    training, ``launcher`` runs its jobs."""
    return pipeline.run(
        LAB, LabConfig(tuple(configs), analysis, workers, device, ensembles), out=out, launcher=launcher, overwrite=overwrite
    )


@dataclass
class ConstructConfig:
    """The hand-built exact ReLU solution, checked on ``sequences`` random sequences of ``task``."""

    task: TriggerTask = field(default_factory=lambda: TriggerConfig().task)


def measure_construction(cfg: ConstructConfig, context: RunContext = RunContext()) -> RunResult:
    return RunResult(stamped("trigger-construct", {"relu_construction": check_relu_construction(cfg.task), "task": cfg.task}))


def check_construction(result: RunResult) -> None:
    """A hand-built solution that is not exact is a failed numerical check."""
    built = result.summary["relu_construction"]
    if not built["passed"]:
        raise NumericalCheckFailed(
            f"the hand-built ReLU solution is off by {built['max_abs_error']:.2e} (tolerance {built['tolerance']:g}), "
            f"non-trigger rows exactly zero: {built['non_trigger_rows_exactly_zero']}"
        )


CONSTRUCT = register(
    Capability(
        "trigger-construct",
        ConstructConfig,
        measure_construction,
        lambda out, result: [],
        tables={"check": lambda s: table_rows(s, [s["relu_construction"]])},
        write_page=page.write,
        check=check_construction,
    )
)
