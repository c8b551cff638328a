"""What a ``sinklab adapt --to NAME`` run leaves, and the adapted model read back from it.

Beside the pipeline's files, a fine-tuning run writes the trained mitigation (``adapter.safetensors``)
and BOS's cached prefix (the mitigations' step 0); ``metrics.jsonl`` and the checkpoints are written
while it trains (:mod:`.finetune`). :func:`load_adapted` puts the mitigation back on the same base model.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file, save_file
from torch import nn

from ..core.atomic import atomic_path
from ..core.checkpoint import latest_checkpoint, load_checkpoint
from ..core.errors import check
from ..core.results import RunResult
from . import plots
from .adapted import AdaptedModel
from .mitigations import make_mitigation
from .prefix import SinkPrefix
from .run import PREFIX, PREFIX_FILE

ADAPTER_FILE = "adapter.safetensors"


def write(out: Path, result: RunResult) -> list[str]:
    """The trained mitigation and BOS's prefix (metrics.jsonl and the checkpoints are written while
    training; the figures, summary.json and the page are the pipeline's)."""
    with atomic_path(out / ADAPTER_FILE) as tmp:
        save_file(result.data["adapter"], str(tmp))
    result.data["prefixes"][PREFIX].save(out / PREFIX_FILE, result.summary["model"])
    return [ADAPTER_FILE, PREFIX_FILE]


def read_data(run_dir: Path) -> dict:
    return {
        "adapter": load_file(str(run_dir / ADAPTER_FILE)),
        "prefixes": {PREFIX: SinkPrefix.load(run_dir / PREFIX_FILE)},
        **plots.read_data(run_dir),
    }


def figures(result: RunResult) -> dict:
    """The largest linear-layer inputs by layer and the training losses (from metrics.jsonl)."""
    return plots.figures(result.summary, plots.read_data(result.out) if result.out is not None else {})


def has_checkpoint(run_dir: Path) -> bool:
    return latest_checkpoint(run_dir) is not None


def load_adapted(model: nn.Module, run_dir: str | Path) -> AdaptedModel:
    """The adapted model a finished ``sinklab adapt --to`` run wrote (``model``: the same base
    model, loaded fresh; with ``--full`` its weights are replaced by the run's)."""
    run_dir = Path(run_dir)
    check((run_dir / ADAPTER_FILE).exists(), f"{run_dir} holds no finished fine-tuning run ({ADAPTER_FILE} is missing)")
    cfg = json.loads((run_dir / "config.json").read_text())
    bos = SinkPrefix.load(run_dir / PREFIX_FILE, model)  # refused unless computed on this base model
    mitigation = make_mitigation(cfg["mitigation"], model, bos)
    mitigation.load_state_dict(load_file(str(run_dir / ADAPTER_FILE)))
    if cfg["full"]:
        load_checkpoint(latest_checkpoint(run_dir), nn.ModuleDict({"mitigation": mitigation, "model": model}), None)
    mitigation.ramp = 1.0
    return AdaptedModel(model, mitigation, bos)
