"""Mitigation pretraining: a small modern LM with any attention variant under one budget
(:mod:`.train`), its data (:mod:`.tokens`), checkpoints, DDP, a run loaded back
(:mod:`.trained`) and ``sinklab compare``."""

from .compare import compare_runs
from .results import COLUMNS, run_row
from .train import PretrainConfig, train_lm
from .trained import load_trained

__all__ = ["COLUMNS", "PretrainConfig", "compare_runs", "load_trained", "run_row", "train_lm"]
