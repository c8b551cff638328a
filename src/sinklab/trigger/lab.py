"""The trigger lab's grids: trigger models trained in parallel, resumable. The lab as a run (its
config, summary and figures) is :mod:`.run`; analyses over a grid live in :mod:`.analyses`.

A lab run is a directory: ``config.json``, one ``records/<key>.json`` and
``models/<key>.safetensors`` per trained model (written as each training job finishes, so
re-running the same command resumes; the seeds of an ensemble are saved together),
``maps/<key>.safetensors`` (mean and std attention over the evaluation set), figures, and
``summary.json`` written last.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Iterable, Optional, Sequence

import torch
from safetensors.torch import load_file, save_file

from ..core.atomic import atomic_path, write_json
from ..core.attention import ATTN_NORMS, AttentionSpec, with_extras_off
from ..core.launchers import LOCAL, LauncherSettings, launch
from ..core.provenance import OnThreads
from ..models.native import Transformer
from .config import TriggerConfig
from .ensemble import Placement, train_members
from .evaluate import evaluate_trigger, trigger_record

PAPER_SHAPES = ((1, 1), (2, 2), (4, 4))
QUICK_SHAPES = ((1, 1), (2, 2))
PAPER_ATTNS = ("softmax", "relu")


def run_members(job: Sequence[TriggerConfig], device: str = "cpu") -> list[tuple[dict, dict, dict]]:
    """Train configs that differ only in their seed (one ensemble) and evaluate each: a (record,
    state dict, attention maps) per config. Runs in a worker."""
    results = []
    for cfg, (model, log) in zip(job, train_members(job, device)):
        model = model.cpu()
        metrics = evaluate_trigger(model, cfg)
        maps = {k: v.contiguous() for k, v in metrics.pop("maps").items()}
        record = {**trigger_record(cfg, log, metrics), "torch_threads": torch.get_num_threads()}  # the job's, not run.json's
        results.append((record, model.state_dict(), maps))
    return results


def run_grid(configs: Sequence[TriggerConfig], out: Path, placement: Placement, launcher: LauncherSettings = LOCAL) -> list[dict]:
    """Train every config (resuming finished ones from ``out``, whichever launcher trained them)
    and return their records; the jobs (single models or ensembles of seeds) run on ``launcher``,
    ``placement``'s processes at a time on this machine. A job on a GPU asks the engine for one."""
    for sub in ("records", "models", "maps"):
        (out / sub).mkdir(exist_ok=True)
    done = {cfg.key: rec for cfg in configs if (rec := _load_record(out, cfg)) is not None}
    jobs = placement.jobs([c for c in configs if c.key not in done])
    jobs.sort(key=lambda job: _expected_cost(job[0]) * len(job), reverse=True)

    def save(job: Sequence[TriggerConfig], results: list[tuple[dict, dict, dict]]) -> None:
        for cfg, (record, state, maps) in zip(job, results):
            _save_tensors(out / "models" / f"{cfg.key}.safetensors", state)
            _save_tensors(out / "maps" / f"{cfg.key}.safetensors", maps)
            write_json(out / "records" / f"{cfg.key}.json", {"config": cfg.to_dict(), "record": record})
            done[cfg.key] = record

    launch(
        OnThreads(partial(run_members, device=placement.device), placement.threads),
        jobs,
        launcher.asking_gpu_for(placement.device).with_threads(placement.threads),
        out,
        placement.processes,
        desc="training",
        label=_job_label,
        on_result=save,
    )
    return [done[c.key] for c in configs]


def _job_label(job: Sequence[TriggerConfig]) -> str:
    if len(job) == 1:
        return job[0].key
    return f"{job[0].key.rsplit('_seed', 1)[0]} x{len(job)} seeds"


def _expected_cost(cfg: TriggerConfig) -> float:
    """Rough relative cost, to start the longest jobs first."""
    return cfg.layers * cfg.heads * (1 if cfg.layers == 1 else 12) * cfg.max_steps


def _load_record(out: Path, cfg: TriggerConfig) -> Optional[dict]:
    """A finished record for exactly this config, if one was saved by an earlier run."""
    path = out / "records" / f"{cfg.key}.json"
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    written = with_extras_off(saved.get("config") or {})  # a record from before an extra existed ran with it off
    if written != json.loads(json.dumps(cfg.to_dict())):
        return None
    if not (out / "maps" / f"{cfg.key}.safetensors").exists():
        return None
    return saved["record"]


def _save_tensors(path: Path, tensors: dict) -> None:
    with atomic_path(path) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp))


def load_trigger_model(out: Path, cfg: TriggerConfig) -> Transformer:
    """The trained model of ``cfg`` saved in lab run ``out`` (safetensors, no pickle)."""
    model = Transformer(cfg.model_config())
    model.load_state_dict(load_file(str(out / "models" / f"{cfg.key}.safetensors")))
    return model


def paper_configs(seeds: Iterable[int], base: TriggerConfig, shapes=PAPER_SHAPES, attns=PAPER_ATTNS) -> list[TriggerConfig]:
    """The paper's grid: every shape with softmax and ReLU, for every seed."""
    return [
        replace(base, layers=l, heads=h, attention=replace(base.attention, attn=a), seed=s, lr=None)
        for (l, h) in shapes
        for a in attns
        for s in seeds
    ]


def variant_configs(seeds: Iterable[int], base: TriggerConfig, shapes=((1, 1), (2, 2))) -> list[TriggerConfig]:
    """Every registered normalisation, plain and with each per-head extra alone, on the given shapes."""
    return [
        replace(base, layers=l, heads=h, attention=spec, seed=s, lr=None)
        for (l, h) in shapes
        for spec in variant_specs()
        for s in seeds
    ]


def variant_specs() -> list[AttentionSpec]:
    """Each registered normalisation plain, then with each per-head extra on its own."""
    return [spec for a in ATTN_NORMS for spec in (AttentionSpec(a), *AttentionSpec(a).with_each_extra())]


def cap_configs(caps: Iterable[float], seeds: Iterable[int], base: TriggerConfig) -> list[TriggerConfig]:
    """One-layer softmax models with the BOS mass capped at each level (1.0 = uncapped)."""
    return [replace(base, layers=1, heads=1, attention=AttentionSpec(), bos_cap=c, seed=s, lr=None) for c in caps for s in seeds]
