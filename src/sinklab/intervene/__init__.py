"""Interventions: create, move and remove sinks with causal edits (Li et al. 2026; Xiao et al. 2024).

A new intervention is one registered class in :mod:`.interventions`; ``sinklab.applied`` puts
them around any forward, ``generate`` or backward pass of a model the user holds, and
``sinklab.intervene_model`` (``sinklab intervene``) runs each against a baseline."""

from .experiments import DEFAULT_LAMS, Experiment, hooks_of, interventions_for, recordable, validate_all
from .frame import intervene_rows
from .hooked import _hooked as _hooked  # the interventions' part of sinklab.applied: not public
from .interventions import (
    INTERVENTIONS,
    DropFirst,
    Intervention,
    MaskSelf,
    PlainScale,
    ScoreBias,
    ValueZero,
    VarianceAmplify,
    register,
    suppress_sink,
)
from .run import ACCURACY_SETTINGS, INTERVENE, InterveneConfig, apply_interventions, check_accuracy_read, share_at
from .trigger_models import TRIGGER_EDITS, TriggerEditConfig

__all__ = [
    "ACCURACY_SETTINGS",
    "check_accuracy_read",
    "DEFAULT_LAMS",
    "INTERVENE",
    "INTERVENTIONS",
    "TRIGGER_EDITS",
    "DropFirst",
    "Experiment",
    "InterveneConfig",
    "Intervention",
    "MaskSelf",
    "PlainScale",
    "ScoreBias",
    "TriggerEditConfig",
    "ValueZero",
    "VarianceAmplify",
    "apply_interventions",
    "hooks_of",
    "interventions_for",
    "intervene_rows",
    "recordable",
    "register",
    "share_at",
    "suppress_sink",
    "validate_all",
]
