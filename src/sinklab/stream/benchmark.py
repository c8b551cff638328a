"""``sinklab stream``: perplexity, speed and memory of cache policies over a long stream.

Policies (``sinks`` + ``window`` = the cache size, the current token included):

* ``dense``: keep every key; memory and latency grow, quality falls past the trained context;
* ``window``: keep only the most recent ``sinks + window`` tokens;
* ``sink``: keep the first ``sinks`` tokens plus the recent ``window`` (StreamingLLM);
* ``recompute``: re-encode the last ``sinks + window`` tokens from scratch for every token (the
  slow, high-quality reference), scored on every ``recompute_every``-th position.

Scores: the next-token NLL of every position. ``dense`` is one causal forward pass; ``window``
and ``sink`` use :func:`~.kernel.sink_window_attention`, which gives every token
exactly the attention it would get streaming through the cache, in one pass. The run checks this
claim along the whole stream: the ``sink`` policy (else ``window``) is also streamed token by token
through a real cache, and a difference above :data:`ONE_PASS_TOLERANCE` fails the run (after its
results are written).

Speed: real token-by-token decoding through the cache. The checked policy is timed at every step
of its walk; the others at the start of every chunk (``latency_steps`` tokens each), so every
latency curve covers the whole stream.
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Optional

import torch

from ..core.corpus import load_corpus
from ..core.errors import NumericalCheckFailed, check
from ..core.hooks import HookSet
from ..core.results import Capability, RunContext, RunResult, register, stamped
from ..models.hf import input_device, instrument, model_facts, token_nll
from ..models.subjects import transformers_model
from . import page, plots
from .config import StreamConfig
from .frame import STREAM_TABLES
from .kernel import sink_window_attention
from .rope import RopeShift
from .walks import decode_walk, real_cache_walk, recompute_nll

#: Largest |NLL difference| (nats) allowed between the one-pass scores and a real cache.
ONE_PASS_TOLERANCE = 1e-3


def stream_tokens(tokenizer, corpus: str, n_tokens: int, bos: str) -> torch.Tensor:
    """The first ``n_tokens`` tokens of the corpus documents joined in name order (one long stream),
    after the tokenizer's BOS unless ``bos`` is no."""
    check(bos != "yes" or tokenizer.bos_token_id is not None, "--bos yes, but the tokenizer defines no BOS token")
    ids: list[int] = [tokenizer.bos_token_id] if bos != "no" and tokenizer.bos_token_id is not None else []
    for doc in sorted(load_corpus(corpus), key=lambda d: d.name):
        ids += tokenizer(doc.text, add_special_tokens=False)["input_ids"]
        if len(ids) >= n_tokens:
            break
    check(len(ids) >= n_tokens, f"the corpus {corpus!r} has only {len(ids)} tokens; lower --tokens")
    return torch.tensor(ids[:n_tokens])


# --------------------------------------------------------------------------- scores


@torch.no_grad()
def policy_nll(model, ids: torch.Tensor, policy: str, sinks: int, window: int) -> torch.Tensor:
    """NLL (T - 1,) of every next token under ``policy`` (dense, window or sink)."""
    if policy == "dense":
        return token_nll(model, ids[None])[0].cpu()
    n_sink, recent = (sinks, window) if policy == "sink" else (0, sinks + window)
    kernel = partial(sink_window_attention, n_sink=n_sink, window=recent, rope=RopeShift(model))
    with instrument(model, HookSet(), kernel=kernel):
        return token_nll(model, ids[None])[0].cpu()


# --------------------------------------------------------------------------- summary


def chunks_of(positions: torch.Tensor, chunk: int):
    """(start, mask) for every ``chunk``-long stretch of the stream that holds some of ``positions``."""
    for start in range(0, int(positions.max()) + 1, chunk):
        sel = (positions >= start) & (positions < start + chunk)
        if sel.any():
            yield start, sel


def by_chunk(positions: torch.Tensor, nll: torch.Tensor, chunk: int) -> list[dict]:
    return [
        {"start": start, "end": start + chunk, "ppl": math.exp(nll[sel].mean().item())}
        for start, sel in chunks_of(positions, chunk)
    ]


def evaluate_policy(
    model,
    ids: torch.Tensor,
    policy: str,
    sinks: int,
    window: int,
    cfg: StreamConfig,
    timed: bool = True,
    walk: Optional[dict] = None,
) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """The summary entry of one policy, plus the (positions, NLL) it was computed from. With a
    real-cache ``walk`` of this policy, its step times are the latency measurement."""
    if policy == "recompute":
        positions, nll, seconds = recompute_nll(model, ids, sinks + window, cfg.recompute_every)
        speed = {
            "ms_per_token_by_chunk": _ms_by_chunk(positions, seconds, cfg.chunk),
            "peak_cache_bytes": 0,
            "scored_every": cfg.recompute_every,
        }
    else:
        nll = policy_nll(model, ids, policy, sinks, window)
        positions = torch.arange(1, len(ids))
        if walk is not None:
            fed = torch.arange(walk["first"], walk["first"] + len(walk["seconds"]))
            speed = {
                "ms_per_token_by_chunk": _ms_by_chunk(fed, walk["seconds"], cfg.chunk),
                "peak_cache_bytes": walk["peak_cache_bytes"],
            }
        else:
            speed = decode_walk(model, ids, policy, sinks, window, cfg.chunk, cfg.latency_steps) if timed else {}
    if speed.get("ms_per_token_by_chunk"):
        chunks = speed["ms_per_token_by_chunk"]
        speed["tokens_per_s"] = 1000.0 / (sum(c["ms"] for c in chunks) / len(chunks))
    entry = {
        "ppl": math.exp(nll.mean().item()),
        "scored_tokens": int(nll.numel()),
        "ppl_by_chunk": by_chunk(positions, nll, cfg.chunk),
        **speed,
    }
    return entry, positions, nll


