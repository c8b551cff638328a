"""Mitigation pretraining: a small modern LM with any attention variant under one budget
(:mod:`.train`), its data (:mod:`.tokens`), checkpoints, DDP, and ``sinklab compare``."""

from .compare import compare_runs
from .results import COLUMNS, run_row
from .train import PretrainConfig, load_trained, train_lm

__all__ = ["COLUMNS", "PretrainConfig", "compare_runs", "load_trained", "run_row", "train_lm"]
