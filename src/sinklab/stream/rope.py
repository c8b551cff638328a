"""RoPE arithmetic for caches that move keys: the model's own angles, one-step rotations, and the
positions the model used in its latest forward.

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

    def caller_positions(self, n_new: int) -> torch.Tensor:
        """The positions (n_new,) the model rotated the new keys at, from the rotary module's last call."""
        check(self.tap.positions is not None, "the sink cache saw no rotary call for this forward; it needs a model that computes RoPE from position_ids")
        positions = self.tap.positions.reshape(-1).cpu()
        consecutive = len(positions) == n_new and torch.equal(positions, positions[0] + torch.arange(n_new))
        check(consecutive, f"the sink cache needs {n_new} consecutive positions for the new tokens; the model used {positions.tolist()[:8]}")
        return positions


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