def _ms_by_chunk(positions: torch.Tensor, seconds: torch.Tensor, chunk: int) -> list[dict]:
    """Mean ms per step in each chunk of the stream that has timed steps."""
    return [
        {"start": start, "end": start + chunk, "ms": 1000 * seconds[sel].mean().item(), "measured_at": int(positions[sel][0])}
        for start, sel in chunks_of(positions, chunk)
    ]


def same_positions_ppl(curves: dict) -> dict:
    """Perplexity of every policy on the positions the recompute policy was scored at."""
    at = curves["recompute"][0]
    return {
        p: math.exp(nll[at - 1].mean().item()) if p != "recompute" else math.exp(nll.mean().item())
        for p, (_, nll) in curves.items()
    }


def checked_policy(cfg: StreamConfig, n_tokens: int) -> Optional[str]:
    """The policy whose one-pass scores are checked against a real cache (None: nothing to check)."""
    policy = "sink" if "sink" in cfg.policies else "window" if "window" in cfg.policies else None
    return policy if cfg.check and n_tokens > cfg.capacity else None


def one_pass_check(policy: str, one_pass: torch.Tensor, walk: dict, chunk: int) -> dict:
    """The one-pass scores against the real cache's, chunk by chunk along the whole walked stream."""
    first = walk["first"]
    mine, real = one_pass[first - 1 :], walk["nll"]
    positions = torch.arange(first, first + len(real))
    gap = (mine - real).abs()
    chunks = [
        {
            "start": start,
            "end": start + chunk,
            "ppl_one_pass": math.exp(mine[sel].mean().item()),
            "ppl_real_cache": math.exp(real[sel].mean().item()),
            "max_abs_nll_difference": gap[sel].max().item(),
        }
        for start, sel in chunks_of(positions, chunk)
    ]
    worst = int(gap.argmax())
    return {
        "policy": policy,
        "positions": [first, first + len(real)],
        "tolerance": ONE_PASS_TOLERANCE,
        "max_abs_nll_difference": gap[worst].item(),
        "worst_position": first + worst,
        "passed": bool(gap[worst] <= ONE_PASS_TOLERANCE),
        "by_chunk": chunks,
    }


def measure(cfg: StreamConfig, context: RunContext = RunContext()) -> RunResult:
    """Every policy (and the sink-count ablation) over one stream, in memory: the summary and, as
    data, the per-position next-token NLL (nats) of each policy (``<policy>``) at its positions
    (``<policy>.positions``)."""
    loaded = transformers_model(context.subject) if context.subject is not None else cfg.load.load(cfg.model)
    model, tokenizer = loaded.model, loaded.tokenizer
    ids = stream_tokens(tokenizer, cfg.corpus, cfg.tokens, cfg.bos).to(input_device(model))
    entries, curves, checked = {}, {}, checked_policy(cfg, len(ids))
    walk = real_cache_walk(model, ids, checked, cfg.sinks, cfg.window) if checked else None
    for policy in cfg.policies:
        entries[policy], positions, nll = evaluate_policy(
            model, ids, policy, cfg.sinks, cfg.window, cfg, walk=walk if policy == checked else None
        )
        curves[policy] = (positions, nll)
    if "recompute" in curves:  # its scores are sparse: compare every policy on the same positions
        entries["recompute"]["ppl_same_positions"] = same_positions_ppl(curves)
    summary = {
        "model": loaded.name,
        **model_facts(model),
        "max_positions": loaded.max_positions,
        "tokens": cfg.tokens,
        "sinks": cfg.sinks,
        "window": cfg.window,
        "bos_prepended": bool(cfg.bos != "no" and tokenizer.bos_token_id is not None),
        "policies": entries,
        "one_pass_check": one_pass_check(checked, curves[checked][1], walk, cfg.chunk) if checked else None,
    }
    if cfg.ablation:
        summary["ablation"] = {
            str(n): evaluate_policy(model, ids, "sink" if n else "window", n, cfg.capacity - n, cfg, timed=False)[0]
            for n in cfg.ablation
        }
    return RunResult(stamped("stream", summary), plots.data_from(curves))


def write(out: Path, result: RunResult) -> list[str]:
    """The NLL curves (the figures, summary.json and the page are the pipeline's)."""
    plots.save_data(out, result.data)
    return [plots.CURVES_FILE]


def check_one_pass(result: RunResult) -> None:
    """Fail when the one-pass scores of the checked policy left the real cache's tolerance."""
    verdict = result.summary["one_pass_check"]
    if verdict and not verdict["passed"]:
        raise NumericalCheckFailed(
            f"the one-pass {verdict['policy']} scores differ from a real {verdict['policy']} cache "
            f"by {verdict['max_abs_nll_difference']:.2e} nats "
            f"at position {verdict['worst_position']} (tolerance {ONE_PASS_TOLERANCE:g})"
        )


STREAM = register(
    Capability(
        "stream",
        StreamConfig,
        measure,
        write,
        tables=STREAM_TABLES,
        write_page=page.write,
        read_data=plots.read_data,
        check=check_one_pass,
        figures=lambda result: plots.figures(result.summary, result.data),
        sections=plots.sections,
    )
)
