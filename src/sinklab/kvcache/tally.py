"""The attention a prefill's queries pay each key, reduced while it is computed.

Score-based presses need what the queries of the context attended to: H2O the attention every
key received from every query, SnapKV and TOVA that of the last queries only.

* On a model that attends with SDPA (the default): the model's own SDPA computes the prefill, and
  the weights the press reads are computed beside it from the same queries, keys, mask, scaling
  and learned sink logits: every query's in blocks of 128 rows (H2O, detected sinks), or the last
  ``window_rows`` queries' only (SnapKV, TOVA: a (rows, T) block per layer, a small fraction of the
  prefill; BENCHMARKS.md 11).
* Other models (eager: soft-capping, Gemma 2, gpt-oss) run under sinklab's instrumentation
  (:func:`~sinklab.models.hf.instrument`), which attends in blocks of query rows and implements
  each architecture's attention exactly.

Either way each block's weights are added into per-key sums on arrival, so no (T, T) matrix ever
exists, whatever the context's length (the scanner's recorder works the same way).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from ..core.hooks import HookSet, HookSite, hook_name


class AttentionTally:
    """Per-layer (B, Hq, T) sums of the prefill's attention weights: over every query row
    (``received``) and over the last ``window_rows`` rows (``window``), as asked."""

    def __init__(self, length: int, received: bool, window_rows: int) -> None:
        self.length, self.window_rows = length, window_rows
        self.received: dict[int, torch.Tensor] = {}
        self.window: dict[int, torch.Tensor] = {}
        self.want_received = received

    def hooks(self) -> list:
        return [(hook_name("*", "attn.hook_pattern"), self._on_pattern)]

    def _on_pattern(self, weights: torch.Tensor, point: HookSite) -> None:
        """A block of query rows (B, Hq, rows, keys seen so far) added into the layer's sums."""
        rows = weights.shape[2]
        if self.want_received:
            self._add(self.received, point.layer, weights.sum(2))
        first_window_row = self.length - self.window_rows
        if self.window_rows and point.q_start + rows > first_window_row:
            skip = max(0, first_window_row - point.q_start)
            self._add(self.window, point.layer, weights[:, :, skip:].sum(2))

    def _add(self, sums: dict, layer: int, block: torch.Tensor) -> None:
        """``block`` (B, Hq, keys) added into the layer's sums, which grow to the widest block seen
        (a tally of decoding steps, whose keys grow by the tokens fed: :mod:`.decoding`)."""
        width, held = block.shape[-1], sums.get(layer)
        if held is None or held.shape[-1] < width:
            grown = torch.zeros(*block.shape[:2], max(self.length, width), dtype=torch.float32, device=block.device)
            if held is not None:
                grown[..., : held.shape[-1]] = held
            sums[layer] = grown
        sums[layer][..., :width] += block.float()


@contextmanager
def tallied(model, length: int, received: bool, window_rows: int) -> Iterator[AttentionTally]:
    """Within the block, the model's forward passes (one prefill of ``length`` tokens) fill an
    :class:`AttentionTally`; the model is left as it was on exit."""
    from ..models.hf import instrument

    tally = AttentionTally(length, received, window_rows)
    if model.config._attn_implementation == "sdpa":
        with _beside_sdpa(model, tally):
            yield tally
        return
    hooks = HookSet()
    with hooks.attached(tally.hooks()), instrument(model, hooks):
        yield tally


WINDOW_SDPA = "sinklab_tally_sdpa"
ROWS_AT_ONCE = 128  # query rows whose weights exist at once: bounds the (rows, T) block on long contexts
_TALLIES: dict = {}  # id(model) -> the tally its window attention fills, only inside _beside_sdpa


@contextmanager
def _beside_sdpa(model, tally: AttentionTally) -> Iterator[None]:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(WINDOW_SDPA, _sdpa_and_tally)
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


def _sdpa_and_tally(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """transformers' SDPA attention, and beside it the weights the tally wants: every query's in
    blocks of :data:`ROWS_AT_ONCE` rows (received), or the last queries' only (window).

    A block's scores are the one large tensor made: the queries are scaled before the product, and
    each KV head's query heads are stacked as rows against its keys as cached (no key is copied
    per query head, as ``repeat_interleave`` would)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    tally, n_queries = _TALLIES[id(module)], query.shape[2]
    batch, kv_heads, n_keys, _ = key.shape
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    keys = key.float().transpose(-1, -2)  # (B, Hkv, D, T), a view when the cache is float32
    window_start = n_queries - min(tally.window_rows, n_queries)
    starts = range(0, n_queries, ROWS_AT_ONCE) if tally.want_received else [window_start] if tally.window_rows else []
    for start in starts:
        stop = n_queries if not tally.want_received else min(start + ROWS_AT_ONCE, n_queries)
        seen = n_keys - n_queries + stop  # keys past the block's last query are masked for every row
        rows = query[:, :, start:stop].float() * scale  # (B, Hq, rows, D), query head h = kv head h // groups
        stacked = rows.reshape(batch, kv_heads, -1, rows.shape[-1])  # each KV head's query heads, one after another
        scores = (stacked @ keys[..., :seen]).view(batch, query.shape[1], stop - start, seen)
        visible = _visible(attention_mask, start, stop, n_queries, n_keys, scores.device)[..., :seen]
        weights = _normalised(scores.masked_fill_(~visible, float("-inf")), kwargs.get("s_aux"))
        if tally.want_received:
            tally._add(tally.received, module.layer_idx, weights.sum(2))
        if stop > window_start and tally.window_rows:
            tally._add(tally.window, module.layer_idx, weights[:, :, max(0, window_start - start) :].sum(2))
    return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask, scaling=scaling, **kwargs)


def _normalised(scores: torch.Tensor, sinks) -> torch.Tensor:
    """The softmax over keys, in place (a block of scores is the largest tensor a press adds to the
    prefill's peak); learned sink logits (gpt-oss) take a column of their own, dropped after."""
    if sinks is None:
        scores -= scores.amax(-1, keepdim=True)
        return scores.exp_().div_(scores.sum(-1, keepdim=True))
    column = sinks.float().view(1, -1, 1, 1).expand(*scores.shape[:3], 1)
    return torch.cat([scores, column], dim=-1).softmax(-1)[..., :-1]


def _visible(mask, start: int, stop: int, n_queries: int, n_keys: int, device) -> torch.Tensor:
    """(..., stop - start, n_keys) which keys queries ``start`` to ``stop`` (of the last
    ``n_queries`` positions) see: the model's mask rows, or the causal rule where SDPA was handed none."""
    if mask is None:
        offset = n_keys - n_queries
        rows = torch.arange(offset + start, offset + stop, device=device)
        return torch.arange(n_keys, device=device)[None, :] <= rows[:, None]
    mask = mask[..., start:stop, :]
    return mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
