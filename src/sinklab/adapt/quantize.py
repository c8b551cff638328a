"""Simulated low-bit quantization of a model's linear layers, and the activations they receive.

Every linear layer inside the decoder blocks (attention and FFN projections; embeddings and the
output layer stay in full precision) computes with quantize-dequantized weights and inputs, in
float32, so the error is exactly that of the integer grid. The formula, symmetric round to
nearest with b bits (:func:`fake_quant`)::

    q_max = 2^(b-1) - 1,   s = amax / q_max,   x_hat = s * clamp(round(x / s), -q_max, q_max)

where ``amax`` is the largest |x| over the group that shares a scale: one output channel (int8
weights), 128 consecutive input columns of one output channel (int4 weights), the whole weight
matrix (``w8a8_tensor_static``, the fully per-tensor W8A8 of TWEO's claim), the whole tensor
(per-tensor activations, dynamic: this input's own maximum; static: the maximum seen on a
calibration set), or one token (per-token activations, the friendly baseline). One outlier, such
as the first token's massive activation, sets the per-tensor scale of every other token: that is
why the sink in the stream costs so much at 8 bits (Bondarenko et al. 2023; Son et al. 2024).

optimum-quanto (0.2.7) runs on CPU, but its W8A8 also quantizes layer outputs, keeps static
scales as a running average, and its int4 weights are asymmetric: not the settings measured here.
Its int8 per-channel weights are the same formula; ``tests/test_adapt.py`` checks the ``w8``
scheme against it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Collection, Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..core.attention.extras import HeadGate
from ..core.errors import SinklabError
from ..models.hf import decoder_layers

ACTIVATION_MODES = ("tensor", "token", "static")


@dataclass(frozen=True)
class QuantScheme:
    """Weight bits and grouping, and how activations are quantized (None: full precision)."""

    weight_bits: int
    weight_group: Optional[int]  # None: one scale per output channel
    activations: Optional[str]
    help: str
    activation_bits: int = 8
    per_tensor_weights: bool = False  # one scale for the whole matrix; weight_group is then ignored


QUANT_SCHEMES: dict[str, QuantScheme] = {
    "w8": QuantScheme(8, None, None, "int8 weights per output channel, full-precision activations"),
    "w4": QuantScheme(4, 128, None, "int4 weights in groups of 128, full-precision activations (weight-only round to nearest)"),
    "w8a8": QuantScheme(8, None, "tensor", "int8 weights per channel, int8 activations per tensor (dynamic)"),
    "w8a8_static": QuantScheme(8, None, "static", "int8 weights per channel, int8 activations per tensor (static, calibrated)"),
    "w8a8_tensor_static": QuantScheme(
        8, None, "static", "int8 weights per tensor, int8 activations per tensor (static, calibrated)", per_tensor_weights=True
    ),
    "w8a8_token": QuantScheme(8, None, "token", "int8 weights per channel, int8 activations per token (dynamic)"),
    "w4a8": QuantScheme(4, 128, "tensor", "int4 weights in groups of 128, int8 activations per tensor (dynamic)"),
}


#: The schemes that judge the payoff the outlier papers claim for training without outliers (issue 52),
#: opt-in in ``adapt``: 4-bit weight-only rounding, and W8A8 with one scale per weight matrix too.
PAYOFF_ONLY = ("w4", "w8a8_tensor_static")

#: ``adapt``'s default schemes: all but :data:`PAYOFF_ONLY`. A sink in the stream reaches
#: activations, not weights.
DEFAULT_SCHEMES = tuple(name for name in QUANT_SCHEMES if name not in PAYOFF_ONLY)


def check_scheme(name: str) -> QuantScheme:
    if name not in QUANT_SCHEMES:
        raise SinklabError(f"unknown quantization {name!r}; choose from: {', '.join(QUANT_SCHEMES)}")
    return QUANT_SCHEMES[name]


def fake_quant(x: torch.Tensor, bits: int, amax: torch.Tensor) -> torch.Tensor:
    """Symmetric round-to-nearest quantize-dequantize of ``x``; ``amax`` broadcasts against it."""
    q_max = 2 ** (bits - 1) - 1
    scale = amax.float().clamp_min(torch.finfo(torch.float32).tiny) / q_max
    return (x.float() / scale).round().clamp(-q_max, q_max) * scale


def quantize_weight(weight: torch.Tensor, bits: int, group: Optional[int]) -> torch.Tensor:
    """(out, in) weight with one scale per output channel, or per ``group`` input columns (the
    last group of a row may be shorter: zero padding does not change a group's maximum)."""
    if group is None:
        return fake_quant(weight, bits, weight.abs().amax(dim=1, keepdim=True))
    out, n_in = weight.shape
    padded = F.pad(weight.float(), (0, -n_in % group)).view(out, -1, group)  # (out, groups, group)
    return fake_quant(padded, bits, padded.abs().amax(dim=-1, keepdim=True)).view(out, -1)[:, :n_in]


def quantize_activation(x: torch.Tensor, mode: str, bits: int = 8, static_amax: Optional[float] = None) -> torch.Tensor:
    """``x`` (..., features) per tensor, per token (last axis shares a scale) or with a fixed scale."""
    if mode == "token":
        return fake_quant(x, bits, x.abs().amax(dim=-1, keepdim=True))
    if mode == "static":
        return fake_quant(x, bits, torch.tensor(static_amax))
    return fake_quant(x, bits, x.abs().amax())


def quantized_linears(model: nn.Module, layers: Optional[nn.ModuleList] = None) -> dict[str, tuple[int, nn.Module]]:
    """Every linear layer in the decoder blocks (``layers``, default: the architecture's decoder
    layers; sinklab's own models pass their ``blocks``): qualified name -> (layer index, module)."""
    found = {}
    for i, layer in enumerate(decoder_layers(model) if layers is None else layers):
        for name, module in layer.named_modules():
            # sinklab's head gate is a Linear whose first argument is the heads' output, not the
            # layer's input: it stays in full precision
            if (isinstance(module, nn.Linear) and not isinstance(module, HeadGate)) or type(module).__name__ == "Conv1D":
                found[f"{i}.{name}"] = (i, module)
    return found


def _is_transposed(module: nn.Module) -> bool:
    return not isinstance(module, nn.Linear)  # GPT-2's Conv1D stores (in, out)


@dataclass
class ActivationLog:
    """The largest |input| of each linear layer, and of each decoder layer, over every call."""

    n_layers: int
    by_module: dict[str, float] = field(default_factory=dict)

    def record(self, name: str, x: torch.Tensor) -> None:
        amax = float(x.detach().abs().amax())
        self.by_module[name] = max(amax, self.by_module.get(name, 0.0))

    def by_layer(self) -> list[float]:
        layers = [0.0] * self.n_layers
        for name, amax in self.by_module.items():
            i = int(name.split(".", 1)[0])
            layers[i] = max(layers[i], amax)
        return layers


@contextmanager
def quantized(
    model: nn.Module,
    scheme: Optional[QuantScheme],
    static_amax: Optional[dict[str, float]] = None,
    layers: Optional[nn.ModuleList] = None,
    only: Optional[Collection[str]] = None,
) -> Iterator[ActivationLog]:
    """Run ``model`` with ``scheme`` on every decoder linear layer (None: full precision, only
    logging the inputs; ``layers`` as in :func:`quantized_linears`), or on the linears named in
    ``only`` (names as :func:`quantized_linears` gives them; the rest run and go unlogged as they
    are): which one layer's rounding costs the loss. Weights are restored and hooks removed on exit,
    also on error."""
    if scheme is not None and scheme.activations == "static" and not static_amax:
        raise SinklabError("static activation quantization needs calibration maxima (calibrate() first)")
    layers = decoder_layers(model) if layers is None else layers
    linears = quantized_linears(model, layers)
    if only is not None:
        unknown = sorted(set(only) - set(linears))
        if unknown:
            raise SinklabError(f"no quantized linear layer {unknown[0]!r}; the model's are: {', '.join(linears)}")
        linears = {name: linears[name] for name in only}
    log = ActivationLog(len(layers))
    saved, handles = {}, []
    try:
        for name, (_, module) in linears.items():
            if scheme is not None:
                saved[name] = module.weight.data
                module.weight.data = _quantized_weight(module, scheme).to(module.weight.dtype)
            handles.append(module.register_forward_pre_hook(_input_hook(name, log, scheme, static_amax)))
        yield log
    finally:
        for handle in handles:
            handle.remove()
        for name, weight in saved.items():
            linears[name][1].weight.data = weight


def _quantized_weight(module: nn.Module, scheme: QuantScheme) -> torch.Tensor:
    weight = module.weight.data
    if scheme.per_tensor_weights:
        return fake_quant(weight, scheme.weight_bits, weight.abs().amax())
    if _is_transposed(module):
        return quantize_weight(weight.T, scheme.weight_bits, scheme.weight_group).T.contiguous()
    return quantize_weight(weight, scheme.weight_bits, scheme.weight_group)


def _input_hook(name: str, log: ActivationLog, scheme: Optional[QuantScheme], static_amax: Optional[dict[str, float]]):
    def hook(module, args):
        x = args[0]
        log.record(name, x)
        if scheme is None or scheme.activations is None:
            return None
        amax = static_amax.get(name) if static_amax else None
        return (quantize_activation(x, scheme.activations, scheme.activation_bits, amax).to(x.dtype), *args[1:])

    return hook
