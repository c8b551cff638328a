"""The eager reference attention and its fused fast path.

Every attention path in sinklab (the native model, the Hugging Face adapter, the merged circuits
of the trigger models) is tested equal to :func:`attend`, which fires the ``attn.hook_*`` points.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from ..hooks import HookSet
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
    matrix never exists whole; results are identical. ``score_cap`` c replaces the scores s by
    c tanh(s / c) before anything else sees them (Gemma 2's logit soft-capping), so a score hook
    still acts on the scores the normalisation receives. Fires ``attn.hook_*`` points on ``hooks``.
    """
    hooks = hooks if hooks is not None else HookSet()
    k = hooks.fire(layer, "attn.hook_k", k)
    v = hooks.fire(layer, "attn.hook_v", v)
    n_q, offset = q.shape[2], k.shape[2] - q.shape[2]
    step = query_chunk or n_q
    outs, weights = [], []
    for start in range(0, n_q, step):
        rows = slice(start, min(start + step, n_q))
        q_start = offset + start
        chunk_mask = hooks.fire(layer, "attn.hook_mask", mask[..., rows, :], q_start)
        scores = torch.matmul(q[:, :, rows].float(), k.float().transpose(-1, -2)) * scale  # (B, H, t, Tk)
        if score_cap:
            scores = score_cap * torch.tanh(scores / score_cap)
        scores = hooks.fire(layer, "attn.hook_scores", scores, q_start)
        w = hooks.fire(layer, "attn.hook_pattern", norm(scores, chunk_mask), q_start)  # (B, H, t, Tk)
        outs.append(torch.matmul(w.to(v.dtype), v))  # (B, H, t, D)
        if need_weights:
            weights.append(w)
    z = hooks.fire(layer, "attn.hook_z", torch.cat(outs, dim=2) if len(outs) > 1 else outs[0], offset)
    w_all = (torch.cat(weights, dim=2) if len(weights) > 1 else weights[0]) if need_weights else None
    return z, w_all


def sdpa_equivalent(norm: AttnNorm, hooks: Optional[HookSet], need_weights: bool) -> bool:
    """Whether PyTorch's fused SDPA computes exactly what :func:`attend` would here."""
    return type(norm) is Softmax and not hooks and not need_weights


def attend_fast(q, k, v, mask, norm, scale=1.0, hooks=None, layer=0, need_weights=False, plain_causal=False):
    """:func:`attend`, through ``F.scaled_dot_product_attention`` whenever that is equivalent.

    ``plain_causal`` says that ``mask`` is exactly :func:`causal_mask` (the caller knows; checking
    would cost a pass over the mask), which lets SDPA use its causal kernel.
    """
    if sdpa_equivalent(norm, hooks, need_weights):
        if plain_causal and q.shape[2] == k.shape[2]:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale), None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale), None
    return attend(q, k, v, mask, norm, scale, hooks, layer, need_weights=need_weights)


def default_scale(head_dim: int) -> float:
    """The usual 1/sqrt(d) score scaling."""
    return 1.0 / math.sqrt(head_dim)
