"""A finished (or interrupted) ``sinklab pretrain`` run, picked up again from its directory."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from ..core.checkpoint import latest_checkpoint, load_checkpoint
from ..core.configs import from_dict, migrate
from ..core.errors import check
from ..models.hf import resolve_device
from ..models.native import ModelConfig, Transformer
from .config import PretrainConfig
from .run import architecture_of


def load_trained(run_dir, device: str = "cpu") -> tuple[Transformer, PretrainConfig]:
    """The model a ``sinklab pretrain`` run wrote, at its last checkpoint, in eval mode on ``device``,
    and the configuration that trained it: how a notebook or a benchmark picks up a run.

    The configuration is read strictly after its migrations (:attr:`PretrainConfig.MIGRATIONS`: a
    setting the file lacks is refused rather than filled with today's default, except those an
    older version of the file had no key for); the model is built from the architecture the run
    recorded (not re-derived from today's defaults), so an older run loads as it was trained, and a
    checkpoint that does not fit that architecture is refused in one line. The configuration's
    ``device`` is ``auto``: where the run trained says nothing about this machine. Refuses a
    directory that is not a pretraining run or holds no checkpoint yet, and warns when the last
    checkpoint is short of the run's steps (a run interrupted before its end)."""
    path = Path(run_dir)
    where = resolve_device(device)
    try:
        saved = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        saved = None
    check(
        isinstance(saved, dict) and "attention" in saved,
        f"{run_dir} is not a pretraining run (no readable config.json with its attention)",
    )
    cfg = from_dict(PretrainConfig, {**migrate(PretrainConfig, saved), "device": "auto"}, f"{run_dir}/config.json")
    checkpoint = latest_checkpoint(path)
    check(checkpoint is not None, f"{run_dir} holds no checkpoint yet")
    model = Transformer(from_dict(ModelConfig, migrate(ModelConfig, architecture_of(path)), f"the model {run_dir} records"))
    step = load_checkpoint(checkpoint, model, None)["step"]  # a checkpoint that does not fit the architecture: one line
    if step < cfg.steps:
        warnings.warn(f"{run_dir} stopped at step {step} of {cfg.steps}: the model is the one at step {step}", stacklevel=2)
    return model.to(where).eval(), cfg
