"""transformers' own ``QuantizedCache`` (quanto backend) as the baseline of sink-protected KV
quantization: each full-attention layer becomes a ``QuantoQuantizedLayer`` fed the context, which
quantizes the whole context at its first update (groups of ``group_size`` along the channels of
each token, 2 or 4 bits) and protects no sink; tokens after it stay in a full-precision window of
up to ``residual`` tokens before they are quantized too (transformers' rule). Its bytes are
counted from quanto's own tensors (packed integers, scales and shifts). Needs ``optimum-quanto``;
refused in one line where it is missing."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..core.errors import SinklabError, check
from ..stream import cache_bytes
from .base import started

MISSING = "the quanto baseline needs optimum-quanto: pip install optimum-quanto"


def check_quanto() -> None:
    """Refuse, in one line and before any work, the quanto baseline where optimum-quanto is missing."""
    try:
        found = importlib.util.find_spec("optimum.quanto") is not None
    except ModuleNotFoundError:  # no optimum at all
        found = False
    check(found, MISSING)


@dataclass(frozen=True)
class QuantoKV:
    """The baseline KV quantizer: transformers' own quanto ``QuantizedCache`` layers, ``bits`` 2 or 4
    in groups of ``group_size`` channels per token, the last ``residual`` new tokens in full
    precision, no sink protected. ``QuantoKV(bits=2).apply(cache)`` after a prefill; needs
    ``optimum-quanto``."""

    bits: int = 4
    group_size: int = 64
    residual: int = 128

    name: ClassVar[str] = "quanto"
    protect: ClassVar[int] = 0
    window_rows: ClassVar[int] = 0
    per_layer_budgets: ClassVar[bool] = False
    recording: ClassVar[frozenset] = frozenset()

    def __post_init__(self) -> None:
        check(self.bits in (2, 4), f"quanto's KV cache quantizes to 2 or 4 bits, got {self.bits}")

    def label(self) -> str:
        return f"quanto {self.bits}-bit"

    def apply(self, cache, tally=None):
        """Every full-attention layer of ``cache`` as transformers' quanto layer, fed the context."""
        from transformers.cache_utils import QuantoQuantizedLayer

        layers, report = started(cache)
        length = report.length
        for index in layers:
            dense = cache.layers[index]
            try:
                layer = QuantoQuantizedLayer(nbits=self.bits, q_group_size=self.group_size, residual_length=self.residual)
            except ImportError:
                raise SinklabError(MISSING) from None
            layer.update(dense.keys, dense.values)
            cache.layers[index] = layer
            report.positions[index] = torch.arange(length).expand(*dense.keys.shape[:2], -1)
        quantized = [getattr(cache.layers[i], f"_quantized_{part}", None) for i in layers for part in ("keys", "values")]
        report.bytes_after = cache_bytes(cache) + sum(stored_bytes(q) for q in quantized if q is not None)
        return report


def stored_bytes(tensor: torch.Tensor) -> int:
    """Bytes of a tensor, or of the tensors inside a tensor subclass (quanto's packed data, scales
    and shifts), counted down to plain tensors."""
    if hasattr(tensor, "__tensor_flatten__"):
        names, _ = tensor.__tensor_flatten__()
        return sum(stored_bytes(getattr(tensor, name)) for name in names)
    return tensor.numel() * tensor.element_size()
