"""``sinklab scan MODEL MODEL ...`` and ``sinklab.scan_models``: Gu et al.'s cross-model table.

Each model is one scan (the scan capability, through the one pipeline): with a run directory, one
job each (:func:`sinklab.core.launchers.launch`: this machine's pool, Slurm or Ray) writing its
own run directory ``OUT/models/<index>-<label>/`` (open it alone with ``sinklab report``), reused
when the same command runs again; without one, the models are scanned here, in memory. The
comparison holds one entry per model (:func:`model_entry`), labelled by the name the user gave it,
a figure of the first-token mass by layer (one line per model) and a page with the models side by
side.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar, Optional

from ..core import pipeline
from ..core.configs import setting
from ..core.errors import SinklabError, check
from ..core.launchers import LOCAL, launch
from ..core.results import Capability, RunContext, RunResult, register, stamped
from ..core.runs import read_run_info
from . import compare_page
from .frame import COMPARE_TABLES
from .inputs import renamed_max_tokens
from .run import SCAN, ScanConfig, every_layer

MODELS_DIR = "models"
DEFAULT_NAME = "default"  # the label of the built-in default model (MODEL left out)


@dataclass
class CompareConfig:
    """Several models scanned with one scan configuration (its ``model`` unused)."""

    VERSION: ClassVar[int] = 2
    MIGRATIONS: ClassVar[dict] = {
        0: lambda saved: {
            "models": saved["models"],
            "labels": [label_of(m) for m in saved["models"]],
            "scan": {
                "model": None,
                **{k: v for k, v in saved.items() if k != "models"},
                "inputs": renamed_max_tokens(saved["inputs"]),
            },
        },
        1: lambda saved: {**saved, "scan": every_layer(saved["scan"])},
    }

    models: tuple[Optional[str], ...] = setting(
        (), help="the models: folders, .gguf files or Hub ids (None: the default)", cli=False
    )
    labels: tuple[str, ...] = setting((), help="what the comparison calls each model (default: the name given)", cli=False)
    scan: ScanConfig = field(default_factory=ScanConfig)

    def __post_init__(self) -> None:
        check(len(self.models) >= 2, "a comparison needs at least two models (one model: a scan)")
        self.labels = tuple(self.labels) or tuple(label_of(model) for model in self.models)
        check(len(self.labels) == len(self.models), "give one label per model")


def label_of(model) -> str:
    """The name a user gave a model: the spec as typed, ``default`` for the built-in one."""
    return DEFAULT_NAME if model is None else str(model)


def model_run_dir(out: str | Path, index: int, label: str) -> Path:
    """``OUT/models/<index>-<label>``: the index keeps two models with one name apart."""
    name = Path(label).name if Path(label).exists() else label
    return Path(out) / MODELS_DIR / f"{index}-{re.sub(r'[^A-Za-z0-9._-]+', '-', name).strip('-.')[:60] or 'model'}"


@dataclass(frozen=True)
class ModelJob:
    """One model's scan: its configuration and run directory."""

    cfg: ScanConfig
    out: str
    label: str


def scan_one(job: ModelJob) -> dict:
    """One model's job: its summary, read back when its run directory already holds this scan
    finished, else scanned anew. A user mistake names the model it is about."""
    try:
        return pipeline.run(SCAN, job.cfg, out=job.out).summary
    except SinklabError as exc:
        raise SinklabError(f"model {job.label!r}: {exc}") from None


def measure(cfg: CompareConfig, context: RunContext = RunContext()) -> RunResult:
    """Scan every model and compare. ``context.subject``: None, or one entry per model, a loaded
    model (a Subject) or None (that model is loaded from its name). With a run directory
    (``context.workdir``), each scan writes its own run directory under it: models given by name
    as jobs on ``context.launcher`` (one at a time here: a scan uses all cores), loaded ones here;
    without one, every scan runs here, in memory."""
    subjects = context.subject or [None] * len(cfg.models)
    check(len(subjects) == len(cfg.models), "give one loaded model (or None) per model")
    configs = [replace(cfg.scan, model=model) for model in cfg.models]
    if context.workdir is None:
        summaries = [SCAN.measure(c, RunContext(subject)).summary for c, subject in zip(configs, subjects)]
        runs = [None] * len(configs)
    else:
        jobs = [
            ModelJob(c, str(model_run_dir(context.workdir, i, label)), label)
            for i, (c, label) in enumerate(zip(configs, cfg.labels))
        ]
        summaries = [None if subject is None else scan_loaded(job, subject) for job, subject in zip(jobs, subjects)]
        by_name = [job for job, subject in zip(jobs, subjects) if subject is None]
        launcher = context.launcher or LOCAL
        gpu = "cuda" if cfg.scan.load.device_map is not None else cfg.scan.load.device  # a device map spreads over GPUs
        launched = iter(
            launch(
                scan_one, by_name, launcher.asking_gpu_for(gpu), context.workdir, 1, desc="models", label=lambda job: job.label
            )
            if by_name
            else []
        )
        summaries = [summary if summary is not None else next(launched) for summary in summaries]
        runs = [str(Path(job.out).relative_to(context.workdir)) for job in jobs]
    entries = [model_entry(summary, label, run) for summary, label, run in zip(summaries, cfg.labels, runs)]
    return RunResult(
        stamped(compare_page.KIND, {"models": entries, "settings": summaries[0]["settings"], "inputs": summaries[0]["inputs"]})
    )


def scan_loaded(job: ModelJob, subject) -> dict:
    """A model the caller loaded, scanned here into its run directory."""
    return pipeline.run(SCAN, job.cfg, subject, out=job.out).summary


def largest_massive_activation(summary: dict) -> Optional[dict]:
    """The massive activation of largest |value| in a scan summary (its list is ordered by layer,
    then |value|, so the first entry is only the first layer's largest): value, layer, dim, position."""
    found = summary["massive_activations"]
    top = max(found, key=lambda e: abs(e["value"])) if found else None
    return None if top is None else {key: top[key] for key in ("value", "layer", "dim", "position")}


def model_entry(summary: dict, label: str, run: Optional[str]) -> dict:
    """One model's row of the cross-model table, from its scan summary."""
    return {
        "label": label,
        "model": summary["model"],
        "dtype": summary.get("dtype"),
        "device": summary.get("device"),
        "run": run,
        "layers": summary["layers"],
        "heads": summary["heads"],
        "bos_prepended": summary["bos_prepended"],
        "sink_rate": summary["sink_rate"],
        "sink_start_layer": summary["sink_start_layer"],
        "first_token_mass_by_layer": summary["first_token_mass_by_layer"],
        "largest_massive_activation": largest_massive_activation(summary),
        "super_neurons": [{key: n[key] for key in ("layer", "neuron", "ratio")} for n in summary["super_neurons"]],
    }


def models_resumable(run_dir: Path) -> bool:
    """A comparison resumes: the models already scanned under ``OUT/models/`` are kept."""
    return (run_dir / MODELS_DIR).is_dir() and bool(read_run_info(run_dir))


COMPARE = register(
    Capability(
        compare_page.KIND,
        CompareConfig,
        measure,
        lambda out, result: [],
        tables=COMPARE_TABLES,
        write_page=compare_page.write,
        resumable=models_resumable,
        figures=lambda result: compare_page.figures(result.summary),
    )
)
