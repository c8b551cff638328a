"""The pressed attention: transformers' SDPA with each layer's mask cut to the keys that layer holds,
and each head's padding masked where its heads hold different numbers of keys.

transformers builds one mask per forward from one layer's sizes; after a policy that leaves layers
with different numbers of keys (PyramidKV), every rewritten layer reports the widest layer's size
(:mod:`.layers`), and this attention function cuts each layer's mask to its own keys: the last
columns, which hold the new tokens and the kept keys nearest to them, all of them visible. A layer
whose heads hold different numbers of keys (AdaKV, :class:`~.layers.RaggedLayer`) pads them to its
longest and marks the padding on its keys; the mask then hides it per head. It is registered under
:data:`NARROWED_SDPA` and switched on only inside the ``applied`` block of such a policy
(:func:`attention_for`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

from ..core.errors import check

NARROWED_SDPA = "sinklab_pressed_sdpa"


def narrowed_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' SDPA attention with the mask cut to this layer's keys (a layer that kept fewer
    keys than the widest sees the mask's last columns), and a ragged layer's padding hidden."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from .layers import PADDING

    if attention_mask is not None and attention_mask.shape[-1] > key.shape[-2]:
        attention_mask = attention_mask[..., -key.shape[-2] :]
    held = getattr(key, PADDING, None)
    if held is not None:
        attention_mask = _with_padding(attention_mask, held, query.shape[1] // key.shape[1], query.shape[-2], key.shape[-2])
    return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask, **kwargs)


def _with_padding(mask, held, groups: int, queries: int, keys: int):
    """(B, Hq, queries, keys) bool: ``mask`` (bool, additive or None: causal over the last
    ``queries`` keys) and each KV head's held slots, repeated over its group of query heads."""
    if mask is None:
        rows = torch.arange(keys - queries, keys, device=held.device)
        mask = torch.arange(keys, device=held.device)[None, :] <= rows[:, None]
    elif mask.dtype != torch.bool:
        mask = mask > torch.finfo(mask.dtype).min / 2
    return mask & held.repeat_interleave(groups, dim=1)


def register_narrowed_sdpa() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NARROWED_SDPA, narrowed_attention)
    AttentionMaskInterface.register(NARROWED_SDPA, sdpa_mask)


@contextmanager
def attention_for(model: nn.Module, policies) -> Iterator[None]:
    """Within the block the model attends as a cache rewritten by ``policies`` (one policy or
    several) needs: unchanged, except that per-layer budgets need each layer's mask cut to its keys."""
    policies = list(policies) if isinstance(policies, (list, tuple)) else [policies]
    uneven = [p for p in policies if p.per_layer_budgets]
    if not uneven:
        yield
        return
    previous = model.config._attn_implementation
    check(
        previous == "sdpa",
        f"{uneven[0].name} keeps a different number of keys per layer, which sinklab's cache supports under the sdpa "
        f"attention only; this model uses {previous!r} (load it with attn_implementation='sdpa')",
    )
    register_narrowed_sdpa()
    model.set_attn_implementation(NARROWED_SDPA)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)
