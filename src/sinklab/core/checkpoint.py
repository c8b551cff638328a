"""Training checkpoints: model and optimizer tensors as safetensors, scalars as JSON.

A checkpoint is a directory ``ckpt-<step>/`` (``model.safetensors``, ``optimizer.safetensors``,
``state.json``); the file ``latest`` names the newest complete one and is replaced atomically
after the directory is fully written, so a kill at any moment leaves the previous checkpoint
usable. Nothing is unpickled on load.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Optional

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .atomic import atomic_path, read_jsonl, write_jsonl
from .errors import SinklabError

LATEST = "latest"


def optimizer_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Split an optimizer state dict into flat tensors and the JSON-able rest."""
    state = opt.state_dict()
    tensors, scalars = {}, {}
    for idx, entry in state["state"].items():
        for name, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{idx}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{idx}.{name}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def restore_optimizer(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], rest: dict) -> None:
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    for key, value in rest["scalars"].items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    opt.load_state_dict({"state": state, "param_groups": rest["param_groups"]})


def save_checkpoint(
    run_dir: Path, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer, extra: dict, keep: int = 2
) -> Path:
    """Write ``ckpt-<step>`` completely, then point ``latest`` at it; keep the newest ``keep``."""
    target = run_dir / f"ckpt-{step:07d}"
    if target.exists():
        shutil.rmtree(target)
    tmp = run_dir / f".ckpt-{step:07d}.partial"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_file(_unshared(model.state_dict()), str(tmp / "model.safetensors"))
    tensors, rest = optimizer_tensors(opt)
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    (tmp / "state.json").write_text(json.dumps({"step": step, "optimizer": rest, **extra}))
    tmp.rename(target)
    with atomic_path(run_dir / LATEST) as pointer:
        pointer.write_text(target.name)
    for old in sorted(run_dir.glob("ckpt-*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def _unshared(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tensors to save: a tensor sharing memory with an earlier one (tied embeddings) is copied,
    since safetensors refuses shared memory; loading restores both names."""
    seen, out = set(), {}
    for name, tensor in state.items():
        tensor = tensor.detach().cpu().contiguous()
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        out[name] = tensor.clone() if key in seen else tensor
        seen.add(key)
    return out


def drop_rows_after(log: Path, step: int) -> None:
    """On resume, drop the rows a killed run logged to ``log`` (JSON lines with a ``step``) after
    the checkpoint it resumes from."""
    if log.exists():
        write_jsonl(log, [r for r in read_jsonl(log) if r["step"] <= step])


def latest_checkpoint(run_dir: Path) -> Optional[Path]:
    pointer = run_dir / LATEST
    if not pointer.exists():
        return None
    path = run_dir / pointer.read_text().strip()
    return path if path.is_dir() else None


def checkpoint_state(path: Path) -> dict:
    """The ``state.json`` of a checkpoint (step, config, ...), without loading any tensor."""
    try:
        return json.loads((path / "state.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SinklabError(f"checkpoint {path} is corrupt or incomplete: {exc}") from None


def load_checkpoint(path: Path, model: torch.nn.Module, opt: Optional[torch.optim.Optimizer]) -> dict:
    """Load weights (and optimizer state) from ``path``; return its ``state.json``."""
    state = checkpoint_state(path)
    try:
        weights = load_file(str(path / "model.safetensors"))
        opt_tensors = load_file(str(path / "optimizer.safetensors")) if opt is not None else {}
    except (OSError, SafetensorError) as exc:
        raise SinklabError(f"checkpoint {path} is corrupt or incomplete: {exc}") from None
    try:
        model.load_state_dict(weights)
        if opt is not None:
            restore_optimizer(opt, opt_tensors, state["optimizer"])
    except (RuntimeError, KeyError, ValueError) as exc:
        raise SinklabError(f"checkpoint {path} does not fit this model: {str(exc).splitlines()[0]}") from None
    return state
