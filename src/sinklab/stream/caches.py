"""Sink-preserving KV caches (StreamingLLM, Xiao et al. 2024) for Hugging Face and native models.

The cache keeps the first ``n_sink`` tokens (the attention sinks) and the most recent tokens, so
a model can stream far past its context length at constant memory. ``window`` counts the recent
tokens a query sees *including itself*: attention spans at most ``n_sink + window`` keys.

Positions follow StreamingLLM: keys are kept rotated to their index *in the cache*, and when
tokens are evicted the kept ones are re-rotated back by the number evicted (an exact rotation by
-delta; :func:`rotate_keys`). A query at in-cache position p therefore sees the same relative
distances as in a fresh sequence of the cached tokens. Callers that feed absolute positions
(``model.generate``) still work: the keys returned for attention are shifted to match.

This rotation is the one piece that depends on transformers internals (where the rotary
frequencies live, which RoPE variants are static); it is isolated in :class:`RopeShift` and tested
against keys computed directly at the new positions.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.errors import SinklabError, check
from ..models.native import KVCache

POLICIES = ("dense", "window", "sink", "recompute")
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def check_sizes(n_sink: int, window: int) -> None:
    check(n_sink >= 0, f"the number of sink tokens must be >= 0, got {n_sink}")
    check(window >= 1, f"the window must hold at least 1 token, got {window}")
    check(window > n_sink or n_sink == 0, f"the window ({window}) must be larger than the number of sink tokens ({n_sink})")


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rotate_keys(keys: torch.Tensor, delta, inv_freq: torch.Tensor) -> torch.Tensor:
    """Move RoPE keys (or queries) (B, H, T, D) from their positions to positions + ``delta``, in
    the rotate-half convention: R(p + d) k = R(d) R(p) k, exact up to float rounding.

    ``delta`` is one shift for every token (an int) or one per token, (T,)."""
    delta = torch.as_tensor(delta, dtype=torch.float64, device=keys.device)
    angles = delta.unsqueeze(-1) * inv_freq.to(keys.device, torch.float64)  # (D/2,) or (T, D/2)
    angles = torch.cat([angles, angles], dim=-1)
    cos, sin = angles.cos().to(keys.dtype), angles.sin().to(keys.dtype)
    return keys * cos + rotate_half(keys) * sin


class RopeShift:
    """The rotary frequencies of a Hugging Face model, for exact key re-rotation."""

    def __init__(self, model: nn.Module) -> None:
        rotary = next((m for m in model.modules() if isinstance(getattr(m, "inv_freq", None), torch.Tensor)), None)
        if rotary is None:
            raise SinklabError(f"{type(model).__name__} has no rotary position embedding; the sink cache needs a RoPE model")
        rope = getattr(model.config, "rope_parameters", None) or getattr(model.config, "rope_scaling", None) or {}
        kind = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
        if kind not in STATIC_ROPE_TYPES:
            raise SinklabError(f"RoPE type {kind!r} changes its frequencies with the sequence length; the sink cache supports {', '.join(STATIC_ROPE_TYPES)}")
        self.inv_freq = rotary.inv_freq.detach().float().clone()

    def __call__(self, keys: torch.Tensor, delta) -> torch.Tensor:
        return rotate_keys(keys, delta, self.inv_freq)


# --------------------------------------------------------------------------- Hugging Face


def _transformers_cache_classes():
    from transformers.cache_utils import Cache, DynamicLayer

    return Cache, DynamicLayer


def make_sink_cache(model: nn.Module, n_sink: int, window: int):
    """A transformers ``Cache`` with one :class:`SinkCacheLayer` per decoder layer.

    Use it like any cache: ``model(ids, cache=c)`` in a loop, or ``model.generate(ids, cache=c)``.
    ``n_sink = 0`` gives the plain sliding window (the ``window`` policy).
    """
    check_sizes(n_sink, window)
    Cache, _ = _transformers_cache_classes()
    shift = RopeShift(model)
    n_layers = model.config.get_text_config(decoder=True).num_hidden_layers
    return Cache(layers=[_sink_layer_class()(n_sink, window, shift) for _ in range(n_layers)])


_SINK_LAYER = None


def _sink_layer_class():
    """Define the cache layer lazily, so importing sinklab does not import transformers."""
    global _SINK_LAYER
    if _SINK_LAYER is not None:
        return _SINK_LAYER
    _, DynamicLayer = _transformers_cache_classes()

    class SinkCacheLayer(DynamicLayer):
        """Keeps ``n_sink`` first tokens plus the most recent ``window - 1`` between steps."""

        is_croppable = False

        def __init__(self, n_sink: int, window: int, shift: RopeShift) -> None:
            super().__init__()
            self.n_sink, self.window, self.shift = n_sink, window, shift
            self.positions = torch.zeros(0, dtype=torch.long)  # stream position of every kept token
            self.seen = 0

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n_old, n_new = self.get_seq_length(), key_states.shape[-2]
            offset = _query_offset(kwargs, n_old)  # caller's position minus in-cache position
            if offset:
                key_states = self.shift(key_states, -offset)
            keys = torch.cat([self.keys, key_states], dim=-2)
            values = torch.cat([self.values, value_states], dim=-2)
            self.positions = torch.cat([self.positions, torch.arange(self.seen, self.seen + n_new)])
            self.seen += n_new
            self._store(keys, values)
            if offset:  # present keys at the caller's positions: same relative distances
                keys = self.shift(keys, offset)
            return keys, values

        def _store(self, keys, values) -> None:
            """Keep sinks + the last window - 1 tokens; re-rotate the recent ones to their new index."""
            dropped = keys.shape[-2] - (self.n_sink + self.window - 1)
            if dropped <= 0:
                self.keys, self.values = keys, values
                return
            S = self.n_sink
            self.positions = torch.cat([self.positions[:S], self.positions[S + dropped :]])
            moved = self.shift(keys[..., S + dropped :, :], -dropped)  # slices, no gather
            self.keys = torch.cat([keys[..., :S, :], moved], dim=-2)
            self.values = torch.cat([values[..., :S, :], values[..., S + dropped :, :]], dim=-2)

        def get_max_length(self) -> int:
            return self.n_sink + self.window

    _SINK_LAYER = SinkCacheLayer
    return SinkCacheLayer


def _query_offset(kwargs: dict, n_cached: int) -> int:
    """How far the caller's position ids run ahead of the in-cache positions (0 when none given).

    transformers passes the attention module's keyword arguments to the cache as ``kwargs``;
    ``position_ids`` is among them for models that forward it (Llama, Qwen2, Mistral, ...).
    """
    inner = kwargs.get("kwargs") or {}
    positions = inner.get("position_ids") if isinstance(inner, dict) else None
    if positions is None:
        return 0
    return int(positions.reshape(-1)[0]) - n_cached


def cache_bytes(cache) -> int:
    """Bytes held by a cache's keys and values (transformers or native)."""
    if isinstance(cache, KVCache):
        tensors = list(cache.keys.values()) + list(cache.values.values())
    else:
        tensors = [t for layer in cache.layers for t in (layer.keys, layer.values) if isinstance(t, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


# --------------------------------------------------------------------------- native models


class NativeSinkCache(KVCache):
    """The sink policy for native :class:`~sinklab.models.native.Transformer` models.

    Native models cache keys before rotation and rotate them to their in-cache index at every
    step, so eviction needs no re-rotation at all.
    """

    def __init__(self, n_sink: int, window: int) -> None:
        check_sizes(n_sink, window)
        super().__init__()
        self.n_sink, self.window = n_sink, window

    def store(self, t: torch.Tensor) -> torch.Tensor:
        """The first n_sink and the last window - 1 positions of (B, H, T, D)."""
        dropped = t.shape[2] - (self.n_sink + self.window - 1)
        return t if dropped <= 0 else torch.cat([t[:, :, : self.n_sink], t[:, :, self.n_sink + dropped :]], dim=2)
