"""transformers' own ``QuantizedCache`` (quanto backend) as the baseline of sink-protected KV
quantization: each full-attention layer becomes a ``QuantoQuantizedLayer`` fed the context, which
quantizes the whole context at its first update (groups of ``group_size`` along the channels of
each token, 2 or 4 bits) and protects no sink; tokens after it stay in a full-precision window of
up to ``residual`` tokens before they are quantized too (transformers' rule). Its bytes are
counted from quanto's own tensors (packed integers, scales and shifts). It holds a whole context
only: after a press it is refused. Needs ``optimum-quanto``;
refused in one line where it is missing."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from ...core.errors import SinklabError, check
from ..policy import LayerContext
from ..quantizer import Quantizer
from ..registry import register_policy

MISSING = "the quanto baseline needs optimum-quanto: pip install optimum-quanto"


def check_quanto() -> None:
    """Refuse, in one line and before any work, the quanto baseline where optimum-quanto is missing."""
    try:
        found = importlib.util.find_spec("optimum.quanto") is not None
    except ModuleNotFoundError:  # no optimum at all
        found = False
    check(found, MISSING)


@register_policy("quanto")
@dataclass(frozen=True)
class QuantoKV(Quantizer):
    """The baseline KV quantizer: transformers' own quanto ``QuantizedCache`` layers, ``bits`` 2 or 4
    in groups of ``group_size`` channels per token, the last ``residual`` new tokens in full
    precision, no sink protected. ``QuantoKV(bits=2).apply(cache)`` after a prefill; needs
    ``optimum-quanto``."""

    bits: int = 4
    protect: int = 0
    group_size: int = 64
    residual: int = 128

    bit_widths = (2, 4)
    protects = "none"

    @classmethod
    def check_usable(cls, head_dim: int, settings: dict) -> None:
        check_quanto()

    def label(self) -> str:
        return f"quanto {self.bits}-bit"

    def rewritten(self, context: LayerContext, sinks: list[int], group: list):
        """The layer as transformers' quanto layer (:class:`~..layers.QuantoLayer`), fed the context."""
        from ..layers import QuantoLayer

        check(context.positions is None, "quanto's layer (transformers') holds a whole context: apply it without a press")
        try:
            layer = QuantoLayer(nbits=self.bits, q_group_size=self.group_size, residual_length=self.residual)
        except ImportError:
            raise SinklabError(MISSING) from None
        layer.update(context.keys, context.values)
        return layer, context.held_positions()
