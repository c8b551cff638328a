"""Instrumenting a Hugging Face model with sinklab's hook names, and scoring it.

Attention is captured through an attention function registered with transformers'
``AttentionInterface`` (plus a mask function that always materialises the boolean mask), so no
architecture's forward is monkey-patched: any model that dispatches through the interface fires
``blocks.{i}.attn.hook_*`` exactly like the native models. The residual stream (entering and
leaving each decoder layer) and the FFN activation come from torch hooks on the modules named by
:data:`~.layouts.LAYOUTS`.

The adapter implements every argument a model may pass that changes the attention result, or
refuses the model: ``softcap`` (Gemma 2's score soft-capping) and ``s_aux`` (gpt-oss's learned
per-head sink logits, exactly the ``sink_logit`` normalisation, whose slot mass the recorder
reports as the null slot) are implemented; ``sliding_window`` is already part of the mask that
transformers builds; ``is_causal`` decides what a call without a mask means; any other argument
not in :data:`HARMLESS_ARGUMENTS` raises a clear error. A model that does not attend causally is
refused on entry (:func:`~.support.check_causal`): sinklab never imposes a mask the model does not use.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ...core.attention import AttnNorm, attend, causal_mask, make_norm
from ...core.errors import SinklabError
from ...core.hooks import HookSet
from .layouts import decoder_layers, get_submodule, layout_of
from .support import check_causal

ATTN_NAME = "sinklab"
KERNEL_ATTN_NAME = "sinklab_kernel"  # a custom kernel that builds its own visibility (no mask)
QUERY_CHUNK = 256  # query rows attended at once: bounds the (rows, T) score block on long inputs

#: Arguments models pass to attention functions that cannot change the result.
HARMLESS_ARGUMENTS = frozenset({"position_ids", "use_cache", "cache_position", "output_attentions", "output_router_logits"})
#: Arguments that change the result and that the adapter implements.
IMPLEMENTED_ARGUMENTS = frozenset({"softcap", "s_aux", "sliding_window", "is_causal"})


@dataclass
class _Binding:
    hooks: HookSet
    layer: int
    query_chunk: Optional[int]
    kernel: Optional[Callable] = None  # (q, k, v, scale) -> z (B, H, T, D), replacing attend()
    norm: Optional[AttnNorm] = None  # replaces the model's softmax (an adapted model's mitigation)


_BINDINGS: dict[int, _Binding] = {}  # id(attention module) -> binding, only inside instrument()
_SOFTMAX = make_norm("softmax", 1)


def _repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, Hkv, T, D) -> (B, Hkv * groups, T, D) for grouped-query attention."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def _null_slot_norm(s_aux: torch.Tensor):
    """The ``sink_logit`` normalisation with gpt-oss's per-head sink logits as its slot."""
    norm = make_norm("sink_logit", s_aux.shape[0])
    with torch.no_grad():
        norm.sink.copy_(s_aux.detach().float())
    return norm


def _check_arguments(module: nn.Module, kwargs: dict, dropout: float, kernel: bool) -> None:
    """Refuse what the adapter would silently get wrong."""
    name = type(module).__name__
    unknown = sorted(k for k, v in kwargs.items() if v is not None and k not in HARMLESS_ARGUMENTS | IMPLEMENTED_ARGUMENTS)
    if unknown:
        raise SinklabError(
            f"{name} passes {', '.join(unknown)} to its attention function, "
            "which sinklab's adapter does not implement; its attention would be wrong"
        )
    if dropout and module.training:
        raise SinklabError(
            f"{name} is in training mode with attention dropout {dropout}; "
            "sinklab measures models in eval mode (call model.eval())"
        )
    if kernel and (
        kwargs.get("sliding_window") is not None or kwargs.get("s_aux") is not None or kwargs.get("softcap") is not None
    ):
        raise SinklabError(
            f"{name} uses a sliding window, sink logits or soft-capping, which the streaming kernel does not implement"
        )


