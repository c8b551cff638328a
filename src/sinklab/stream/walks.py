"""The stream's measurements that run the model token by token: recomputation from scratch (the
slow reference policy), latency through a real cache at every chunk, and the real-cache walk the
one-pass scores are checked against (:mod:`.benchmark` turns them into the summary)."""

from __future__ import annotations

import time

import torch

from ..core.progress import progress_bar
from .caches import cache_bytes, make_sink_cache


def clock(device: torch.device) -> float:
    """Seconds, after the GPU's queued work is done (a GPU step returns before it has run)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _nll(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Next-token NLL of one position, on the CPU (logits may sit on the last device of a device map)."""
    return torch.nn.functional.cross_entropy(logits.float(), target.to(logits.device)).cpu()


@torch.no_grad()
def recompute_nll(model, ids: torch.Tensor, context: int, every: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(positions, NLL, seconds): token t scored from a fresh encoding of the ``context`` tokens
    before it, at every ``every``-th position. Only the last position's logits are computed."""
    positions = list(range(context, len(ids), every)) or [len(ids) - 1]
    nll, seconds = [], []
    for t in progress_bar(positions, desc="recompute", unit="tok"):
        start = clock(ids.device)
        logits = model(input_ids=ids[None, t - min(t, context) : t], logits_to_keep=1, use_cache=False).logits[0, -1:]
        nll.append(_nll(logits, ids[t : t + 1]))
        seconds.append(clock(ids.device) - start)
    return torch.tensor(positions), torch.stack(nll), torch.tensor(seconds)


def _new_cache(model, policy: str, sinks: int, window: int):
    from transformers import DynamicCache

    if policy == "dense":
        return DynamicCache()
    return make_sink_cache(model, sinks, window) if policy == "sink" else make_sink_cache(model, 0, sinks + window)


@torch.no_grad()
def decode_walk(model, ids: torch.Tensor, policy: str, sinks: int, window: int, chunk: int, steps: int) -> dict:
    """Walk the stream through a real cache: prefill up to each chunk start, then time ``steps``
    single-token decode steps there. Returns ms per token by chunk and the peak cache size."""
    cache = _new_cache(model, policy, sinks, window)
    done, peak, by_chunk = 0, 0, []
    starts = [s for s in range(0, len(ids) - 1, chunk)]
    for start in progress_bar(starts, desc=f"{policy} latency", unit="chunk"):
        at = max(start, min(sinks + window, len(ids) - steps - 1), done)  # first timed step past a full cache
        if at > done:
            model(input_ids=ids[None, done:at], cache=cache, use_cache=True)
            done = at
        times = []
        for t in range(done, min(done + steps, len(ids) - 1)):
            begin = clock(ids.device)
            model(input_ids=ids[None, t : t + 1], cache=cache, use_cache=True)
            times.append(clock(ids.device) - begin)
        done += len(times)
        peak = max(peak, cache_bytes(cache))
        if times:
            by_chunk.append(
                {"start": start, "end": start + chunk, "ms": 1000 * sum(times) / len(times), "measured_at": done - len(times)}
            )
    return {"ms_per_token_by_chunk": by_chunk, "peak_cache_bytes": peak}


@torch.no_grad()
def real_cache_walk(model, ids: torch.Tensor, policy: str, sinks: int, window: int) -> dict:
    """Stream every token after the prefill through a real cache, one at a time: the reference the
    one-pass scores are checked against. ``nll[i]`` scores token ``first + i``; ``seconds[i]`` is
    the step that fed it. The prefill (``capacity - 1`` tokens) fills the cache without eviction."""
    cache = _new_cache(model, policy, sinks, window)
    first = min(sinks + window - 1, len(ids) - 2)
    logits = model(input_ids=ids[None, :first], cache=cache, use_cache=True).logits[0, -1:]
    nll, seconds, peak = [], [], 0
    for t in progress_bar(range(first, len(ids) - 1), desc=f"{policy} cache, token by token", unit="tok"):
        nll.append(_nll(logits, ids[t : t + 1]))
        begin = clock(ids.device)
        logits = model(input_ids=ids[None, t : t + 1], cache=cache, use_cache=True).logits[0, -1:]
        seconds.append(clock(ids.device) - begin)
        peak = max(peak, cache_bytes(cache))
    nll.append(_nll(logits, ids[-1:]))
    return {"first": first, "nll": torch.stack(nll), "seconds": torch.tensor(seconds), "peak_cache_bytes": peak}
