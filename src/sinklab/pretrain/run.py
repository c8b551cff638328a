"""``sinklab pretrain`` as a capability of the one pipeline, and :func:`train_lm`, its face in Python.

The run directory is the training's working state (``metrics.jsonl`` and checkpoints, written as
it goes, so an interrupted run resumes); the pipeline writes ``config.json``, ``summary.json`` and
the page. The model's architecture (built from the config and the data's vocabulary) is recorded
once, in ``run.json``'s ``model`` entry, before training starts; :func:`architecture_of` reads it
back, and a checkpoint that does not fit it is refused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..core import pipeline
from ..core.atomic import read_jsonl
from ..core.checkpoint import latest_checkpoint
from ..core.errors import check
from ..core.results import Capability, RunContext, RunResult, register, table_rows
from ..core.runs import config_record, read_run_info, record_model
from . import page, plots
from .config import PretrainConfig
from .distributed import Dist
from .results import run_row
from .sources import check_source, load_source
from .train import METRICS_FILE, finish, train


def measure(cfg: PretrainConfig, context: RunContext) -> RunResult:
    """Train in ``context.workdir`` (resuming from its last checkpoint when the pipeline resumes),
    then scan the model. The other processes of a DDP run return an empty result."""
    out, world = context.workdir, Dist.from_env(cfg.device)
    data = load_source(cfg.corpus, cfg.tokenizer, cfg.bos, cfg.bb_triggers)
    if world.main:
        record_model(out, architecture=config_record(cfg.model_config(data.vocab_size)), data=data.describe())
    model = train(cfg, out, context.resume, world, data)
    summary = finish(model, data, cfg, out) if world.main else {}
    world.close()
    return RunResult(summary)


def check_data(cfg: PretrainConfig) -> None:
    """The data source's refusals, before a run directory is claimed (:func:`.sources.check_source`)."""
    check_source(cfg.corpus, cfg.tokenizer, cfg.bos, cfg.bb_triggers, cfg.seq_len)


def figures(result: RunResult) -> dict:
    """The loss and the sink metrics against the step (from the run's metrics.jsonl)."""
    return plots.run_figures(result.summary["variant"], read_jsonl(result.out / METRICS_FILE))


def has_checkpoint(run_dir: Path) -> bool:
    return latest_checkpoint(run_dir) is not None


def architecture_of(run_dir: Path) -> dict:
    """The architecture a run recorded (run.json's ``model`` entry; config.json's ``model`` in runs
    of config version 0)."""
    recorded = read_run_info(run_dir).get("model", {}).get("architecture")
    if recorded is None:
        try:
            recorded = json.loads((Path(run_dir) / "config.json").read_text()).get("model")
        except (OSError, ValueError):
            recorded = None
    check(
        isinstance(recorded, dict),
        f"{run_dir} records no model architecture (run.json's model entry): "
        "it is not a pretraining run, or its training never started",
    )
    return recorded


def metrics_rows(summary: dict):
    """One row: the run's headline numbers (the columns of ``sinklab compare``)."""
    return table_rows(summary, [run_row("", summary)])


PRETRAIN = register(
    Capability(
        "pretrain",
        PretrainConfig,
        measure,
        lambda out, result: [],
        tables={"summary": metrics_rows},
        write_page=page.write,
        resumable=has_checkpoint,
        needs_run_dir=True,
        figures=figures,
        preflight=lambda cfg, context: check_data(cfg),
    )
)


def train_lm(cfg: PretrainConfig, out: str | os.PathLike, resume: bool = False, overwrite: bool = False) -> RunResult:
    """``sinklab pretrain``: train ``cfg`` in the run directory ``out`` (the same ``--out`` policy:
    an unfinished run of this configuration resumes from its last checkpoint, a finished one is read
    back; ``resume`` insists on resuming). Under torchrun every process calls it; only the main one
    writes."""
    return pipeline.run(
        PRETRAIN, cfg, out=out, resume=resume, overwrite=overwrite, main_process=os.environ.get("RANK", "0") == "0"
    )
