"""``sinklab stream`` and ``sinklab generate``: streaming past the context window.

The benchmark feeds a long text token by token and records, per policy, the negative
log-likelihood of every next token and the wall time of every step:

* ``dense``: keep every key (transformers' DynamicCache); memory and latency grow, and quality
  falls once the stream passes the trained context;
* ``window``: keep only the most recent tokens (a sink cache with no sinks);
* ``sink``: keep ``sinks`` first tokens plus the recent window (StreamingLLM);
* ``recompute``: re-encode the last ``sinks + window`` tokens from scratch for every token (the
  slow, high-quality reference); it is evaluated on every ``recompute_every``-th position.

The first ``sinks + window - 1`` tokens are encoded in one forward pass (nothing is evicted before
that), then the stream continues one token at a time.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from . import report
from .data import load_corpus
from .errors import check
from .runs import prepare_run_dir, write_json
from .streaming import POLICIES, StreamResult, cache_bytes, check_sizes, make_sink_cache


@dataclass
class StreamConfig:
    model: Optional[str] = None
    corpus: str = "shakespeare"
    tokens: int = 4096
    sinks: int = 4
    window: int = 1020
    policies: tuple[str, ...] = ("dense", "window", "sink", "recompute")
    recompute_every: int = 64
    chunk: int = 1024  # positions per reported chunk
    bos: bool = True
    ablation: tuple[int, ...] = ()  # sink counts to compare at the same total cache size
    out: str = "runs/stream"

    def __post_init__(self) -> None:
        unknown = [p for p in self.policies if p not in POLICIES]
        check(not unknown, f"unknown policy {', '.join(unknown)}; choose from: {', '.join(POLICIES)}")
        check_sizes(self.sinks, self.window)
        check(self.tokens >= 2, f"--tokens must be at least 2, got {self.tokens}")
        check(self.recompute_every >= 1, f"--recompute-every must be >= 1, got {self.recompute_every}")
        for n in self.ablation:
            check(0 <= n < self.sinks + self.window, f"ablation sink count {n} leaves no room in a cache of {self.sinks + self.window}")

    @property
    def capacity(self) -> int:
        return self.sinks + self.window


def stream_tokens(tokenizer, corpus: str, n_tokens: int, bos: bool) -> torch.Tensor:
    """The first ``n_tokens`` tokens of the corpus documents joined in name order (one long stream)."""
    docs = load_corpus(corpus)
    ids: list[int] = [tokenizer.bos_token_id] if bos and tokenizer.bos_token_id is not None else []
    for doc in sorted(docs, key=lambda d: d.name):
        ids += tokenizer(doc.text, add_special_tokens=False)["input_ids"]
        if len(ids) >= n_tokens:
            break
    check(len(ids) >= n_tokens, f"the corpus {corpus!r} has only {len(ids)} tokens; lower --tokens")
    return torch.tensor(ids[:n_tokens])


def _nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), targets, reduction="none")


@torch.no_grad()
def stream_with_cache(model, ids: torch.Tensor, cache, prefill: int, desc: str) -> StreamResult:
    """Prefill ``prefill`` tokens, then predict every later token one step at a time."""
    prefill = max(1, min(prefill, len(ids) - 1))
    logits = model(input_ids=ids[None, :prefill], cache=cache, use_cache=True).logits[0]
    nll = [_nll(logits, ids[1 : prefill + 1])]
    seconds = [torch.zeros(prefill)]
    peak = cache_bytes(cache)
    for t in tqdm(range(prefill, len(ids) - 1), desc=desc, unit="tok", mininterval=2.0):
        start = time.perf_counter()
        logits = model(input_ids=ids[None, t : t + 1], cache=cache, use_cache=True).logits[0]
        seconds.append(torch.tensor([time.perf_counter() - start]))
        nll.append(_nll(logits, ids[t + 1 : t + 2]))
        peak = max(peak, cache_bytes(cache))
    return StreamResult(desc, torch.arange(1, len(ids)), torch.cat(nll), torch.cat(seconds), peak)


@torch.no_grad()
def stream_recompute(model, ids: torch.Tensor, context: int, every: int, start: int) -> StreamResult:
    """Re-encode the last ``context`` tokens for every ``every``-th predicted position from ``start``."""
    positions, nll, seconds = [], [], []
    kv_per_token = _kv_bytes_per_token(model)
    for t in tqdm(range(max(start, 1), len(ids), every), desc="recompute", unit="tok"):
        window = ids[max(0, t - context) : t]  # the tokens before position t
        begin = time.perf_counter()
        logits = model(input_ids=window[None], use_cache=False).logits[0, -1:]
        seconds.append(time.perf_counter() - begin)
        nll.append(_nll(logits, ids[t : t + 1]))
        positions.append(t)
    return StreamResult("recompute", torch.tensor(positions), torch.cat(nll), torch.tensor(seconds), kv_per_token * context)


def _kv_bytes_per_token(model) -> int:
    cfg = model.config.get_text_config(decoder=True)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * kv_heads * head_dim * next(model.parameters()).element_size()


def run_policy(model, ids: torch.Tensor, policy: str, sinks: int, window: int, cfg: StreamConfig) -> StreamResult:
    from transformers import DynamicCache

    capacity = sinks + window
    if policy == "recompute":
        return stream_recompute(model, ids, capacity, cfg.recompute_every, capacity)
    cache = {"dense": lambda: DynamicCache(), "window": lambda: make_sink_cache(model, 0, capacity), "sink": lambda: make_sink_cache(model, sinks, window)}[policy]()
    result = stream_with_cache(model, ids, cache, capacity - 1, policy)
    result.policy = policy
    return result


def summarise_policy(result: StreamResult, chunk: int) -> dict:
    """ppl overall and per chunk of positions, speed, latency per chunk, peak cache memory."""
    steps = result.seconds > 0  # prefilled positions have no per-token time
    by_chunk = []
    for start in range(0, int(result.positions.max()) + 1, chunk):
        sel = (result.positions >= start) & (result.positions < start + chunk)
        if sel.any():
            timed = sel & steps
            by_chunk.append({
                "start": start,
                "end": start + chunk,
                "ppl": math.exp(result.nll[sel].mean().item()),
                "ms_per_token": 1000 * result.seconds[timed].mean().item() if timed.any() else None,
            })
    timed_total = result.seconds[steps].sum().item()
    return {
        "ppl": math.exp(result.nll.mean().item()),
        "predicted_tokens": int(result.nll.numel()),
        "ppl_by_chunk": [{k: c[k] for k in ("start", "end", "ppl")} for c in by_chunk],
        "tokens_per_s": steps.sum().item() / timed_total if timed_total > 0 else None,
        "ms_per_token_by_chunk": [{"start": c["start"], "end": c["end"], "ms": c["ms_per_token"]} for c in by_chunk],
        "peak_cache_bytes": result.peak_cache_bytes,
    }


def run_stream(cfg: StreamConfig) -> dict:
    """Every policy (and the sink-count ablation) over one stream; writes summary.json and figures."""
    from .hf import load_model

    out = prepare_run_dir(cfg.out)
    loaded = load_model(cfg.model)
    model, tokenizer = loaded.model, loaded.tokenizer
    ids = stream_tokens(tokenizer, cfg.corpus, cfg.tokens, cfg.bos)
    write_json(out / "config.json", asdict(cfg))
    results = {p: run_policy(model, ids, p, cfg.sinks, cfg.window, cfg) for p in cfg.policies}
    summary = {
        "model": loaded.name,
        "max_positions": loaded.max_positions,
        "tokens": cfg.tokens,
        "sinks": cfg.sinks,
        "window": cfg.window,
        "policies": {p: summarise_policy(r, cfg.chunk) for p, r in results.items()},
    }
    if cfg.ablation:
        summary["ablation"] = {
            str(n): summarise_policy(run_policy(model, ids, "sink" if n else "window", n, cfg.capacity - n, cfg), cfg.chunk)
            for n in cfg.ablation
        }
    summary["figures"] = report.stream_figures(results, summary, out)
    write_json(out / "summary.json", summary)
    return summary


@torch.no_grad()
def generate(model, tokenizer, prompt: str, max_new_tokens: int, sinks: int, window: int, temperature: float = 0.0, seed: int = 0) -> dict:
    """Generate with ``model.generate`` and a sink cache: constant memory past the context length."""
    cache = make_sink_cache(model, sinks, window)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    check(ids.shape[1] > 0, "the prompt contains no tokens")
    torch.manual_seed(seed)
    sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
    out = model.generate(
        ids, cache=cache, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, pad_token_id=tokenizer.eos_token_id, **sampling
    )
    new = out[0, ids.shape[1] :]
    return {
        "prompt_tokens": ids.shape[1],
        "new_tokens": int(new.numel()),
        "text": tokenizer.decode(new, skip_special_tokens=True),
        "cache_tokens": cache.get_seq_length(),
        "cache_bytes": cache_bytes(cache),
    }
