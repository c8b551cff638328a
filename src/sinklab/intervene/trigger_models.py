"""Interventions on trained trigger-lab models (Ran-Milo 2026): the theory says a softmax model
needs its BOS sink to do nothing at non-trigger rows, so removing the sink must raise its error
there, while a ReLU model has no sink to remove."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional

from ..core.attention import AttentionSpec
from ..core.configs import recorded, setting
from ..core.errors import SinklabError
from ..core.results import Capability, RunContext, RunResult, register, stamped, table_rows
from ..trigger import PAPER_ATTNS, TriggerConfig, evaluate_trigger, load_trigger_model, train_trigger
from . import page
from .experiments import Experiment, hooks_of, interventions_for, validate_all
from .interventions import suppress_sink
from .run import InterveneConfig


def migrated_trigger_config(saved: dict) -> dict:
    """Runs before config version 1 recorded an ``InterveneConfig`` of options and the lab folder
    (no edits: the sink suppressed, as those runs did)."""
    saved = recorded(saved, ("edits", "lams", "layers", "heads", "lab_dir"), 0)
    asked = interventions_for(saved["edits"] or {"suppress_sink": True}, saved["lams"], saved["layers"], saved["heads"])
    return {"interventions": [iv.to_record() for iv in asked], "lab_dir": saved["lab_dir"]}


@dataclass
class TriggerEditConfig:
    """Interventions on the one-layer softmax and ReLU trigger models (``sinklab intervene --trigger``)."""

    VERSION: ClassVar[int] = 1
    MIGRATIONS: ClassVar[dict] = {0: migrated_trigger_config}

    interventions: tuple = setting((suppress_sink(0),), help="the interventions, one run each", cli=False)
    lab_dir: Optional[str] = setting(None, help="a trigger lab holding the trained models (None: train them now)", cli=False)

    def __post_init__(self) -> None:
        self.interventions = InterveneConfig(interventions=self.interventions).interventions


def measure(cfg: TriggerEditConfig, context: RunContext = RunContext()) -> RunResult:
    """Apply the interventions to one-layer softmax and ReLU trigger models (loaded from
    ``cfg.lab_dir`` when it holds them, else trained now) and compare the errors before and after.

    The theory says the softmax model needs its BOS sink to do nothing at non-trigger rows, so
    removing the sink must raise the error there; the ReLU model has no sink to remove.
    """
    experiments = [Experiment.of(given) for given in cfg.interventions]
    results = []
    for tcfg in _paper_configs():
        model = _trained_model(tcfg, cfg.lab_dir)
        before = evaluate_trigger(model, tcfg)
        for exp in experiments:
            validate_all(exp.interventions, model.n_layers, model.cfg.n_heads, tcfg.length)
            after = evaluate_trigger(model, tcfg, hooks_of(exp.interventions, model.cfg.n_heads))
            results.append(
                {
                    "model": tcfg.key,
                    "intervention": exp.label,
                    **{
                        f"{name}_{when}": m[name]
                        for name in ("mse_nontrigger", "mse_trigger", "eval_mse")
                        for when, m in (("before", before), ("after", after))
                    },
                    "bos_mass_nontrigger_before": before["heads_detail"][0]["bos_mass_nontrigger"],
                    "bos_mass_nontrigger_after": after["heads_detail"][0]["bos_mass_nontrigger"],
                }
            )
    summary = {
        "lab_dir": cfg.lab_dir,
        "experiments": [[iv.describe() for iv in e.interventions] for e in experiments],
        "results": results,
    }
    return RunResult(stamped(KIND, summary))


KIND = "intervene-trigger"


def trigger_rows(summary: dict):
    """One row per (trigger model, intervention): the errors (MSE) at non-trigger and trigger rows
    and the sink head's BOS mass at non-trigger rows, before and after."""
    return table_rows(summary, summary["results"])


def _paper_configs() -> list[TriggerConfig]:
    return [TriggerConfig(attention=AttentionSpec(attn)) for attn in PAPER_ATTNS]


def preflight(cfg: TriggerEditConfig, context: RunContext) -> None:
    """A ``lab_dir`` that lacks a trained model is refused before the run directory is claimed."""
    if cfg.lab_dir:
        for tcfg in _paper_configs():
            _check_trained(tcfg, cfg.lab_dir)


def _check_trained(cfg: TriggerConfig, lab_dir: str) -> None:
    if not (Path(lab_dir) / "models" / f"{cfg.key}.safetensors").exists():
        raise SinklabError(f"{lab_dir} holds no trained {cfg.key}; run `sinklab trigger --out {lab_dir}` first or omit LAB_DIR")


def _trained_model(cfg: TriggerConfig, lab_dir: Optional[str]):
    if lab_dir:
        _check_trained(cfg, lab_dir)
        return load_trigger_model(Path(lab_dir), cfg)
    return train_trigger(cfg)[0]


TRIGGER_EDITS = register(
    Capability(
        KIND,
        TriggerEditConfig,
        measure,
        lambda out, result: [],
        tables={"results": trigger_rows},
        write_page=page.write,
        preflight=preflight,
    )
)
