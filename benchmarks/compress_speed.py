"""What compressing a cache costs and saves, measured side by side on the default model.

* ``overhead``: at each context length, the prefill alone against the prefill plus the press's
  scoring and compression (``sinklab.applied``), per press; pairs alternate so a slow spell
  of this shared machine hits both, and the verdict is the median per-pair ratio minus one.
* ``h2o_memory``: the peak resident memory (Linux ``VmHWM``, each in a fresh process) of a plain
  prefill and of H2O's scored prefill at ``--memory-context`` tokens, medians of
  ``--memory-pairs`` alternating pairs: H2O's received attention is summed in blocks of query
  rows, never as a (T, T) matrix.
* ``bytes``: every press's cache bytes against the dense cache's, and the kept fraction; the packed
  KIVI bytes (2 and 4 bits, groups of 32 and 64, scales included, the full-precision residual and
  sinks not counted, then counted) against a bfloat16 cache of the same tokens.
* ``decode``: ms per single-token step after a ``--decode-context``-token context, dense against
  compressed (SnapKV at ratio 0.5 and 0.875), and the same for KIVI 2-bit, whose step dequantizes
  its cache.

Run: `.venv/bin/python benchmarks/compress_speed.py [--parts overhead,bytes,decode,h2o_memory]` (about 10 minutes)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
from common import record

import sinklab
from sinklab import kvcache as P
from sinklab.compress.tasks import text_window
from sinklab.models.hf import load_model
from sinklab.stream.caches import cache_bytes

PARTS = ("overhead", "bytes", "decode", "h2o_memory")
PRESSES = [P.StreamingLLM(0.5, keep_sinks=4), P.Knorm(0.5), P.KeyDiff(0.5), P.SnapKV(0.5), P.TOVA(0.5), P.H2O(0.5)]


@torch.no_grad()
def prefill(model, ids, press=None) -> float:
    start = time.perf_counter()
    if press is None:
        model(ids, use_cache=True, logits_to_keep=1)
    else:
        with sinklab.applied(model, press):
            model(ids, use_cache=True, logits_to_keep=1)
    return time.perf_counter() - start


def overhead(model, tokenizer, contexts: list[int], pairs: int) -> dict:
    found = {}
    for length in contexts:
        ids = text_window(tokenizer, "shakespeare", length, "auto").context
        prefill(model, ids)
        for press in PRESSES:
            ratios, plain_s, pressed_s = [], [], []
            for i in range(pairs):
                first, second = (None, press) if i % 2 == 0 else (press, None)
                a, b = prefill(model, ids, first), prefill(model, ids, second)
                plain, pressed = (a, b) if first is None else (b, a)
                ratios.append(pressed / plain)
                plain_s.append(plain)
                pressed_s.append(pressed)
            found[f"{length}/{press.name}"] = {
                "prefill_s": statistics.median(plain_s),
                "pressed_s": statistics.median(pressed_s),
                "overhead": statistics.median(ratios) - 1,
            }
            print(length, press.name, found[f"{length}/{press.name}"], flush=True)
    return found


PEAK_SCRIPT = """
import sys, torch
from sinklab import kvcache as P
from sinklab.compress.tasks import text_window
from sinklab.models.hf import load_model
loaded = load_model()
ids = text_window(loaded.tokenizer, "shakespeare", int(sys.argv[1]), "auto").context
with torch.no_grad():
    if sys.argv[2] == "h2o":
        with sinklab.applied(loaded.model, P.H2O(0.5)):
            loaded.model(ids, use_cache=True, logits_to_keep=1)
    else:
        loaded.model(ids, use_cache=True, logits_to_keep=1)
