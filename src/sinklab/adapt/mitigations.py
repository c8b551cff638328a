"""Mitigations inserted into a pretrained model, each starting equal to the original.

The adapted model never sees BOS in its input. Every mitigation but ``kv_bias`` starts with BOS's
keys and values as a cached prefix and fades that column out during a ramp (its logit shifted by
log(1 - ramp)), while the mitigation fades in (ramp 0: exactly the original model; ramp 1: no
sink token, pure mitigation). ``kv_bias`` needs no ramp: a learned key and value per layer and KV
head, initialised to BOS's, are exactly the cached prefix (Sun et al. 2024 and Gu et al. 2025
train with such a bias instead of a sink token).

To add one: subclass :class:`Mitigation` (a norm replacing softmax, an edit of the head outputs,
or both), and register it in :data:`MITIGATIONS`.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from ..core.attention import AttnNorm, make_norm
from ..core.errors import SinklabError
from .prefix import ModelShape, SinkPrefix


class Mitigation(nn.Module):
    """Base: no new normalisation, head outputs unchanged, BOS faded out by the ramp."""

    help = ""
    fades_bos = True  # False: the mitigation itself stands in for BOS from the first step

    def __init__(self, shape: ModelShape, bos: SinkPrefix) -> None:
        super().__init__()
        self.shape = shape
        self.ramp = 0.0  # set by the trainer: 0 = the original model, 1 = the pure mitigation

    def norms(self) -> Optional[list[AttnNorm]]:
        return None

    def head_output(self, layer: int, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """z (B, H, T, D) per-head outputs; x (B, T, d) the layer's input."""
        return z

    def prefix(self, bos: SinkPrefix) -> SinkPrefix:
        """The cached prefix the content runs after."""
        return bos

    def calibrate(self, head_rms: torch.Tensor) -> None:
        """Data-dependent initialisation from each layer's per-head output RMS (L, H)."""


class _RampedSlot(AttnNorm):
    """Softmax with a slot of logit ``b_h`` entering with weight ``ramp``: exp(s_ij) / (ramp exp(b_h)
    + sum_k exp(s_ik)). ``b_h`` = 0 fixed is softmax+1 (Miller 2023) at ramp 1; learned, it is
    the gpt-oss sink logit. Shifting every logit by -log(ramp) is the same as adding log(ramp)
    to the slot's."""

    masks_logits = True

    def __init__(self, n_heads: int, owner: Mitigation, learned: bool) -> None:
        super().__init__(n_heads)
        self.inner = make_norm("sink_logit", n_heads)
        self.inner.sink.requires_grad_(learned)
        self._owner = [owner]  # a list, so the owner is not registered as a submodule (a cycle)

    def from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        ramp = self._owner[0].ramp
        if ramp <= 0:
            return torch.softmax(logits, dim=-1)
        return self.inner.from_logits(logits - math.log(ramp))


class SlotMitigation(Mitigation):
    learned = False

    def __init__(self, shape: ModelShape, bos: SinkPrefix) -> None:
        super().__init__(shape, bos)
        self.slots = nn.ModuleList(_RampedSlot(shape.n_heads, self, self.learned) for _ in range(shape.n_layers))

    def norms(self):
        return list(self.slots)


class SoftmaxPlusOne(SlotMitigation):
    help = "softmax+1: a zero logit in every softmax denominator (Miller 2023); adds no parameters, so it needs --full"


class SinkLogitMitigation(SlotMitigation):
    help = "a learned per-head sink logit in the softmax denominator (gpt-oss), starting at 0"
    learned = True


class GateMitigation(Mitigation):
    """2 sigmoid(W rms(x) + b) per head, W = 0 and b = 0 at the start: an open gate of exactly 1
    that can close to 0 (Qiu et al. 2025 gate each head's output on the token's input)."""

    help = "a per-head sigmoid output gate from the layer's input (Qiu et al. 2025), starting open"

    def __init__(self, shape: ModelShape, bos: SinkPrefix) -> None:
        super().__init__(shape, bos)
        self.weight = nn.Parameter(torch.zeros(shape.n_layers, shape.n_heads, shape.d_model))
        self.bias = nn.Parameter(torch.zeros(shape.n_layers, shape.n_heads))

    def head_output(self, layer, z, x):
        x = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        gate = 2 * torch.sigmoid(x @ self.weight[layer].T + self.bias[layer])  # (B, T, H)
        return z * gate.transpose(1, 2).unsqueeze(-1).to(z.dtype)


class HeadNormMitigation(Mitigation):
    """z + ramp (g rms_norm(z) - z): head-wise RMSNorm (Li et al. 2026) blended in by the ramp,
    its scale g starting at each head's typical output RMS."""

    help = "head-wise RMSNorm of each head's output (Li et al. 2026), blended in by the ramp"

    def __init__(self, shape: ModelShape, bos: SinkPrefix) -> None:
        super().__init__(shape, bos)
        self.scale = nn.Parameter(torch.ones(shape.n_layers, shape.n_heads, 1, shape.head_dim))

    def head_output(self, layer, z, x):
        if self.ramp <= 0:
            return z
        normed = z * torch.rsqrt(z.float().pow(2).mean(-1, keepdim=True) + 1e-6) * self.scale[layer]
        return z + self.ramp * (normed.to(z.dtype) - z)

    def calibrate(self, head_rms):
        with torch.no_grad():
            self.scale.copy_(head_rms.view(*head_rms.shape, 1, 1).expand_as(self.scale))


class KVBias(Mitigation):
    help = "a learned key and value per layer and KV head in place of BOS (Sun et al. 2024), starting as BOS's"
    fades_bos = False

    def __init__(self, shape: ModelShape, bos: SinkPrefix) -> None:
        super().__init__(shape, bos)
        self.keys = nn.ParameterList(nn.Parameter(k.detach().clone()) for k in bos.keys)
        self.values = nn.ParameterList(nn.Parameter(v.detach().clone()) for v in bos.values)

    def prefix(self, bos):
        return SinkPrefix(bos.token_ids, list(self.keys), list(self.values))


MITIGATIONS: dict[str, type[Mitigation]] = {
    "gate": GateMitigation,
    "sink_logit": SinkLogitMitigation,
    "softmax1": SoftmaxPlusOne,
    "head_norm": HeadNormMitigation,
    "kv_bias": KVBias,
}


def make_mitigation(name: str, model: nn.Module, bos: SinkPrefix) -> Mitigation:
    if name not in MITIGATIONS:
        raise SinklabError(f"unknown mitigation {name!r}; choose one of: {', '.join(MITIGATIONS)}")
    return MITIGATIONS[name](ModelShape.of(model), bos).to(model.device)
