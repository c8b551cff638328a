"""The layer of a compressed cache (:class:`PressedLayer`), a transformers ``DynamicLayer``: this
module imports transformers, so :func:`~.base.compress` imports it only when it compresses a cache
(``import sinklab.press`` stays light). The design is in :mod:`.cache`."""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer


class PressedLayer(DynamicLayer):
    """A full-attention cache layer after a press: ``keys``/``values`` hold only the kept
    positions; ``seen`` counts every token fed; ``group`` is the list of the cache's pressed
    layers, whose widest sets the mask's size."""

    is_croppable = False  # cropping n tokens would cut kept context keys once fewer were fed

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, seen: int, group: list) -> None:
        super().__init__()
        self.lazy_initialization(keys, values)
        self.keys, self.values, self.seen, self.group = keys, values, seen, group
        group.append(self)

    def update(self, key_states, value_states, *args, **kwargs):
        self.seen += key_states.shape[-2]
        return super().update(key_states, value_states, *args, **kwargs)

    def stored(self) -> int:
        return self.keys.shape[-2]

    def get_seq_length(self) -> int:
        return self.seen

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        width = max(layer.stored() for layer in self.group)
        return width + query_length, self.seen - width
