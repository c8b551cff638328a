"""RoPE arithmetic for caches that move keys: the model's own angles, one-step rotations
(:class:`RopeShift`), and the positions the model used in its latest forward (:class:`ForwardTaps`).

Angles are those transformers computes (``float32(position) * float32(inv_freq)``), so a moved key
is the key the model would have rotated at the target position, and queries and keys stay
consistent at any absolute position (``model.generate`` passes absolute positions; far past
10^5 tokens those float32 angles themselves drift, for the model as much as for the cache).

The caller's positions are seen where the model uses them: a forward pre-hook on the rotary module
records the ``position_ids`` of every call, so models that do not pass positions to the cache
(GPT-NeoX) stream correctly too, and a pre-hook on the module that runs the rotary embedding (the
decoder stack) records whether the caller passed ``position_ids`` at all and its ``attention_mask``.
Both hooks only keep references: reading a tensor is the cache's decision (an accelerator's
tensor is read only at a prefill, see :mod:`.caches`). The hooks belong to one cache's
:class:`ForwardTaps` and come off the model with it. This is the one piece that depends on
transformers internals; :class:`RopeShift` is tested against keys computed directly at the new
positions.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Optional

import torch
from torch import nn

from ..core.errors import SinklabError, check

STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


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
    if width == x.shape[-1]:  # the usual full rotary embedding: no slicing
        wide = x.float()
        swapped = wide.unflatten(-1, (2, width // 2)).flip(-2).flatten(-2)  # the halves swapped: one copy, no concatenation
        return torch.addcmul(wide * cos, swapped, signed_sin).to(x.dtype)
    return torch.cat([rotate(x[..., :width], cos, signed_sin), x[..., width:]], dim=-1)


class RopeShift:
    """The rotary frequencies of one layer of a Hugging Face model: the arithmetic that moves its
    keys. Reads the model once and leaves nothing on it (the caller's positions are
    :class:`ForwardTaps`'). Most models have one set of frequencies for every layer; Gemma 3 has
    one per layer type (its local layers' base and its global layers'), :func:`layer_shifts`."""

    def __init__(self, model: nn.Module, layer: int = 0) -> None:
        _, rotary = _rotary_module(model)
        _check_rope_config(model.config)
        frequencies = _frequencies(rotary)
        kind = None if None in frequencies else model.config.get_text_config(decoder=True).layer_types[layer]
        self.inv_freq = frequencies[kind].detach().float().cpu().clone()  # the tables are built on the CPU (see .caches)

    def rotation(self, source: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The :func:`rotation` that moves keys rotated at ``source`` to ``target``: (T, D) tables
        for positions (T,), or one table per sequence, (B, 1, T, D), for positions (B, T) (the 1
        broadcasts over the heads)."""
        cos, sin = rotation(rope_angles(target, self.inv_freq) - rope_angles(source, self.inv_freq))
        return (cos.unsqueeze(1), sin.unsqueeze(1)) if source.dim() == 2 else (cos, sin)

    def move(self, x: torch.Tensor, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """``x`` (..., T, D), rotated by the model at positions ``source`` ((T,), or (B, T) for
        x (B, H, T, D)), rotated instead at ``target``, in one rotation."""
        if torch.equal(source, target):
            return x
        cos, sin = self.rotation(source, target)
        return rotate(x, cos.to(x.device), sin.to(x.device))


def layer_shifts(model: nn.Module) -> list[RopeShift]:
    """Each decoder layer's :class:`RopeShift`, one object per set of frequencies (a step's
    rotation tables are built once per set)."""
    config = model.config.get_text_config(decoder=True)
    if None in _frequencies(_rotary_module(model)[1]):  # one set for every layer
        return [RopeShift(model)] * config.num_hidden_layers
    by_type: dict[str, RopeShift] = {}
    for layer, kind in enumerate(config.layer_types):
        if kind not in by_type:
            by_type[kind] = RopeShift(model, layer)
    return [by_type[kind] for kind in config.layer_types]


class ForwardTaps:
    """What the caller passed a model's running (or latest) forward, recorded by forward hooks
    that live exactly as long as this object: they come off the model when it is closed or
    garbage-collected. The hooks hold the small recorders below, never this object or its cache,
    so the model keeps no cache alive, and once a cache is dropped nothing of it stays on the model
    (no hook, no attribute). Each sink cache has its own taps; two caches on one model each record
    every forward, and each reads them only in its own."""

    def __init__(self, model: nn.Module) -> None:
        name, rotary = _rotary_module(model)
        stack = model.get_submodule(name.rpartition(".")[0])
        self.position = _PositionTap()
        handles = [rotary.register_forward_pre_hook(self.position, with_kwargs=True)]
        self.caller = _CallerTap.of(stack)
        if self.caller is not None:
            handles.append(stack.register_forward_pre_hook(self.caller, with_kwargs=True))
            handles.append(stack.register_forward_hook(self.caller.clear))
        self._removal = weakref.finalize(self, _remove, handles)

    def close(self) -> None:
        """Take the hooks off the model now (idempotent); the cache then refuses new steps."""
        self._removal()

    @property
    def closed(self) -> bool:
        return not self._removal.alive

    def recorded_positions(self) -> torch.Tensor:
        """The ``position_ids`` of the rotary module's latest call, as recorded (not read)."""
        check(
            self.position.positions is not None,
            "the sink cache saw no rotary call for this forward; it needs a model that computes RoPE from position_ids",
        )
        return self.position.positions

    def positions_given(self) -> Optional[bool]:
        """During a forward, whether its caller passed ``position_ids`` (``model.generate`` does);
        if not, the model numbers the tokens from the cache's ``get_seq_length``. None between
        forwards. A model whose rotary embedding is called directly (no decoder stack to watch)
        counts as given."""
        return True if self.caller is None else self.caller.given

    def attention_mask(self) -> Optional[torch.Tensor]:
        """The attention mask passed to the running forward (None if none, between forwards, or unknown)."""
        return None if self.caller is None else self.caller.attention_mask


def _remove(handles) -> None:
    for handle in handles:
        handle.remove()


def _frequencies(module: nn.Module) -> dict[Optional[str], torch.Tensor]:
    """A rotary module's inverse frequencies: ``{None: inv_freq}``, or one per layer type
    (Gemma 3's ``<type>_inv_freq`` buffers); empty for any other module."""
    if isinstance(getattr(module, "inv_freq", None), torch.Tensor):
        return {None: module.inv_freq}
    kinds = getattr(module, "layer_types", None) or []
    found = {kind: getattr(module, f"{kind}_inv_freq", None) for kind in kinds}
    return found if found and all(isinstance(f, torch.Tensor) for f in found.values()) else {}


def _rotary_module(model: nn.Module) -> tuple[str, nn.Module]:
    """The model's rotary embedding (the module holding its inverse frequencies) and its name."""
    found = next(((name, m) for name, m in model.named_modules() if _frequencies(m)), None)
    if found is None:
        raise SinklabError(f"{type(model).__name__} has no rotary position embedding; the sink cache needs a RoPE model")
    return found


def _check_rope_config(config) -> None:
    """Refuse rotary settings whose frequencies change with the sequence's length (a moved key
    would be rotated by frequencies that no longer hold); one setting, or one per layer type."""
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    per_type = isinstance(rope, dict) and rope and all(isinstance(v, dict) for v in rope.values())
    for setting in rope.values() if per_type else [rope]:
        kind = setting.get("rope_type", setting.get("type", "default")) if isinstance(setting, dict) else "default"
        if kind not in STATIC_ROPE_TYPES:
            raise SinklabError(
                f"RoPE type {kind!r} changes its frequencies with the sequence length; "
                f"the sink cache supports {', '.join(STATIC_ROPE_TYPES)}"
            )


class _PositionTap:
    """Holds the ``position_ids`` the rotary module was last called with."""

    def __init__(self) -> None:
        self.positions = None

    def __call__(self, module, args, kwargs) -> None:
        self.positions = kwargs["position_ids"] if "position_ids" in kwargs else args[1]


class _CallerTap:
    """While the decoder stack runs, whether it was given ``position_ids`` and its
    ``attention_mask`` (a reference); both None between its calls, so that a cache updated
    directly (outside a forward) never sees another forward's arguments."""

    ARGUMENTS = ("position_ids", "attention_mask")

    def __init__(self, forward) -> None:
        names = list(inspect.signature(forward).parameters)
        self.index = {name: names.index(name) for name in self.ARGUMENTS}
        self.clear()

    def __call__(self, module, args, kwargs) -> None:
        position_ids, self.attention_mask = (
            kwargs[n] if n in kwargs else args[i] if i < len(args) else None for n, i in self.index.items()
        )
        self.given = position_ids is not None

    def clear(self, *_) -> None:
        self.given: Optional[bool] = None
        self.attention_mask: Optional[torch.Tensor] = None

    @classmethod
    def of(cls, stack: nn.Module) -> Optional["_CallerTap"]:
        """A tap for ``stack`` (the module that runs the rotary embedding); None when its forward
        takes no ``position_ids`` and ``attention_mask``."""
        parameters = inspect.signature(stack.forward).parameters
        return cls(stack.forward) if all(name in parameters for name in cls.ARGUMENTS) else None
