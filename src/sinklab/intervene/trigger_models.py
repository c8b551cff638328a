"""Interventions on trained trigger-lab models (Ran-Milo 2026): the theory says a softmax model
needs its BOS sink to do nothing at non-trigger rows, so removing the sink must raise its error
there, while a ReLU model has no sink to remove."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Optional

from ..core.attention import AttentionSpec
from ..core.errors import SinklabError
from ..core.results import stamped
from ..core.runs import prepare_run_dir, write_json
from ..trigger import PAPER_ATTNS, TriggerConfig, evaluate_trigger, load_trigger_model, train_trigger
from . import page
from .interventions import hooks_of, validate_all
from .run import InterveneConfig


def run_trigger_interventions(cfg: InterveneConfig, lab_dir: Optional[str] = None) -> dict:
    """Apply interventions to one-layer softmax and ReLU trigger models (loaded from ``lab_dir``
    when it holds them, else trained now) and compare the errors before and after.

    The theory says the softmax model needs its BOS sink to do nothing at non-trigger rows, so
    removing the sink must raise the error there; the ReLU model has no sink to remove.
    """
    asked = {**asdict(cfg), "lab_dir": lab_dir}
    if not cfg.edits:
        cfg = replace(cfg, edits={"suppress_sink": True})
    experiments = cfg.experiments()
    out = prepare_run_dir(cfg.out)
    write_json(out / "config.json", asked)
    results = []
    for attn in PAPER_ATTNS:
        tcfg = TriggerConfig(attention=AttentionSpec(attn))
        model = _trained_model(tcfg, lab_dir)
        before = evaluate_trigger(model, tcfg)
        for exp in experiments:
            validate_all(exp.interventions, model.n_layers, model.cfg.n_heads, tcfg.length)
            after = evaluate_trigger(model, tcfg, hooks_of(exp.interventions, model.cfg.n_heads))
            results.append(
                {
                    "model": tcfg.key,
                    "intervention": exp.label,
                    **{f"{name}_{when}": m[name] for name in ("mse_nontrigger", "mse_trigger", "eval_mse") for when, m in (("before", before), ("after", after))},
                    "bos_mass_nontrigger_before": before["heads_detail"][0]["bos_mass_nontrigger"],
                    "bos_mass_nontrigger_after": after["heads_detail"][0]["bos_mass_nontrigger"],
                }
            )
    summary = {"lab_dir": lab_dir, "experiments": [[iv.describe() for iv in e.interventions] for e in experiments], "results": results}
    write_json(out / "summary.json", stamped("intervene-trigger", summary))
    page.write(out)
    return summary


def _trained_model(cfg: TriggerConfig, lab_dir: Optional[str]):
    if lab_dir and (Path(lab_dir) / "models" / f"{cfg.key}.safetensors").exists():
        return load_trigger_model(Path(lab_dir), cfg)
    if lab_dir:
        raise SinklabError(f"{lab_dir} holds no trained {cfg.key}; run `sinklab trigger --out {lab_dir}` first or omit LAB_DIR")
    return train_trigger(cfg)[0]
