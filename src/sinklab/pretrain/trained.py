"""A finished (or interrupted) ``sinklab pretrain`` run, picked up again from its directory."""

from __future__ import annotations

import json
import warnings
from dataclasses import fields
from pathlib import Path

from ..core.attention import AttentionSpec
from ..core.checkpoint import latest_checkpoint, load_checkpoint
from ..core.errors import check
from ..models.hf import resolve_device
from ..models.native import ModelConfig, Transformer
from .train import BEFORE_KEY_EXISTED, PretrainConfig


def load_trained(run_dir, device: str = "cpu") -> tuple[Transformer, PretrainConfig]:
    """The model a ``sinklab pretrain`` run wrote, at its last checkpoint, in eval mode on ``device``,
    and the configuration that trained it: how a notebook or a benchmark picks up a run.

    The model is built from the architecture config.json records (not re-derived from today's
    defaults), so an older run loads as it was trained; a setting its config.json lacks is refused
    rather than filled with today's default, except those :data:`BEFORE_KEY_EXISTED` names. The
    configuration's ``device`` is ``auto``: where the run trained says nothing about this machine.
    Refuses a directory that is not a pretraining run or holds no checkpoint yet, and warns when
    the last checkpoint is short of the run's steps (a run interrupted before its end)."""
    path = Path(run_dir)
    where = resolve_device(device)
    try:
        saved = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        saved = {}
    check(isinstance(saved, dict) and isinstance(saved.get("model"), dict) and "attention" in saved, f"{run_dir} is not a pretraining run (no readable config.json with its model)")
    names = {f.name for f in fields(PretrainConfig)} - {"attention", "device"}
    saved = {**BEFORE_KEY_EXISTED, **saved}
    missing = sorted(names - saved.keys())
    check(not missing, f"{run_dir}/config.json lacks {', '.join(missing)}: what trained the run is unknown")
    cfg = PretrainConfig(**{k: saved[k] for k in names}, attention=AttentionSpec(**saved["attention"]))
    checkpoint = latest_checkpoint(path)
    check(checkpoint is not None, f"{run_dir} holds no checkpoint yet")
    unknown = sorted(set(saved["model"]) - {f.name for f in fields(ModelConfig)})
    check(not unknown, f"{run_dir}/config.json describes a model with {', '.join(unknown)}, which this sinklab does not know: a newer sinklab wrote it")
    model = Transformer(ModelConfig(**{**saved["model"], "attention": AttentionSpec(**saved["model"]["attention"])}))
    step = load_checkpoint(checkpoint, model, None)["step"]
    if step < cfg.steps:
        warnings.warn(f"{run_dir} stopped at step {step} of {cfg.steps}: the model is the one at step {step}", stacklevel=2)
    return model.to(where).eval(), cfg