def sinklab_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The attention function transformers calls while a model is instrumented.

    Computes attention with :func:`sinklab.core.attention.attend` (float32, query chunks), so
    every ``attn.hook_*`` point fires with sinklab's names; returns (B, T, H, D) like the
    built-in functions.
    """
    binding = _BINDINGS.get(id(module))
    if binding is None:
        raise RuntimeError("sinklab attention called outside sinklab.models.hf.instrument()")
    _check_arguments(module, kwargs, dropout, binding.kernel is not None)
    groups = query.shape[1] // key.shape[1]
    key, value = _repeat_kv(key, groups), _repeat_kv(value, groups)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    if binding.kernel is not None:
        return binding.kernel(query, key, value, scale).to(query.dtype).transpose(1, 2).contiguous(), None
    mask = attention_mask
    if mask is None:
        mask = _mask_of_unmasked_call(module, kwargs, query.shape[2], key.shape[2], query.device)
    if mask.dtype != torch.bool:  # an additive float mask from an eager-style mask function
        mask = mask > torch.finfo(mask.dtype).min / 2
    s_aux = kwargs.get("s_aux")
    if binding.norm is not None and s_aux is not None:
        raise SinklabError(f"{type(module).__name__} already has learned sink logits; sinklab cannot replace its normalisation")
    norm = binding.norm or (_SOFTMAX if s_aux is None else _null_slot_norm(s_aux))
    need_weights = bool(kwargs.get("output_attentions", False))
    z, weights = attend(
        query,
        key,
        value,
        mask,
        norm,
        scale,
        binding.hooks,
        binding.layer,
        binding.query_chunk,
        need_weights,
        score_cap=kwargs.get("softcap"),
    )
    return z.to(query.dtype).transpose(1, 2).contiguous(), weights


def _mask_of_unmasked_call(module: nn.Module, kwargs: dict, n_queries: int, n_keys: int, device) -> torch.Tensor:
    """The visibility a call without a mask means, read as transformers' own SDPA function reads it:
    the call's ``is_causal``, else the module's (True when it has none). A call that means full
    attention is refused: a causal mask here would change the model's output."""
    causal = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", True) if causal is None else causal
    if not causal:
        raise SinklabError(
            f"{type(module).__name__} attends to every token (is_causal=False, no mask); sinklab measures causal attention only"
        )
    return causal_mask(n_queries, n_keys, device)


def _boolean_mask(*args, **kwargs):
    """transformers' SDPA mask builder, forced to return the mask (never "use is_causal")."""
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def _no_mask(*args, **kwargs):
    """A kernel decides visibility itself: skip building a (T, T) mask for long inputs."""
    return None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTN_NAME, sinklab_attention)
    AttentionMaskInterface.register(ATTN_NAME, _boolean_mask)
    AttentionInterface.register(KERNEL_ATTN_NAME, sinklab_attention)
    AttentionMaskInterface.register(KERNEL_ATTN_NAME, _no_mask)


@contextmanager
def instrument(
    model: nn.Module,
    hooks: HookSet,
    query_chunk: Optional[int] = QUERY_CHUNK,
    kernel: Optional[Callable] = None,
    norms: Optional[Sequence[AttnNorm]] = None,
) -> Iterator[nn.Module]:
    """Route the model's attention through sinklab and fire every hook point on ``hooks``.

    Attention is computed ``query_chunk`` rows at a time (None: all rows at once, so the mask,
    score and pattern hooks receive whole (B, H, Tq, Tk) tensors). With ``kernel`` the attention
    itself is that function of (q, k, v, scale) instead of the masked reference (the attention
    hooks then do not fire); with ``norms`` (one per layer) each layer's softmax is replaced by
    that normalisation. Restores the model's attention implementation and removes every torch
    hook on exit, also when the body raises; an instrumentation entered inside another one (a
    scan inside :func:`sinklab.applied`) gives the outer one back its bindings.
    """
    check_causal(model)
    _register()
    layers = decoder_layers(model)
    down_path = layout_of(model).down_proj
    previous = model.config._attn_implementation
    outer = {id(sub): _BINDINGS[id(sub)] for layer in layers for sub in layer.modules() if id(sub) in _BINDINGS}
    handles = []
    try:
        model.set_attn_implementation(KERNEL_ATTN_NAME if kernel is not None else ATTN_NAME)
        for i, layer in enumerate(layers):
            for sub in layer.modules():
                _BINDINGS[id(sub)] = _Binding(hooks, i, query_chunk, kernel, norms[i] if norms is not None else None)
            handles.append(layer.register_forward_pre_hook(_resid_pre_hook(hooks, i), with_kwargs=True))
            handles.append(layer.register_forward_hook(_resid_hook(hooks, i)))
            if down_path:
                handles.append(get_submodule(layer, down_path).register_forward_pre_hook(_mlp_hook(hooks, i)))
        yield model
    finally:
        for handle in handles:
            handle.remove()
        for layer in layers:
            for sub in layer.modules():
                _BINDINGS.pop(id(sub), None)
        _BINDINGS.update(outer)
        model.set_attn_implementation(previous)


