"""The value-state norm at position 0 before any gate (issue 52).

Value-State Gated Attention (Bu et al. 2025) claims to stabilise the value states' norms: with a
gate to silence a token, the sink no longer needs its value drained toward zero (Guo et al. 2024).
The scan's ``value_drain`` cannot show that, because it reads the values the heads aggregate,
after the value gate has acted (``attn.hook_v``). This reads them where the attention's ``qkv``
projection makes them, before any value-stage extra; without one, the two are the same numbers.
"""

from __future__ import annotations

import torch

from ..models.native import Transformer
from ..scan import norm_ratio_first


@torch.no_grad()
def value_state_drain(model: Transformer, windows: torch.Tensor) -> list[float]:
    """Per layer, the first position's value-state norm over the mean of the other positions'
    (:func:`~sinklab.scan.norm_ratio_first`), each norm averaged over heads and summed over
    ``windows`` (B, T) as the scan's recorder does."""
    sums: list = [None] * len(model.blocks)

    def recorder(layer: int, n_heads: int, head_dim: int):
        def hook(module, args, qkv: torch.Tensor) -> None:
            B, T, _ = qkv.shape
            norms = qkv.view(B, T, 3, n_heads, head_dim)[:, :, 2].float().norm(dim=-1).mean(-1).sum(0)  # (T,)
            sums[layer] = norms if sums[layer] is None else sums[layer] + norms

        return hook

    handles = [
        block.attn.qkv.register_forward_hook(recorder(i, block.attn.n_heads, block.attn.head_dim))
        for i, block in enumerate(model.blocks)
    ]
    try:
        model(windows)
    finally:
        for handle in handles:
            handle.remove()
    return [float(norm_ratio_first(s)) for s in sums]
