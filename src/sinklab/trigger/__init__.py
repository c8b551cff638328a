"""The trigger-conditional lab (Ran-Milo 2026): softmax must sink, ReLU need not.

:mod:`.task` the exact task; :mod:`.config` one model's recipe; :mod:`.train` one model,
:mod:`.ensemble` many seeds as one batched computation; :mod:`.evaluate`; :mod:`.lab` resumable
grids; :mod:`.analyses` tables and the exact ReLU construction; :mod:`.report` figures.
"""

from .analyses import VARIANT_SEEDS, check_relu_construction
from .config import TriggerConfig
from .ensemble import Ensemble, train_members
from .evaluate import evaluate_trigger
from .lab import PAPER_ATTNS, PAPER_SHAPES, QUICK_SHAPES, cap_configs, load_trigger_model, paper_configs, variant_configs
from .report import CAP_COLUMNS, VARIANT_COLUMNS
from .run import CONSTRUCT, LAB, ConstructConfig, LabConfig, run_lab
from .task import TriggerTask
from .train import train_trigger

__all__ = [
    "CAP_COLUMNS",
    "CONSTRUCT",
    "LAB",
    "ConstructConfig",
    "LabConfig",
    "check_relu_construction",
    "PAPER_ATTNS",
    "PAPER_SHAPES",
    "QUICK_SHAPES",
    "VARIANT_COLUMNS",
    "VARIANT_SEEDS",
    "Ensemble",
    "TriggerConfig",
    "TriggerTask",
    "cap_configs",
    "evaluate_trigger",
    "load_trigger_model",
    "paper_configs",
    "run_lab",
    "train_members",
    "train_trigger",
    "variant_configs",
]
