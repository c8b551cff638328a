"""Deprecated: ``sinklab.press`` is now :mod:`sinklab.kvcache` (it holds the quantizers too).

Every public name of the old package is here under its old name, with a DeprecationWarning on
import: ``compress`` and ``quantize_cache`` are :func:`~sinklab.kvcache.rewrite`, ``press_named``
is :func:`~sinklab.kvcache.policy_named`, ``register`` is :func:`~sinklab.kvcache.register_policy`.
It goes in sinklab 0.3.
"""

import warnings

from .. import kvcache as _kvcache
from ..kvcache import (
    DETECTED,
    H2O,
    KIVI,
    PRESSES,
    TOVA,
    Compression,
    KeyDiff,
    Knorm,
    LayerContext,
    Press,
    Pressing,
    PyramidKV,
    QuantoKV,
    Random,
    SnapKV,
    StaticKV,
    StreamingLLM,
    attention_for,
    branch,
    calibrate,
    check_quanto,
    check_ratio,
    tallied,
)
from ..kvcache import policy_named as press_named
from ..kvcache import register_policy as register
from ..kvcache import rewrite as compress
from ..kvcache import rewrite as quantize_cache

applied = _kvcache.applied  # the function (``kvcache.applied`` is also its module's name)

warnings.warn("sinklab.press is now sinklab.kvcache; sinklab.press goes in 0.3", DeprecationWarning, stacklevel=2)

__all__ = [
    "DETECTED",
    "H2O",
    "KIVI",
    "PRESSES",
    "TOVA",
    "Compression",
    "KeyDiff",
    "Knorm",
    "LayerContext",
    "Press",
    "Pressing",
    "PyramidKV",
    "QuantoKV",
    "Random",
    "SnapKV",
    "StaticKV",
    "StreamingLLM",
    "applied",
    "attention_for",
    "branch",
    "calibrate",
    "check_quanto",
    "check_ratio",
    "compress",
    "press_named",
    "quantize_cache",
    "register",
    "tallied",
]
