"""The attention a prefill's queries pay each key, reduced while it is computed.

Score-based presses need what the queries of the context attended to: H2O the attention every
key received from every query, SnapKV and TOVA that of the last queries only.

* Every query (H2O, detected sinks): the prefill runs under sinklab's instrumentation
  (:func:`~sinklab.models.hf.instrument`), which attends in blocks of query rows; each block's
  weights are added into per-key sums on arrival, so no (T, T) matrix ever exists, whatever the
  context's length (the scanner's recorder works the same way). The instrumentation implements
  each architecture's attention exactly (soft-capping, learned sink logits, sliding windows).
* The last queries only, on a model that attends with SDPA: the model's own SDPA computes the
  prefill, and the weights of the last ``window_rows`` queries alone are computed beside it from
  the same queries, keys, mask and scaling (a (rows, T) block per layer), so a press costs a
  small fraction of the prefill (BENCHMARKS.md). Other models take the instrumented path.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from ..core.hooks import HookPoint, HookSet, hook_name


class AttentionTally:
    """Per-layer (B, Hq, T) sums of the prefill's attention weights: over every query row
    (``received``) and over the last ``window_rows`` rows (``window``), as asked."""

    def __init__(self, length: int, received: bool, window_rows: int) -> None:
        self.length, self.window_rows = length, window_rows
        self.received: dict[int, torch.Tensor] = {}
        self.window: dict[int, torch.Tensor] = {}
        self._want_received = received

    def hooks(self) -> list:
        return [(hook_name("*", "attn.hook_pattern"), self._on_pattern)]

    def _on_pattern(self, weights: torch.Tensor, point: HookPoint) -> None:
        """A block of query rows (B, Hq, rows, keys seen so far) added into the layer's sums."""
        rows = weights.shape[2]
        if self._want_received:
            self._add(self.received, point.layer, weights.sum(2))
        first_window_row = self.length - self.window_rows
        if self.window_rows and point.q_start + rows > first_window_row:
            skip = max(0, first_window_row - point.q_start)
            self._add(self.window, point.layer, weights[:, :, skip:].sum(2))

    def _add(self, sums: dict, layer: int, block: torch.Tensor) -> None:
        if layer not in sums:
            sums[layer] = torch.zeros(*block.shape[:2], self.length, dtype=torch.float32, device=block.device)
        sums[layer][..., : block.shape[-1]] += block.float()


@contextmanager
def tallied(model, length: int, received: bool, window_rows: int) -> Iterator[AttentionTally]:
    """Within the block, the model's forward passes (one prefill of ``length`` tokens) fill an
    :class:`AttentionTally`; the model is left as it was on exit."""
    from ..models.hf import instrument

    tally = AttentionTally(length, received, window_rows)
    if not received and model.config._attn_implementation == "sdpa":
        with _beside_sdpa(model, tally):
            yield tally
        return
    hooks = HookSet()
    with hooks.attached(tally.hooks()), instrument(model, hooks):
        yield tally


WINDOW_SDPA = "sinklab_window_sdpa"
_TALLIES: dict = {}  # id(model) -> the tally its window attention fills, only inside _beside_sdpa


@contextmanager
def _beside_sdpa(model, tally: AttentionTally) -> Iterator[None]:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(WINDOW_SDPA, _sdpa_and_window)
    AttentionMaskInterface.register(WINDOW_SDPA, sdpa_mask)
    modules = [m for m in model.modules() if hasattr(m, "layer_idx")]
    for module in modules:
        _TALLIES[id(module)] = tally
    model.set_attn_implementation(WINDOW_SDPA)
    try:
        yield
    finally:
        model.set_attn_implementation("sdpa")
        for module in modules:
            _TALLIES.pop(id(module), None)


def _sdpa_and_window(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """transformers' SDPA attention, and the last queries' weights added into the tally."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    tally = _TALLIES[id(module)]
    rows = min(tally.window_rows, query.shape[2])
    groups = query.shape[1] // key.shape[1]
    keys = key.repeat_interleave(groups, dim=1) if groups > 1 else key
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = (query[:, :, -rows:].float() @ keys.float().transpose(-1, -2)) * scale
    scores = scores.masked_fill(~_visible(attention_mask, rows, key.shape[2], scores.device), float("-inf"))
    sinks = kwargs.get("s_aux")
    if sinks is not None:  # learned sink logits: a column of their own, dropped after the softmax
        column = sinks.float().view(1, -1, 1, 1).expand(*scores.shape[:3], 1)
        weights = torch.cat([scores, column], dim=-1).softmax(-1)[..., :-1]
    else:
        weights = scores.softmax(-1)
    tally._add(tally.window, module.layer_idx, weights.sum(2))
    return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask, scaling=scaling, **kwargs)


def _visible(mask, rows: int, n_keys: int, device) -> torch.Tensor:
    """(..., rows, n_keys) which keys the last ``rows`` queries see: the model's mask rows, or the
    causal rule where SDPA was handed none."""
    if mask is None:
        first = n_keys - rows
        return torch.arange(n_keys, device=device)[None, :] <= torch.arange(first, n_keys, device=device)[:, None]
    mask = mask[..., -rows:, :]
    return mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
