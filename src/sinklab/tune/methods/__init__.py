"""The tuning methods, one file each (:mod:`.base` says what a method is): importing this package
registers them all in ``TUNINGS``. A new method is one file here, imported below."""

from .act import ACT
from .base import TUNINGS, Tuning, register_tuning
from .zerotuning import ZeroTuning

__all__ = ["ACT", "TUNINGS", "Tuning", "ZeroTuning", "register_tuning"]
