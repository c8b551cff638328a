"""The payoff the outlier papers claim for a trained model: how much validation loss it loses under
low-bit quantization of its blocks' linear layers (issue 52; the schemes are ``adapt``'s, the
formula in :mod:`sinklab.adapt.quantize`). Embeddings, the output layer and the head gate's small
projection stay in full precision.

* ``w8a8_tensor_static``: int8 weights with one scale per matrix, int8 activations with one static
  scale per tensor, calibrated on training windows: fully per-tensor, TWEO's W8A8 claim (the
  native model's fused qkv projection is one matrix: queries, keys and values share its scale);
* ``w8a8_static``: the same with one weight scale per output channel, the milder and more common
  setting (the activations, which the outliers reach, are quantized the same way);
* ``w4a8``: int4 weights in groups of 128, int8 activations per tensor (dynamic);
* ``w4``: int4 weights in groups of 128 alone, round to nearest (the 4-bit claims of OrthoAdam and
  softpick are weight-only).
"""

from __future__ import annotations

from typing import Callable

import torch

from ..adapt import QUANT_SCHEMES, quantized
from ..models.native import Transformer

PAYOFF_SCHEMES = ("w8a8_tensor_static", "w8a8_static", "w4a8", "w4")


@torch.no_grad()
def static_maxima(model: Transformer, calibration: torch.Tensor) -> dict[str, float]:
    """Each block linear's largest |input| on ``calibration`` (token windows, (B, T)): the static
    activation scales, by the names :func:`~sinklab.adapt.quantize.quantized_linears` gives."""
    with quantized(model, None, layers=model.blocks) as log:
        model(calibration)
    return dict(log.by_module)


@torch.no_grad()
def quantization_penalties(model: Transformer, loss: Callable[[], float], calibration: torch.Tensor) -> dict:
    """``loss()`` (the validation loss) in full precision and, per scheme of :data:`PAYOFF_SCHEMES`,
    how much it rises under it; static scales are :func:`static_maxima` on ``calibration``."""
    static = static_maxima(model, calibration)
    exact = loss()
    penalties = {}
    for name in PAYOFF_SCHEMES:
        with quantized(model, QUANT_SCHEMES[name], static, layers=model.blocks):
            penalties[name] = loss() - exact
    return {"val_loss": exact, "loss_penalty": penalties}
