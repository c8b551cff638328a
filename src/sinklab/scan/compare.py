"""``sinklab scan MODEL MODEL ...``: Gu et al.'s cross-model table as a command.

Each model is one job (:func:`sinklab.core.launchers.launch`: this machine's pool, Slurm or Ray): the full single-model scan, written to
its own run directory ``OUT/models/<index>-<name>/`` (open it alone with ``sinklab report``), reused
when the same command runs again. The comparison at the top of ``OUT`` holds one entry per model
(:func:`model_entry`), a figure of the first-token mass by layer (one line per model) and a page
with the models side by side.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, replace
from pathlib import Path
from typing import Optional, Sequence

from ..core.errors import SinklabError, check
from ..core.figures import save_images
from ..core.launchers import LOCAL, LauncherSettings, launch
from ..core.results import stamped
from ..core.runs import CONFIG, FINISHED, SUMMARY, claim_run_dir, prepare_run_dir, write_json
from . import compare_page
from .run import ScanConfig, run_scan

MODELS_DIR = "models"
DEFAULT_NAME = "default"  # the sub-directory name of the built-in default model (MODEL left out)


def compare_config(cfg: ScanConfig, models: Sequence[Optional[str]]) -> dict:
    """What the comparison's config.json holds (and the --out policy compares): the models in
    order and the scan settings shared by all of them."""
    return {"models": list(models), **{key: value for key, value in asdict(cfg).items() if key != "model"}}


def model_run_dir(out: str | Path, index: int, model: Optional[str]) -> Path:
    """``OUT/models/<index>-<name>``: the index keeps two models with one name apart."""
    name = DEFAULT_NAME if model is None else (Path(model).name if Path(model).exists() else model)
    return Path(out) / MODELS_DIR / f"{index}-{re.sub(r'[^A-Za-z0-9._-]+', '-', name).strip('-.')[:60] or 'model'}"


def model_configs(cfg: ScanConfig, models: Sequence[Optional[str]]) -> list[ScanConfig]:
    """One single-model scan configuration per model, each writing its own run directory."""
    check(cfg.out is not None, "a comparison writes a run directory: give ScanConfig.out")
    return [replace(cfg, model=model, out=str(model_run_dir(cfg.out, i, model))) for i, model in enumerate(models)]


def scan_one(cfg: ScanConfig) -> dict:
    """One model's job: its summary, read back when its run directory already holds this scan
    finished, else scanned anew. A user mistake names the model it is about."""
    try:
        if claim_run_dir(cfg.out, cfg) == FINISHED:
            return json.loads((Path(cfg.out) / SUMMARY).read_text())
        return run_scan(cfg)
    except SinklabError as exc:
        raise SinklabError(f"model {cfg.model or DEFAULT_NAME!r}: {exc}") from None


def run_compare(cfg: ScanConfig, models: Sequence[Optional[str]], workers: int = 1, launcher: LauncherSettings = LOCAL) -> dict:
    """Scan every model (one job each on ``launcher``; here ``workers`` at a time: 1 by default, as
    a scan uses all cores) and write the comparison to ``cfg.out``; returns its summary."""
    check(len(models) >= 2, "a comparison needs at least two models (one model: run_scan)")
    configs = model_configs(cfg, models)
    out = prepare_run_dir(cfg.out)
    write_json(out / CONFIG, compare_config(cfg, models))
    gpu = "cuda" if cfg.load.device_map is not None else cfg.load.device  # a device map spreads over GPUs
    summaries = launch(scan_one, configs, launcher.asking_gpu_for(gpu), out, workers, desc="models", label=lambda c: c.model or DEFAULT_NAME)
    entries = [model_entry(s, Path(c.out).relative_to(out)) for s, c in zip(summaries, configs)]
    summary = stamped(compare_page.KIND, {"models": entries, "settings": asdict(cfg.settings), "inputs": asdict(cfg.inputs)})
    summary.update(save_images(compare_page.figures(summary), out).summary_entries())
    write_json(out / SUMMARY, summary)
    compare_page.write(out)
    return summary


def largest_massive_activation(summary: dict) -> Optional[dict]:
    """The massive activation of largest |value| in a scan summary (its list is ordered by layer,
    then |value|, so the first entry is only the first layer's largest): value, layer, dim, position."""
    found = summary["massive_activations"]
    top = max(found, key=lambda e: abs(e["value"])) if found else None
    return None if top is None else {key: top[key] for key in ("value", "layer", "dim", "position")}


def model_entry(summary: dict, run_dir: Path) -> dict:
    """One model's row of the cross-model table, from its scan summary."""
    return {
        "model": summary["model"],
        "run": str(run_dir),
        "layers": summary["layers"],
        "heads": summary["heads"],
        "bos_prepended": summary["bos_prepended"],
        "sink_rate": summary["sink_rate"],
        "sink_start_layer": summary["sink_start_layer"],
        "first_token_mass_by_layer": summary["first_token_mass_by_layer"],
        "largest_massive_activation": largest_massive_activation(summary),
        "super_neurons": [{key: n[key] for key in ("layer", "neuron", "ratio")} for n in summary["super_neurons"]],
    }
