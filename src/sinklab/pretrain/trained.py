"""A finished (or interrupted) ``sinklab pretrain`` run, picked up again from its directory."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from ..core.attention import AttentionSpec
from ..core.checkpoint import latest_checkpoint, load_checkpoint
from ..core.errors import check
from ..models.native import ModelConfig, Transformer
from .train import BEFORE_KEY_EXISTED, PretrainConfig


def load_trained(run_dir, device: str = "cpu") -> tuple[Transformer, PretrainConfig]:
    """The model a ``sinklab pretrain`` run wrote, at its last checkpoint, in eval mode on ``device``,
    and the configuration that trained it: how a notebook or a benchmark picks up a run.

    The model is built from the architecture config.json records (not re-derived from today's
    defaults), so an older run loads as it was trained. Refuses a directory that is not a
    pretraining run or holds no checkpoint yet."""
    path = Path(run_dir)
    try:
        saved = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        saved = {}
    check("model" in saved and "attention" in saved, f"{run_dir} is not a pretraining run (no readable config.json with its model)")
    checkpoint = latest_checkpoint(path)
    check(checkpoint is not None, f"{run_dir} holds no checkpoint yet")
    model = Transformer(ModelConfig(**{**saved["model"], "attention": AttentionSpec(**saved["model"]["attention"])}))
    load_checkpoint(checkpoint, model, None)
    names = {f.name for f in fields(PretrainConfig)} - {"attention", "device"}
    cfg = PretrainConfig(**{k: v for k, v in {**BEFORE_KEY_EXISTED, **saved}.items() if k in names}, attention=AttentionSpec(**saved["attention"]))
    return model.to(device).eval(), cfg
