"""Per-head budgets that free the bytes: AdaKV against the uniform budget of its inner press.

On the default model, a ``--context``-token window of the default corpus compressed at ``--ratio``
by SnapKV (every KV head keeps the same number of keys) and by AdaKV over the same SnapKV (each
layer's budget pooled over its heads): the cache's bytes against the dense cache's, the spread of
the heads' budgets, the perplexity of the next 256 tokens through each cache against the dense
cache's, and the decode step after it (ms per single-token step over ``--steps`` steps, the two
alternating ``--rounds`` times, medians). kvpress's AdaKV keeps every key (it hides the evicted
ones behind a fake key), so its bytes are the dense cache's.

Run: `.venv/bin/python benchmarks/adakv_budgets.py` (about 5 minutes)
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from common import record

import sinklab
from sinklab import kvcache as P
from sinklab.compress.tasks import text_window
from sinklab.models.hf import load_model


@torch.no_grad()
def measured(model, window, policy, steps: int) -> dict:
    """The cache's facts after ``policy`` (None: dense), the continuation's perplexity, and ms per decode step."""
    cont = window.continuation
    with sinklab.applied(model, policy) if policy is not None else nullcontext() as state:
        cache = model(window.context, use_cache=True, logits_to_keep=1).cache
        twin = P.branch(cache)
        logits = model(cont[:, :-1], cache=twin).logits[0]
        start = time.perf_counter()
        for t in range(steps):
            model(cont[:, t : t + 1], cache=cache)
        step_ms = 1000 * (time.perf_counter() - start) / steps
    ppl = math.exp(F.cross_entropy(logits.float(), cont[0, 1:]).item())
    last = state.cache.last if policy is not None else None
    counts = [] if last is None else [int(n) for p in last.positions.values() for n in (p >= 0).sum(-1)[0]]
    return {
        "bytes_ratio": None if last is None else last.bytes_after / last.bytes_before,
        "head_keys_min": min(counts, default=None),
        "head_keys_max": max(counts, default=None),
        "ppl": ppl,
        "step_ms": step_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--ratio", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    lm = load_model()
    window = text_window(lm.tokenizer, "shakespeare", args.context, "auto")
    snap = P.SnapKV(ratio=args.ratio, keep_sinks=4)
    policies = {"dense": None, "snapkv": snap, "adakv_snapkv": P.AdaKV(snap)}
    runs = {name: [] for name in policies}
    for _ in range(args.rounds):
        for name, policy in policies.items():
            runs[name].append(measured(lm.model, window, policy, args.steps))
    found = {}
    for name, measures in runs.items():
        found[name] = {**measures[0], "step_ms": statistics.median(m["step_ms"] for m in measures)}
    for name in ("snapkv", "adakv_snapkv"):
        found[name]["ppl_ratio"] = found[name]["ppl"] / found["dense"]["ppl"]
    found["adakv_snapkv"]["step_over_uniform"] = found["adakv_snapkv"]["step_ms"] / found["snapkv"]["step_ms"]
    record("adakv_budgets", {"settings": vars(args), "threads": torch.get_num_threads(), "policies": found})


if __name__ == "__main__":
    main()