print([l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1])
"""


def peak_kib(length: int, what: str) -> int:
    out = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(length), what], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def h2o_memory(length: int, pairs: int) -> dict:
    """Medians over ``pairs`` alternating fresh processes: a process's peak moves by about 10 %
    between identical runs here (the allocator's heap), more than the difference measured."""
    loaded_only = peak_kib(16, "plain")  # the model loaded, no context to speak of
    plain, h2o = [], []
    for _ in range(pairs):
        plain.append(peak_kib(length, "plain"))
        h2o.append(peak_kib(length, "h2o"))
    ratios = [h / p for h, p in zip(h2o, plain)]
    print("h2o memory", plain, h2o, flush=True)
    plain_kib, h2o_kib = statistics.median(plain), statistics.median(h2o)
    return {"context": length, "pairs": pairs, "plain_peak_mib": plain_kib / 1024, "h2o_peak_mib": h2o_kib / 1024,
            "loaded_mib": loaded_only / 1024, "h2o_over_plain": statistics.median(ratios),
            "h2o_over_plain_range": [min(ratios), max(ratios)],
            "h2o_over_plain_above_loaded": (h2o_kib - loaded_only) / (plain_kib - loaded_only)}  # fmt: skip


@torch.no_grad()
def byte_counts(model, tokenizer, length: int) -> dict:
    ids = text_window(tokenizer, "shakespeare", length, "auto").context
    dense = model(ids, use_cache=True, logits_to_keep=1).cache
    found = {}
    for press in [*PRESSES, P.PyramidKV(0.5), P.SnapKV(0.875, keep_sinks=4)]:
        with sinklab.applied(model, press) as pressing:
            model(ids, use_cache=True, logits_to_keep=1)
        c = pressing.cache.last
        found[f"{press.name}@{press.ratio:g}"] = {"kept_fraction": c.kept_fraction, "bytes_ratio": c.bytes_after / c.bytes_before}
    elements = sum(layer.keys.numel() + layer.values.numel() for layer in dense.layers)
    for bits in (2, 4):
        for group in (32, 64):
            twin = P.branch(dense)
            P.KIVI(bits, 0, group, residual=0).apply(twin)
            packed = sum(t.numel() * t.element_size() for layer in twin.layers for t in layer.store.tensors())
            found[f"kivi{bits}/g{group}"] = {"packed_over_bfloat16": packed / (2 * elements)}
            twin = P.branch(dense)
            P.KIVI(bits, 4, group, residual=128).apply(twin)
            whole = cache_bytes(twin)  # residual and sinks in the model's float32
            found[f"kivi{bits}/g{group}/r128+4"] = {"whole_over_float32_dense": whole / (4 * elements)}
    return found


@torch.no_grad()
def decode(model, tokenizer, length: int, steps: int) -> dict:
    ids = text_window(tokenizer, "shakespeare", length, "auto").context
    token = torch.tensor([[ids[0, -1].item()]])
    found = {}
    for name, policy in [
        ("dense", None),
        ("snapkv@0.5", P.SnapKV(0.5)),
        ("snapkv@0.875", P.SnapKV(0.875)),
        ("kivi2", P.KIVI(2, 4)),
    ]:
        cache = model(ids, use_cache=True, logits_to_keep=1).cache
        if policy is not None:
            if policy.recording or policy.window_rows:
                with P.tallied(model, length, False, policy.window_rows) as tally:
                    cache = model(ids, use_cache=True, logits_to_keep=1).cache
                policy.apply(cache, tally)
            else:
                policy.apply(cache)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            model(token, cache=cache)
            times.append(time.perf_counter() - start)
        found[name] = {"ms_per_step": 1000 * statistics.median(times), "cache_mib": cache_bytes(cache) / 2**20}
        print(name, found[name], flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", default="2048,4096", help="context lengths for the overhead (default 2048,4096)")
    parser.add_argument("--pairs", type=int, default=4, help="alternating pairs per press and length (default 4)")
    parser.add_argument("--memory-context", type=int, default=8192, help="H2O's peak memory context (default 8192)")
    parser.add_argument("--memory-pairs", type=int, default=3, help="alternating fresh processes for the peak (default 3)")
    parser.add_argument("--decode-context", type=int, default=4096, help="context before the decode steps (default 4096)")
    parser.add_argument("--steps", type=int, default=16, help="timed decode steps (default 16)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which measurements (default {','.join(PARTS)})")
    args = parser.parse_args()
    loaded = load_model()
    model, tokenizer = loaded.model, loaded.tokenizer
    measured = {
        "overhead": lambda: overhead(model, tokenizer, [int(c) for c in args.contexts.split(",")], args.pairs),
        "bytes": lambda: byte_counts(model, tokenizer, 2048),
        "decode": lambda: decode(model, tokenizer, args.decode_context, args.steps),
        "h2o_memory": lambda: h2o_memory(args.memory_context, args.memory_pairs),
    }
    row = {part: measured[part]() for part in args.parts.split(",")}
    record("compress_speed", {"args": vars(args), **row})
    print(json.dumps(row))


if __name__ == "__main__":
    main()
