"""StreamingLLM (Xiao et al. 2024) as a press: keep the first tokens and the most recent ones.

The score is the position itself, so the budget goes to the most recent tokens; the sinks come
from ``keep_sinks`` (kvpress's ``StreamingLLMPress(n_sink=4)`` is ``StreamingLLM(keep_sinks=4)``
here, and ``keep_sinks=0`` is the plain recent window, StreamingLLM's failing baseline). As in
kvpress, kept keys stay at their original positions (the paper re-numbers the cache's positions:
kvpress's ``KeyRerotationPress`` does that; for one compression of a context within the trained
length the original positions are the model's own).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import LayerContext, Press, register


@register("streaming_llm")
@dataclass(frozen=True)
class StreamingLLM(Press):
    def scores(self, context: LayerContext) -> torch.Tensor:
        batch, kv_heads = context.keys.shape[:2]
        recency = torch.arange(context.length, dtype=torch.float32, device=context.keys.device)
        return recency.expand(batch, kv_heads, context.length)
