"""The merged-circuit forward of plain attention-only native models (the trigger models): the same
function and gradients as the reference path of :class:`~.native.Transformer`, in a few larger matrix
products instead of many small ones. The model takes it by itself where it applies
(:func:`merged_circuit_eligible`) and no hook listens inside its attention (:func:`hooks_inside_attention`).
Every function here takes a :class:`~.native.Transformer`.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.attention import causal_mask, default_scale

#: The hook points of the reference path that the merged circuits never compute.
MERGED_MISSING_POINTS = ("attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z")


def merged_circuit_eligible(model: nn.Module) -> bool:
    """Whether :func:`attention_only_forward` computes exactly what the reference path computes."""
    cfg = model.cfg
    plain = not (cfg.attention.extras or cfg.bias or cfg.rope or cfg.mlp or cfg.norm or cfg.sink_tokens)
    return plain and cfg.vocab_size is None


def hooks_inside_attention(model: nn.Module) -> bool:
    """Whether a hook of ``model`` listens to a point that only the reference attention path fires
    (:data:`MERGED_MISSING_POINTS`)."""
    hooks = model.hooks
    return bool(hooks) and any(hooks.listens(i, p) for i in range(model.cfg.n_layers) for p in MERGED_MISSING_POINTS)


def attention_only_forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The reference forward of plain attention-only models, through merged QK and OV circuits.

    Scores are x A_h x^T with A_h = W_Q,h^T W_K,h, and the output is sum_h w_h x M_h with
    M_h = W_V,h^T W_O,h^T (the circuits view of Elhage et al. 2021). The function and the
    gradients reaching W_Q, W_K, W_V, W_O are the same as the reference path; the work is a few
    larger matrix products instead of many small ones, which makes the tiny trigger models train
    about 1.5x faster on CPU. Fires ``hook_resid_pre``, ``attn.hook_mask``, ``attn.hook_scores``,
    ``attn.hook_pattern`` and ``hook_resid_post`` like the reference path (the points of
    :data:`MERGED_MISSING_POINTS` do not exist here; listening to one takes the reference path).
    """
    if not merged_circuit_eligible(model):
        raise ValueError("attention_only_forward needs an attention-only model without extras")
    if hooks_inside_attention(model):
        raise ValueError("attention_only_forward cannot fire q, k, v or z hooks; use need_weights=True")
    cfg, hooks = model.cfg, model.hooks
    H, D, d = cfg.n_heads, cfg.head_dim, cfg.d_model
    B, T, _ = x.shape
    scale = default_scale(D) if cfg.scale_scores else 1.0
    base_mask = causal_mask(T, T, x.device)
    for block in model.blocks:
        attn, i = block.attn, block.layer
        x = hooks.fire(i, "hook_resid_pre", x)
        w_q, w_k, w_v = attn.qkv.weight.view(3, H, D, d)
        w_o = attn.out.weight.view(d, H, D)
        qk = torch.einsum("hkd,hke->dhe", w_q, w_k).reshape(d, H * d) * scale  # columns: A_h
        ov = torch.einsum("hkd,ehk->dhe", w_v, w_o).reshape(d, H * d)  # columns: M_h
        xa = (x @ qk).view(B, T, H, d).transpose(1, 2).reshape(B, H * T, d)
        mask = hooks.fire(i, "attn.hook_mask", base_mask)
        scores = hooks.fire(i, "attn.hook_scores", torch.bmm(xa, x.transpose(1, 2)).view(B, H, T, T))
        weights = hooks.fire(i, "attn.hook_pattern", attn.norm(scores, mask))  # (B, H, T, T)
        xm = (x @ ov).view(B, T, H, d).transpose(1, 2).reshape(B, H * T, d)
        a = torch.bmm(weights.transpose(1, 2).reshape(B, T, H * T), xm)  # (B, T, d)
        x = hooks.fire(i, "hook_resid_post", x + a if cfg.residual else a)
    return x
