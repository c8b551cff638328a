"""Interventions: create, move and remove sinks with causal edits (Li et al. 2026; Xiao et al. 2024).

A new intervention is one registered class in :mod:`.interventions`; :func:`applied` puts a list of
them around any forward, ``generate`` or backward pass of a model the user holds."""

from .applied import applied
from .frame import intervene_rows
from .interventions import (
    INTERVENTIONS,
    DropFirst,
    Experiment,
    Intervention,
    MaskSelf,
    PlainScale,
    ScoreBias,
    ValueZero,
    VarianceAmplify,
    experiments_for,
    hooks_of,
    register,
    suppress_sink,
    validate_all,
)
from .run import InterveneConfig, apply_interventions, measure_intervene, run_intervene, share_at
from .trigger_models import run_trigger_interventions

__all__ = [
    "INTERVENTIONS",
    "DropFirst",
    "Experiment",
    "InterveneConfig",
    "Intervention",
    "MaskSelf",
    "PlainScale",
    "ScoreBias",
    "ValueZero",
    "VarianceAmplify",
    "applied",
    "apply_interventions",
    "experiments_for",
    "hooks_of",
    "intervene_rows",
    "measure_intervene",
    "register",
    "run_intervene",
    "run_trigger_interventions",
    "share_at",
    "suppress_sink",
    "validate_all",
]