def _resid_pre_hook(hooks: HookSet, layer: int):
    """Fires ``hook_resid_pre`` on the layer's input, passed positionally or as ``hidden_states``."""

    def hook(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        new = hooks.fire(layer, "hook_resid_pre", hidden)
        if new is hidden:
            return None
        return ((new, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": new})

    return hook


def evicted_tokens(cache) -> int:
    """How many tokens a transformers cache has dropped so far (0 for a cache that keeps
    everything): once it has, a query's key count no longer tells its position, so hook positions
    (``q_start``) would be cache slots. Reads what each layer says of itself: ``kept_tokens`` and
    ``tokens_seen`` (sinklab's sink cache), ``cumulative_length`` (transformers' sliding windows)."""
    evicted = 0
    for layer in getattr(cache, "layers", None) or ():
        held = (
            layer.kept_tokens()
            if hasattr(layer, "kept_tokens")
            else (layer.keys.shape[-2] if getattr(layer, "keys", None) is not None else 0)
        )
        seen = layer.tokens_seen() if hasattr(layer, "tokens_seen") else getattr(layer, "cumulative_length", held)
        evicted = max(evicted, seen - held)
    return evicted


def _resid_hook(hooks: HookSet, layer: int):
    def hook(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        new = hooks.fire(layer, "hook_resid_post", hidden)
        if new is hidden:
            return None
        return (new, *output[1:]) if isinstance(output, tuple) else new

    return hook


def _mlp_hook(hooks: HookSet, layer: int):
    def hook(module, args):
        new = hooks.fire(layer, "mlp.hook_post", args[0])
        return None if new is args[0] else (new, *args[1:])

    return hook


@torch.no_grad()
def token_nll(model: nn.Module, ids: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """Next-token NLL (B, T - 1) in nats of ``ids`` (B, T), never holding the full (T, vocab) logits."""
    hidden = model.base_model(input_ids=ids, use_cache=False).last_hidden_state  # (B, T, d), final norm applied
    return head_nll(model, hidden[:, :-1], ids[:, 1:], chunk)


@torch.no_grad()
def head_nll(model: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """NLL (B, N) of ``targets`` (B, N) from final hidden states (B, N, d) through the output
    layer, in position chunks. The cross-entropy runs over contiguous vocabulary rows: over a
    strided (B, V, T) view, float32 log-softmax on the default model was off by up to 1.2e-4
    nats (and biased low)."""
    pieces = []
    for start in range(0, targets.shape[1], chunk):
        logits = output_logits(model, hidden[:, start : start + chunk]).float()
        part = targets[:, start : start + chunk].to(logits.device)  # a device map may end on another device
        pieces.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), part.reshape(-1), reduction="none").view_as(part))
    return torch.cat(pieces, dim=1)


def output_logits(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """Logits from final hidden states: the output layer, and Gemma 2's final soft cap."""
    logits = model.get_output_embeddings()(hidden)
    cap = getattr(model.config, "final_logit_softcapping", None)
    return cap * torch.tanh(logits / cap) if cap else logits
