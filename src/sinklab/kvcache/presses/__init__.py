"""The presses, one file each: a frozen dataclass subclass of :class:`~..press.Press` with
``@register_policy("name")`` and a ``scores`` method, imported here so that it registers."""

from .adakv import AdaKV
from .h2o import H2O
from .keydiff import KeyDiff
from .knorm import Knorm
from .pyramidkv import PyramidKV
from .random import Random
from .snapkv import SnapKV
from .streaming_llm import StreamingLLM
from .tova import TOVA

__all__ = ["H2O", "AdaKV", "TOVA", "KeyDiff", "Knorm", "PyramidKV", "Random", "SnapKV", "StreamingLLM"]
