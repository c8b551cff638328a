"""KV-cache policies that keep the sink: presses that evict and quantizers that store fewer bits,
applied to a cache a prefill has just filled, on transformers 5 (kvpress's idea; kvpress itself
needs transformers < 5.3).

``with sinklab.applied(model, SnapKV(ratio=0.5, keep_sinks=4), KIVI(bits=4, protect=4)):
model.generate(...)`` (evict, then quantize what is kept; either alone works the same way;
``with SnapKV(ratio=0.5, keep_sinks=4)(model):`` is kvpress's spelling of one policy's block).

* :mod:`.policy`: what every policy is; :mod:`.rewriting`: the one rewrite routine every policy runs
  through; :mod:`.registry`: the registry and the sink vocabulary;
* :mod:`.press` and one file per press in :mod:`.presses` (StreamingLLM, H2O, SnapKV, TOVA, Knorm,
  KeyDiff, Random, PyramidKV);
* :mod:`.quantizer` and one file per quantizer in :mod:`.quantizers` (KIVI, static INT8/INT4 with
  the sink as a prefix, transformers' quanto as the baseline), their packed storage in :mod:`.packing`;
* :mod:`.layers` (the cache layers a policy leaves), :mod:`.narrowed` (the attention for layers of
  different widths), :mod:`.tally` (the prefill's attention, summed on arrival), :mod:`.sinks`
  (detected sinks), :mod:`.block` (the policies' part of the ``with`` block), :mod:`.decoding` (a press applied while
  decoding: ``DecodingPress(SnapKV(keep_sinks=4), budget=512, every=64)``).

A new press or quantizer is one file in :mod:`.presses` or :mod:`.quantizers` (DEVELOPERS.md).
"""

from .block import CacheState
from .block import _rewriting as _rewriting  # the policies' part of sinklab.applied: not public
from .decoding import DecodingPress, DecodingState, budget_tokens, held_apart, least_budget
from .narrowed import attention_for
from .policy import CachePolicy, Compression, LayerContext, recording
from .press import Press, check_ratio
from .presses import H2O, TOVA, AdaKV, KeyDiff, Knorm, PyramidKV, Random, SnapKV, StreamingLLM
from .quantizer import PROTECTS, Quantizer
from .quantizers import KIVI, QuantoKV, StaticKV, calibrate, check_quanto
from .registry import DETECTED, POLICIES, PRESSES, QUANTIZERS, policy_named, register_policy
from .rewriting import branch, rewrite
from .tally import tallied

__all__ = [
    "DETECTED",
    "H2O",
    "KIVI",
    "POLICIES",
    "PRESSES",
    "PROTECTS",
    "QUANTIZERS",
    "TOVA",
    "CachePolicy",
    "CacheState",
    "AdaKV",
    "Compression",
    "DecodingPress",
    "DecodingState",
    "KeyDiff",
    "Knorm",
    "LayerContext",
    "Press",
    "PyramidKV",
    "Quantizer",
    "QuantoKV",
    "Random",
    "SnapKV",
    "StaticKV",
    "StreamingLLM",
    "attention_for",
    "branch",
    "budget_tokens",
    "calibrate",
    "check_quanto",
    "check_ratio",
    "held_apart",
    "least_budget",
    "policy_named",
    "recording",
    "register_policy",
    "rewrite",
    "tallied",
]
