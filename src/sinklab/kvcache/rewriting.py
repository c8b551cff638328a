"""The one rewrite routine every cache policy runs through (:func:`rewrite`; a policy's
:meth:`~.policy.CachePolicy.apply` calls it): which layers of a cache are rewritten (the
full-attention ones), which positions are held apart as sinks (the first N, or those detected from
the prefill's attention), where they sit among a layer's keys after a press (:func:`slots_of`), and
the report of bytes and positions (:class:`~.policy.Compression`). :func:`branch` copies a cache that
several continuations may extend.
"""

from __future__ import annotations

import copy
from typing import Optional

import torch

from ..core.errors import SinklabError, check
from ..stream import cache_bytes
from .policy import CachePolicy, Compression, LayerContext, not_a_policy
from .registry import DETECTED, KeepSinks
from .sinks import detected_sinks


def sink_positions(setting: KeepSinks, length: int, tally, layers: list[int]) -> list[int]:
    """The positions a ``keep_sinks``/``protect`` setting names in a context of ``length`` tokens:
    the first N, or those detected from the prefill's attention ``tally`` (None when nothing was
    recorded) in the full-attention ``layers`` (a sliding-window layer's keys are seen by a window
    of queries, not by every later one, so its mean per query would be misread)."""
    if setting == DETECTED:
        check(
            tally is not None and bool(tally.received),
            "detected sinks are read from the prefill's attention: rewrite inside `sinklab.applied(model, ...)`, "
            "or pass the tally of a prefill run under `kvcache.tallied(...)`",
        )
        return detected_sinks({index: tally.received[index] for index in layers})
    return list(range(min(setting, length)))


def rewrite(cache, policy: CachePolicy, tally=None, sinks: Optional[list] = None) -> Compression:
    """Rewrite every full-attention layer of ``cache`` (just filled by a prefill, or by a prefill
    and a press; or grown by decoding since a press) with ``policy``, from the attention ``tally``
    when it needs it. ``sinks``: the positions held apart, when found before (a decoding press's,
    detected on the prompt); by default from the policy's setting."""
    if not isinstance(policy, CachePolicy):
        raise not_a_policy(policy)
    check(
        policy.idle or not policy.needs or tally is not None,
        f"{policy.name} scores keys from the prefill's attention: rewrite inside `sinklab.applied(model, ...)`",
    )
    layers = rewritable_layers(cache, policy)
    report = Compression(cache.layers[layers[0]].get_seq_length(), bytes_before=cache_bytes(cache))
    if sinks is None:
        sinks = [] if policy.idle else sink_positions(policy.sinks, report.length, tally, layers)
    report.sinks = list(sinks)
    group: list = []
    for index in layers:
        layer = cache.layers[index]
        context = LayerContext(
            layer.keys, layer.values, index, len(cache.layers),
            received=tally.received.get(index) if tally is not None else None,
            window=tally.window.get(index) if tally is not None else None,
            window_rows=policy.window_rows, positions=_held_positions(layer), seen=layer.get_seq_length(),
        )  # fmt: skip
        for name, sums in (("received", context.received), ("window", context.window)):
            check(
                name not in policy.needs or sums is None or sums.shape[-1] == context.length,
                f"{policy.name}: the attention tally ({name}) covers {0 if sums is None else sums.shape[-1]} keys and layer "
                f"{index} holds {context.length}: pass the tally of the prefill that filled this cache",
            )
        cache.layers[index], positions = policy.rewritten(context, report.sinks, group)
        report.positions[index] = positions.cpu()
    report.bytes_after = cache_bytes(cache)
    return report


def _held_positions(layer) -> Optional[torch.Tensor]:
    """The positions a layer's keys hold, where a press kept only some (None: every position)."""
    return layer.held_positions() if hasattr(layer, "held_positions") else None


def slots_of(context: LayerContext, sinks: list[int], name: str) -> list[int]:
    """Where the positions ``sinks`` sit among the layer's keys: the positions themselves in a dense
    layer; after a press, their place among the kept keys, which must be the same in every head (a
    policy holds one set of slots apart)."""
    if context.positions is None:
        return list(sinks)
    slots = []
    for sink in sinks:
        found = context.positions == sink  # (B, Hkv, K)
        place = found.float().argmax(-1)
        check(
            bool(found.any(-1).all()),
            f"{name} holds position {sink} apart, which the press before it did not keep in every head: "
            "give the press keep_sinks covering it",
        )
        check(
            bool((place == place.flatten()[0]).all()),
            f"{name} holds position {sink} apart, which sits at different places among the heads' kept keys (the heads "
            "kept different keys before it; a detected sink past the first tokens can): hold the first N tokens apart "
            "(keep_sinks=N) instead",
        )
        slots.append(int(place.flatten()[0]))
    return slots


def rewritable_layers(cache, policy: CachePolicy) -> list[int]:
    """The layers of ``cache`` that ``policy`` rewrites: every full-attention layer, held dense or
    as a press kept it (a quantizer stores what a press kept; a press during decoding presses its
    own layers again). Sliding-window layers are left as they are (they hold at most their window
    already); any other kind of layer is refused."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    from .layers import PressedLayer

    takes = (DynamicLayer, PressedLayer)
    chosen = []
    for index, layer in enumerate(cache.layers):
        if isinstance(layer, DynamicSlidingWindowLayer):
            continue
        if type(layer) not in takes:
            after = "a quantizer stores what a press kept, not the reverse; " if getattr(layer, "group", None) is not None else ""
            raise SinklabError(
                f"{policy.name} rewrites a dynamic cache; layer {index} of this cache is a {type(layer).__name__} "
                f"({after}use the default cache)"
            )
        chosen.append(index)
    window = getattr(cache.layers[0], "sliding_window", None)
    check(
        chosen,
        f"every layer of this model attends through a sliding window ({window} tokens), which bounds its cache "
        "already; sinklab's presses and quantizers rewrite full-attention layers only",
    )
    return chosen


def full_attention_layers(cache) -> list[int]:
    """The full-attention layers of a dense ``cache`` (sliding-window layers left out)."""
    from transformers.cache_utils import DynamicSlidingWindowLayer

    return [index for index, layer in enumerate(cache.layers) if not isinstance(layer, DynamicSlidingWindowLayer)]


def branch(cache):
    """A copy of ``cache`` that a forward may extend without changing ``cache`` (the tensors are
    shared until a forward concatenates new ones; a rewritten layer's counts, group and store are
    its own): several continuations of one compressed context."""
    twin = copy.copy(cache)
    twin.layers = [layer.branched() if hasattr(layer, "branched") else copy.copy(layer) for layer in cache.layers]
    group = [layer for layer in twin.layers if getattr(layer, "group", None) is not None]
    for layer in group:
        layer.group = group
    return twin


CachePolicy._rewrite = rewrite  # the routine policy.apply runs (policy.py cannot import this module)
