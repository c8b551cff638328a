"""The eager reference attention and its fused fast path.

Every attention path in sinklab (the native model, the Hugging Face adapter, the merged circuits
of the trigger models) is tested equal to :func:`attend`, which fires the ``attn.hook_*`` points.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from ..hooks import ATTENTION_POINTS, HookSet
from .norms import AttnNorm, Softmax


def causal_mask(n_queries: int, n_keys: int, device=None) -> torch.Tensor:
    """(1, 1, Tq, Tk) boolean causal mask; the queries are the last ``n_queries`` of ``n_keys`` positions."""
    q_pos = torch.arange(n_keys - n_queries, n_keys, device=device).unsqueeze(1)
    return (torch.arange(n_keys, device=device).unsqueeze(0) <= q_pos).view(1, 1, n_queries, n_keys)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    norm: AttnNorm,
    scale: float = 1.0,
    hooks: Optional[HookSet] = None,
    layer: int = 0,
    query_chunk: Optional[int] = None,
    need_weights: bool = True,
    score_cap: Optional[float] = None,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The eager reference attention: every fast path in sinklab is tested equal to this.

    q: (B, H, Tq, D); k, v: (B, H, Tk, D); mask: bool broadcastable to (B, H, Tq, Tk), True =
    visible; the queries are the last Tq of the Tk positions. Returns the per-head output
    (B, H, Tq, D) in v's dtype and the weights (B, H, Tq, Tk) float32 (None unless
    ``need_weights``). ``query_chunk`` attends in blocks of query rows so that the (Tq, Tk) score
    matrix never exists whole; results are identical (None: all rows at once, so the mask, score
    and pattern hooks receive whole (B, H, Tq, Tk) tensors). ``score_cap`` c replaces the scores s by
    c tanh(s / c) before anything else sees them (Gemma 2's logit soft-capping), so a score hook
    still acts on the scores the normalisation receives. Fires ``attn.hook_*`` points on ``hooks``.

    A block of query rows is scored only against the keys up to the last one any of its rows may
    see (:func:`column_visibility`): every normalisation gives the keys past it weight exactly zero,
    and under a causal mask this halves the work. The score and pattern hooks of a block therefore
    see that many key columns (``HookSite.n_keys`` says how many the attention has in all).
    """
    hooks = hooks if hooks is not None else HookSet()
    n_q, n_keys = q.shape[2], k.shape[2]
    offset = n_keys - n_q
    q = hooks.fire(layer, "attn.hook_q", q, offset, n_keys)
    k = hooks.fire(layer, "attn.hook_k", k)
    v = hooks.fire(layer, "attn.hook_v", v)
    step = query_chunk or n_q
    keys = k.float().transpose(-1, -2)  # (B, H, D, Tk), converted once for every block
    z = torch.empty(
        *q.shape[:3], v.shape[-1], dtype=v.dtype, device=v.device
    )  # filled block by block: no list of pieces kept mid-pass
    weights = []
    # last block first: the widest blocks are allocated first and their memory serves the
    # narrower ones, which keeps the heap from fragmenting on long inputs
    for start in reversed(range(0, n_q, step)):
        rows = slice(start, min(start + step, n_q))
        q_start = offset + start
        chunk_mask = hooks.fire(layer, "attn.hook_mask", mask[..., rows, :], q_start, n_keys)
        width, dense = column_visibility(chunk_mask)
        chunk_mask = chunk_mask[..., :width]
        scores = torch.matmul(q[:, :, rows].float() * scale, keys[..., :width])  # (B, H, t, width)
        if score_cap:
            scores = score_cap * torch.tanh(scores / score_cap)
        if norm.masks_logits and not hooks.listens(layer, "attn.hook_scores") and not (score_cap and scores.requires_grad):
            # nobody else holds the scores: mask them in place, and only the columns some row
            # cannot see (under a causal mask the diagonal block), a pass over the block less
            # (not when training through a soft cap: tanh's backward needs its output intact)
            scores[..., dense:].masked_fill_(~chunk_mask[..., dense:], float("-inf"))
            w = norm.from_logits(scores)
        else:
            scores = hooks.fire(layer, "attn.hook_scores", scores, q_start, n_keys)
            w = norm(scores, chunk_mask)
        w = hooks.fire(layer, "attn.hook_pattern", w, q_start, n_keys)
        z[:, :, rows] = torch.matmul(w.to(v.dtype), v[..., :width, :])  # (B, H, t, D)
        if need_weights:
            weights.append(F.pad(w, (0, n_keys - width)))
    z = hooks.fire(layer, "attn.hook_z", z, offset)
    w_all = (torch.cat(weights[::-1], dim=2) if len(weights) > 1 else weights[0]) if need_weights else None
    return z, w_all


def column_visibility(mask: torch.Tensor) -> tuple[int, int]:
    """(width, dense) of a block of mask rows (..., t, Tk): ``width`` is 1 + the last key column
    any row may see (Tk if none is visible: a fully masked row then normalises over nothing, as
    it would without this bound), ``dense`` the number of leading columns every row may see."""
    flat = mask.reshape(-1, mask.shape[-1])
    seen_by = flat.sum(0)  # rows that may see each key
    seen = seen_by.nonzero()
    width = int(seen[-1]) + 1 if seen.numel() else mask.shape[-1]
    hidden = (seen_by[:width] < flat.shape[0]).nonzero()
    return width, int(hidden[0]) if hidden.numel() else width


def sdpa_equivalent(norm: AttnNorm, hooks: Optional[HookSet], need_weights: bool, layer: int = 0) -> bool:
    """Whether PyTorch's fused SDPA computes exactly what :func:`attend` would here: a softmax, no
    weights asked for, and no hook on a point of ``layer``'s attention (SDPA fires none of them; a
    hook elsewhere, such as TWEO's on the blocks' outputs, keeps the fused kernel)."""
    listening = hooks is not None and any(hooks.listens(layer, point) for point in ATTENTION_POINTS)
    return type(norm) is Softmax and not listening and not need_weights


def attend_fast(q, k, v, mask, norm, scale=1.0, hooks=None, layer=0, need_weights=False, plain_causal=False):
    """:func:`attend`, through ``F.scaled_dot_product_attention`` whenever that is equivalent.

    ``plain_causal`` says that ``mask`` is exactly :func:`causal_mask` (the caller knows; checking
    would cost a pass over the mask), which lets SDPA use its causal kernel.
    """
    if sdpa_equivalent(norm, hooks, need_weights, layer):
        if plain_causal and q.shape[2] == k.shape[2]:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale), None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale), None
    return attend(q, k, v, mask, norm, scale, hooks, layer, need_weights=need_weights)


def default_scale(head_dim: int) -> float:
    """The usual 1/sqrt(d) score scaling."""
    return 1.0 / math.sqrt(head_dim)
