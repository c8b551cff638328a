"""Greedy decoding that never reads a device tensor on the host, and the GPU check built on it:
a sink cache's decode step must not wait for the device (see :mod:`.caches`)."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Iterator

import torch

from ..core.errors import check


@torch.no_grad()
def greedy_decode(model, cache, ids: torch.Tensor, steps: int, pass_positions: bool = False, during_steps=None) -> torch.Tensor:
    """Prefill ``ids`` (B, T) through ``cache``, then ``steps`` greedy single-token steps; the
    (B, steps) new tokens. Tokens and positions stay on the model's device: nothing here reads
    them. With ``pass_positions`` every forward gets ``position_ids`` (each row counts its tokens,
    as ``model.generate`` passes them), else the cache chooses them (a manual loop).
    ``during_steps``, a context manager factory, wraps the decode steps (not the prefill)."""
    positions = torch.arange(ids.shape[1], device=ids.device).expand(ids.shape[0], -1) if pass_positions else None
    logits = model(input_ids=ids, cache=cache, position_ids=positions, use_cache=True, logits_to_keep=1).logits[:, -1]
    tokens = []
    with during_steps() if during_steps else nullcontext():
        for _ in range(steps):
            token = logits.argmax(-1, keepdim=True)
            tokens.append(token)
            positions = None if positions is None else positions[:, -1:] + 1
            logits = model(input_ids=token, cache=cache, position_ids=positions, use_cache=True, logits_to_keep=1).logits[:, -1]
    return torch.cat(tokens, dim=1)


def decode_without_host_sync(model, cache, ids: torch.Tensor, steps: int, pass_positions: bool = False) -> torch.Tensor:
    """:func:`greedy_decode` on a CUDA model with ``torch.cuda.set_sync_debug_mode("error")``
    around the decode steps: any step that synchronises the host with the GPU (``.item()``,
    ``.cpu()``, a blocking copy, ``nonzero``) raises. The prefill may read the caller's positions
    once. Run it without an attention mask: transformers' own mask code reads a padding mask."""
    check(ids.device.type == "cuda", f"decode_without_host_sync checks CUDA synchronisation; the ids are on {ids.device}")
    tokens = greedy_decode(model, cache, ids, steps, pass_positions, during_steps=_sync_errors)
    torch.cuda.synchronize()
    return tokens


@contextmanager
def _sync_errors() -> Iterator[None]:
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)
