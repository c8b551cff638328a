"""The sink as a lever for accuracy: ZeroTuning and ACT (``sinklab tune``, ``sinklab.tune_model``).

How much attention each head pays its sink sets how sharply it attends to everything else, so
editing that share changes what a frozen model gets right, with no training. :class:`ZeroTuning`
scales each head's attention to the initial token by a tuned factor (Han et al., ICLR 2026);
:class:`ACT` finds each input's sinks after the first token in chosen heads and gives part of their
attention back to the other keys (Yu et al., ICML 2024). A run profiles the heads on a task's
validation split, chooses the tuning there and judges it on the test split through
lm-evaluation-harness (:mod:`sinklab.accuracy`); ``with sinklab.applied(model, tuning):``
applies a tuning around any forward, ``generate`` or lm-eval run, and :func:`load_tuning` reads a
saved one back. The edits themselves (:class:`InitialTokenScale`, :class:`SinkCalibration`) are
interventions, which ``sinklab.applied`` takes too."""

from .config import DEFAULT_TASKS, METHODS, READ_BY_METHOD, TuneConfig, check_method_read
from .edits import InitialTokenScale, SinkCalibration
from .methods import ACT, TUNINGS, Tuning, ZeroTuning, register_tuning
from .run import TUNE
from .tunings import from_record, load_tuning, save_tuning, to_record, tuning_edits

__all__ = [
    "READ_BY_METHOD",
    "check_method_read",
    "tuning_edits",
    "ACT",
    "DEFAULT_TASKS",
    "METHODS",
    "TUNE",
    "TUNINGS",
    "Tuning",
    "InitialTokenScale",
    "SinkCalibration",
    "TuneConfig",
    "ZeroTuning",
    "from_record",
    "load_tuning",
    "register_tuning",
    "save_tuning",
    "to_record",
]
