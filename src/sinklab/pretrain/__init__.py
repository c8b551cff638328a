"""Mitigation pretraining: a small modern LM with any attention variant under one budget
(:mod:`.config`, :mod:`.train`, run by :mod:`.run`), its data (:mod:`.tokens`), checkpoints, DDP, a run loaded
back (:mod:`.trained`), ``sinklab compare`` (:mod:`.compare`), ``sinklab sweep`` (:mod:`.sweep`) and
``sinklab export`` (:mod:`.export`: a run as a Hugging Face Llama folder)."""

from .compare import COMPARE_RUNS, CompareRunsConfig
from .config import PretrainConfig
from .export import export_llama, exported_from
from .results import COLUMNS, run_row
from .run import PRETRAIN, architecture_of, train_lm
from .sweep import SWEEP, SweepConfig, run_sweep
from .trained import load_trained

__all__ = [
    "COLUMNS",
    "COMPARE_RUNS",
    "PRETRAIN",
    "SWEEP",
    "CompareRunsConfig",
    "PretrainConfig",
    "SweepConfig",
    "architecture_of",
    "export_llama",
    "exported_from",
    "load_trained",
    "run_row",
    "run_sweep",
    "train_lm",
]
