"""A compressed cache layer: the kept keys at their original positions, the new tokens after them.

After a press, a layer holds ``K`` of the context's ``C`` keys. :class:`~.pressed_layer.PressedLayer` stores
exactly those (the tensors shrink) and keeps counting the tokens it has been fed, so:

* positions continue at the true position: ``get_seq_length()`` answers the tokens seen (C, then
  C + n), which is where transformers places the next token when no ``position_ids`` are given,
  and how ``generate`` tells which tokens of a conversation the cache has not seen; the kept keys
  keep the rotation of their original positions;
* the attention mask numbers the kept keys as the columns right before the new tokens
  (``get_mask_sizes``), so every new token sees every kept key and the new tokens before it. A
  left-padded batch would put its padding on the wrong kept columns: :func:`check_unpadded` refuses it.

Layers may keep different numbers of keys (PyramidKV). transformers builds one mask per forward
from one layer's sizes, so every pressed layer reports the widest layer's size, and the attention
function (:data:`NARROWED_SDPA`) cuts each layer's mask to its own keys: the last columns, which
hold the new tokens and the kept keys nearest to them, all of them visible.
"""

from __future__ import annotations

from ..core.errors import SinklabError, check

NARROWED_SDPA = "sinklab_pressed_sdpa"


def branch(cache):
    """A copy of ``cache`` that a forward may extend without changing ``cache`` (the tensors are
    shared until a forward concatenates new ones; a pressed layer's count and group are its own, a
    quantized layer's store too): several continuations of one compressed context."""
    import copy

    twin = copy.copy(cache)
    twin.layers = [layer.branched() if hasattr(layer, "branched") else copy.copy(layer) for layer in cache.layers]
    group = [layer for layer in twin.layers if hasattr(layer, "group")]
    for layer in group:
        layer.group = group
    return twin


def narrowed_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' SDPA attention with the mask cut to this layer's keys (see the module's
    docstring): a layer that kept fewer keys than the widest sees the mask's last columns."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if attention_mask is not None and attention_mask.shape[-1] > key.shape[-2]:
        attention_mask = attention_mask[..., -key.shape[-2] :]
    return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask, **kwargs)


def register_narrowed_sdpa() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NARROWED_SDPA, narrowed_attention)
    AttentionMaskInterface.register(NARROWED_SDPA, sdpa_mask)


def check_unpadded(attention_mask) -> None:
    """Refuse a padded batch: its padding would land on the wrong kept columns after a press."""
    if attention_mask is not None and not bool(attention_mask.all()):
        raise SinklabError(
            "a press compresses unpadded contexts only: this batch is padded (its attention_mask has zeros), and after "
            "compression the padding would mask the wrong keys; compress one context at a time or contexts of equal length"
        )


def full_attention_layers(cache) -> list[int]:
    """The cache's layers a press compresses: every full-attention layer. Sliding-window layers are
    left as they are (they already hold at most their window); any other kind of layer is refused."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    chosen = []
    for index, layer in enumerate(cache.layers):
        if isinstance(layer, DynamicSlidingWindowLayer):
            continue
        check(
            type(layer) is DynamicLayer,
            f"a press compresses a dynamic cache; layer {index} of this cache is a {type(layer).__name__} "
            "(use the default cache, or a press's own)",
        )
        chosen.append(index)
    window = getattr(cache.layers[0], "sliding_window", None)
    check(
        chosen,
        f"every layer of this model attends through a sliding window ({window} tokens), which bounds its cache "
        "already; sinklab's presses compress full-attention layers only",
    )
    return chosen
