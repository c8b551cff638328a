"""StreamingLLM (Xiao et al. 2024) as a press (the class says what it keeps, and kvpress's names).

As in kvpress, kept keys stay at their original positions (the paper re-numbers the cache's
positions: kvpress's ``KeyRerotationPress`` does that; for one compression of a context within the
trained length the original positions are the model's own).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..policy import LayerContext
from ..press import Press
from ..registry import register_policy


@register_policy("streaming_llm")
@dataclass(frozen=True)
class StreamingLLM(Press):
    """StreamingLLM: keep the most recent keys (the score is the position) and the first
    ``keep_sinks`` tokens inside the budget (``keep_sinks=0``: the plain recent window, the paper's
    failing baseline). kvpress's ``StreamingLLMPress(compression_ratio=0.5, n_sink=4)`` is
    ``StreamingLLM(ratio=0.5, keep_sinks=4)``, and kvpress's two names are accepted as they are
    (kvpress keeps 4 sinks unless told otherwise; here none are kept unless asked)."""

    aliases = {**Press.aliases, "n_sink": "keep_sinks"}

    def scores(self, context: LayerContext) -> torch.Tensor:
        batch, kv_heads = context.keys.shape[:2]
        recency = torch.arange(context.length, dtype=torch.float32, device=context.keys.device)
        return recency.expand(batch, kv_heads, context.length)
