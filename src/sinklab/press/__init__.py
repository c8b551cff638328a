"""KV-cache presses that keep the sink: compress a context's cache after its prefill, on
transformers 5 (kvpress's idea; kvpress itself needs transformers < 5.3).

``with sinklab.press.applied(model, SnapKV(ratio=0.5, keep_sinks=4)): model.generate(...)``

* :mod:`.base`: what a press is (``ratio``, ``keep_sinks``), the registry, how positions are kept;
* one file per press: :mod:`.streaming_llm`, :mod:`.h2o`, :mod:`.snapkv`, :mod:`.tova`,
  :mod:`.knorm`, :mod:`.keydiff`, :mod:`.random`, :mod:`.pyramidkv`;
* :mod:`.applied` (the ``with`` block), :mod:`.cache` (the compressed cache layer),
  :mod:`.attention` (the prefill's attention, summed on arrival), :mod:`.sinks` (detected sinks);
* KV quantization that protects the sink: :mod:`.packing` (packed integers), :mod:`.quantized`
  (KIVI, static INT8/INT4 with the sink as a prefix), :mod:`.quanto` (transformers' baseline).

A new press is one file: a frozen dataclass subclass of :class:`Press` with ``@register("name")``
and a ``scores`` method, imported below.
"""

from .applied import Pressing, applied, attention_for
from .attention import tallied
from .base import DETECTED, PRESSES, Compression, LayerContext, Press, check_ratio, compress, press_named, register
from .cache import branch
from .h2o import H2O
from .keydiff import KeyDiff
from .knorm import Knorm
from .pyramidkv import PyramidKV
from .quantized import KIVI, StaticKV, calibrate, quantize_cache
from .quanto import QuantoKV, check_quanto
from .random import Random
from .snapkv import SnapKV
from .streaming_llm import StreamingLLM
from .tova import TOVA

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
