"""Sink-preserving KV caches (StreamingLLM, Xiao et al. 2024) for Hugging Face and native models.

The cache keeps the first ``n_sink`` tokens (the attention sinks) and the most recent tokens, so
a model can stream far past its context length at constant memory. ``window`` counts the recent
tokens a query sees *including itself*: attention spans at most ``n_sink + window`` keys.

Positions follow StreamingLLM: a query at in-cache position p sees every kept key at its index in
the cache, so the relative distances are those of a fresh sequence of the cached tokens. Each key
is stored exactly as the model rotated it, with the position it was rotated at; the keys handed to
attention are moved from there to their current index by **one** rotation per step. Re-rotating
the stored keys by -1 at every eviction instead would compound rounding: after ~1,000 evictions a
bfloat16 key is off by tens of percent (BENCHMARKS.md, section 5).

Angles are those transformers computes (``float32(position) * float32(inv_freq)``), so a moved key
is the key the model would have rotated at the target position, and queries and keys stay
consistent at any absolute position (``model.generate`` passes absolute positions; far past
10^5 tokens those float32 angles themselves drift, for the model as much as for the cache).

The caller's positions are read where the model uses them: a forward pre-hook on the rotary module
records the ``position_ids`` of every call, so models that do not pass positions to the cache
(GPT-NeoX) stream correctly too. This is the one piece that depends on transformers internals; it
is isolated in :class:`RopeShift` and tested against keys computed directly at the new positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

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


def rope_angles(positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """(T, D/2) float64 angles as transformers computes them: a float32 product, then widened."""
    return (positions.to(torch.float32).unsqueeze(-1) * inv_freq.to(positions.device, torch.float32)).double()


def rotation(angles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, signed sin), float32 (..., D), of float64 ``angles`` (..., D/2) for :func:`rotate`.

    In the rotate-half layout dimension i pairs with i + D/2, and the rotated key is
    x cos + (-x2, x1) sin; swapping the halves is a roll by D/2, so the sign of the first half
    is folded into the sine here and :func:`rotate` needs three tensor operations."""
    cos, sin = angles.cos(), angles.sin()
    return torch.cat([cos, cos], dim=-1).float(), torch.cat([-sin, sin], dim=-1).float()


def rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotate RoPE keys or queries (..., T, D) by a :func:`rotation`. The products run in float32
    and round once to ``x``'s dtype. With partial rotary embeddings (GPT-NeoX, Phi) only the first
    ``cos.shape[-1]`` dimensions rotate; the rest pass through."""
    width = cos.shape[-1]
    wide, rest = x[..., :width].float(), x[..., width:]
    rotated = torch.addcmul(wide * cos, wide.roll(width // 2, dims=-1), signed_sin).to(x.dtype)
    return torch.cat([rotated, rest], dim=-1) if rest.shape[-1] else rotated


class RopeShift:
    """The rotary frequencies of a Hugging Face model and the positions of its latest forward."""

    def __init__(self, model: nn.Module) -> None:
        rotary = next((m for m in model.modules() if isinstance(getattr(m, "inv_freq", None), torch.Tensor)), None)
        if rotary is None:
            raise SinklabError(f"{type(model).__name__} has no rotary position embedding; the sink cache needs a RoPE model")
        _check_rope_config(model.config)
        self.inv_freq = rotary.inv_freq.detach().float().clone()
        self.tap = _position_tap(rotary)

    def rotation(self, source: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The :func:`rotation` that moves keys rotated at ``source`` (T,) to ``target`` (T,)."""
        return rotation(rope_angles(target, self.inv_freq) - rope_angles(source, self.inv_freq))

    def move(self, x: torch.Tensor, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """``x`` (..., T, D), rotated by the model at positions ``source`` (T,), rotated instead at
        ``target`` (T,), in one rotation."""
        if torch.equal(source, target):
            return x
        cos, sin = self.rotation(source, target)
        return rotate(x, cos.to(x.device), sin.to(x.device))


def _check_rope_config(config) -> None:
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if isinstance(rope, dict) and rope and all(isinstance(v, dict) for v in rope.values()):
        raise SinklabError(f"RoPE parameters per layer type ({', '.join(rope)}) are not supported by the sink cache: it assumes one set of rotary frequencies")
    kind = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    if kind not in STATIC_ROPE_TYPES:
        raise SinklabError(f"RoPE type {kind!r} changes its frequencies with the sequence length; the sink cache supports {', '.join(STATIC_ROPE_TYPES)}")


class _PositionTap:
    """Holds the ``position_ids`` the rotary module was last called with."""

    def __init__(self) -> None:
        self.positions = None

    def __call__(self, module, args, kwargs) -> None:
        self.positions = kwargs["position_ids"] if "position_ids" in kwargs else args[1]


def _position_tap(rotary: nn.Module) -> _PositionTap:
    """The tap on ``rotary``, installed once per model (a forward pre-hook that only records)."""
    tap = getattr(rotary, "_sinklab_position_tap", None)
    if tap is None:
        tap = _PositionTap()
        rotary.register_forward_pre_hook(tap, with_kwargs=True)
        rotary._sinklab_position_tap = tap
    return tap


# --------------------------------------------------------------------------- Hugging Face


def _transformers_cache_classes():
    from transformers.cache_utils import Cache, DynamicLayer

    return Cache, DynamicLayer


def make_sink_cache(model: nn.Module, n_sink: int, window: int):
    """A transformers ``Cache`` with one ``SinkCacheLayer`` per decoder layer.

    Use it like any cache: ``model(ids, cache=c)`` in a loop, or ``model.generate(ids, cache=c)``,
    one sequence at a time. ``n_sink = 0`` gives the plain sliding window (the ``window`` policy).
    Feed single tokens for exact streaming: a chunk of n tokens attends like a prefill (each of its
    tokens sees the kept cache and the chunk's earlier tokens, up to ``n_sink + window - 1 + n``
    keys), and the cache is trimmed after it.
    """
    check_sizes(n_sink, window)
    Cache, _ = _transformers_cache_classes()
    book = _SinkBook(n_sink, window, RopeShift(model))
    n_layers = model.config.get_text_config(decoder=True).num_hidden_layers
    return Cache(layers=[_sink_layer_class()(book, index) for index in range(n_layers)])


class _SinkBook:
    """What every layer of one sink cache shares: which stream tokens are kept, where the model
    rotated their keys, and this step's plan (worked out once, by layer 0, for all layers)."""

    def __init__(self, n_sink: int, window: int, rope: RopeShift) -> None:
        self.n_sink, self.window, self.rope = n_sink, window, rope
        self.reset()

    def reset(self) -> None:
        self.positions = torch.zeros(0, dtype=torch.long)  # stream index of every kept token
        self.rotated_at = torch.zeros(0, dtype=torch.long)  # where the model rotated its key
        self.seen = 0
        self.step: Optional[_Step] = None

    def begin_step(self, n_new: int, device) -> "_Step":
        """Plan a forward that feeds ``n_new`` tokens: the rotation (on ``device``, the keys') that
        presents the kept and the new keys at their cache index, and how many tokens to drop after it."""
        n_old = len(self.rotated_at)
        caller = _caller_positions(self.rope.tap, n_new)
        rotated_at = torch.cat([self.rotated_at, caller])
        target = _presented_positions(caller, n_old, len(rotated_at))
        positions = torch.cat([self.positions, torch.arange(self.seen, self.seen + n_new)])
        dropped = max(0, len(rotated_at) - (self.n_sink + self.window - 1))
        rotation = None if torch.equal(rotated_at, target) else tuple(t.to(device) for t in self.rope.rotation(rotated_at, target))
        self.step = _Step(n_old, n_new, rotation, dropped)
        self.rotated_at, self.positions = _drop(rotated_at, self.n_sink, dropped), _drop(positions, self.n_sink, dropped)
        self.seen += n_new
        return self.step


@dataclass
class _Step:
    n_old: int
    n_new: int
    rotation: Optional[tuple[torch.Tensor, torch.Tensor]]  # None: every key is already where it is seen
    dropped: int  # tokens after the sinks evicted once the step is attended


def _drop(x: torch.Tensor, n_sink: int, dropped: int, dim: int = 0) -> torch.Tensor:
    """``x`` without the ``dropped`` entries that follow the first ``n_sink`` along ``dim``."""
    if not dropped:
        return x
    return torch.cat([x.narrow(dim, 0, n_sink), x.narrow(dim, n_sink + dropped, x.shape[dim] - n_sink - dropped)], dim=dim)


def _splice(held: torch.Tensor, new: torch.Tensor, n_sink: int, pending: int) -> torch.Tensor:
    """``held`` without its ``pending`` evicted tokens after the sinks, then ``new``: one copy."""
    if not pending:
        return torch.cat([held, new], dim=-2)
    return torch.cat([held[..., :n_sink, :], held[..., n_sink + pending :, :], new], dim=-2)


class _Kept:
    """A sink cache layer's ``keys`` or ``values``: the held tensor without the tokens the last
    step evicted (the next step's concatenation drops them for free)."""

    def __set_name__(self, owner, name: str) -> None:
        self.held = "_" + name

    def __get__(self, layer, owner=None):
        if layer is None:
            return self
        held = getattr(layer, self.held)
        return _drop(held, layer.n_sink, layer._pending, -2) if layer._pending else held

    def __set__(self, layer, value) -> None:
        setattr(layer, self.held, value)


_SINK_LAYER = None


def _sink_layer_class():
    """Define the cache layer lazily, so importing sinklab does not import transformers."""
    global _SINK_LAYER
    if _SINK_LAYER is not None:
        return _SINK_LAYER
    _, DynamicLayer = _transformers_cache_classes()

    class SinkCacheLayer(DynamicLayer):
        """Keeps the ``n_sink`` first tokens plus the most recent ``window - 1`` between steps,
        each key as the model rotated it; the positions live in the cache's shared book.

        The tokens a step evicts stay in the held tensors until the next step, whose one
        concatenation both drops them and appends the new tokens (a copy of the cache less per
        step); ``keys`` and ``values`` never show them."""

        is_croppable = False
        _pending = 0  # tokens after the sinks that the last step evicted but the tensors still hold

        def __init__(self, book: _SinkBook, index: int) -> None:
            super().__init__()
            self.book, self.index = book, index
            self.n_sink, self.window = book.n_sink, book.window

        keys = _Kept()
        values = _Kept()

        @property
        def positions(self) -> torch.Tensor:
            return self.book.positions

        @property
        def rotated_at(self) -> torch.Tensor:
            return self.book.rotated_at

        def reset(self) -> None:
            super().reset()
            self._pending = 0
            self.book.reset()

        def get_seq_length(self) -> int:
            if not self.is_initialized or self._keys.numel() == 0:
                return 0
            return self._keys.shape[-2] - self._pending

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            check(key_states.shape[0] == 1, f"the sink cache streams one sequence at a time; got a batch of {key_states.shape[0]}")
            step = self.book.begin_step(key_states.shape[-2], key_states.device) if self.index == 0 else self.book.step
            check(step is not None and step.n_new == key_states.shape[-2] and step.n_old == self.get_seq_length(),
                  "the sink cache's layers must be updated in order, from layer 0, once per forward")
            keys = _splice(self._keys, key_states, self.n_sink, self._pending)
            values = _splice(self._values, value_states, self.n_sink, self._pending)
            self._keys, self._values, self._pending = keys, values, step.dropped
            return (keys if step.rotation is None else rotate(keys, *step.rotation)), values

        def keys_in_cache(self) -> torch.Tensor:
            """The kept keys rotated at their index in the cache (what the next query sees)."""
            return self.book.rope.move(self.keys, self.rotated_at, torch.arange(len(self.rotated_at)))

        def get_max_length(self) -> int:
            return self.n_sink + self.window

    _SINK_LAYER = SinkCacheLayer
    return SinkCacheLayer


def _caller_positions(tap: _PositionTap, n_new: int) -> torch.Tensor:
    """The positions (n_new,) the model rotated the new keys at, from the rotary module's last call."""
    check(tap.positions is not None, "the sink cache saw no rotary call for this forward; it needs a model that computes RoPE from position_ids")
    positions = tap.positions.reshape(-1).cpu()
    consecutive = len(positions) == n_new and torch.equal(positions, positions[0] + torch.arange(n_new))
    check(consecutive, f"the sink cache needs {n_new} consecutive positions for the new tokens; the model used {positions.tolist()[:8]}")
    return positions


def _presented_positions(caller: torch.Tensor, n_old: int, n_keys: int) -> torch.Tensor:
    """Where attention must see the ``n_keys`` keys: at their index in the cache, moved by how far
    the caller's positions run ahead of the cache's (0 in a manual loop; under ``model.generate``,
    which passes absolute positions, the number of tokens evicted so far)."""
    offset = int(caller[0]) - n_old
    return torch.arange(offset, offset + n_keys)


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
