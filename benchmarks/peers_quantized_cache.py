"""KV quantization against transformers' own ``QuantizedCache``: the decode step after a
``--context``-token prefill (default 4,096), sinklab's KIVI at 2 and 4 bits and transformers'
``QuantizedCache`` (quanto backend, optimum-quanto) at 2 and 4 bits, against the dense
``DynamicCache``, in one run (BENCHMARKS.md 11).

One process (the venv: transformers 5.x and optimum-quanto are the project's own), the default
model (``sinklab.models.hf.load_model``), float32, the context the first ``--context`` tokens of
the shipped Shakespeare (``sinklab.compress.tasks.text_window``):

* ``dense``: the prefill's ``DynamicCache``;
* ``kivi2``, ``kivi4``: the same prefill's cache quantized by ``sinklab.kvcache.KIVI(bits)`` (its
  defaults: groups of 32, the last 128 tokens in full precision, no sink protected), packed;
* ``kivi2_protect4``: KIVI 2-bit with the first 4 tokens protected (held in full precision, their
  slots holes in the first group, which a step reads through a buffer of that group);
* ``quanto2``, ``quanto4``: ``transformers.QuantizedCache(backend="quanto", nbits=bits)`` filled by
  the prefill itself, as a user of transformers would (its defaults: groups of 64, a residual of
  128 tokens; the whole context quantized at the first update, and everything re-quantized each
  time the residual fills).

Every cache then takes the same tokens (the text after the context, teacher-forced), one per step,
the caches' order rotating every step, after one untimed step each. Per cache: the median and the
mean ms per step (the mean holds the periodic re-quantization and KIVI's group flushes: with
``--steps`` a multiple of 128 each happens a whole number of times), the median over steps of the
step's time over the dense step's at the same step (with quartiles), the cache's bytes after the
prefill (packed integers, scales and the full-precision tokens), and how often its next token
(argmax) is the dense cache's.

Run: `.venv/bin/python benchmarks/peers_quantized_cache.py` (about 5 minutes on 2 cores);
`--smoke` runs 256 tokens and 8 steps and records nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time

import peers

BITS = (2, 4)


def tensor_bytes(tensor) -> int:
    """Bytes of a tensor, or of the plain tensors inside a tensor subclass (quanto's packed
    integers, scales and shifts)."""
    if hasattr(tensor, "__tensor_flatten__"):
        inner, _ = tensor.__tensor_flatten__()
        return sum(tensor_bytes(getattr(tensor, name)) for name in inner)
    return tensor.numel() * tensor.element_size()


def quanto_bytes(cache) -> int:
    parts = ("keys", "values", "_quantized_keys", "_quantized_values")
    return sum(tensor_bytes(t) for layer in cache.layers for t in (getattr(layer, p, None) for p in parts) if t is not None)


#: The tokens the protected KIVI cache keeps in full precision (StreamingLLM's 4 sinks).
PROTECTED = 4


def make_caches(model, context, bits: tuple) -> dict:
    """name -> (cache, bytes) after a prefill of ``context``."""
    from transformers import QuantizedCache

    from sinklab import kvcache as P
    from sinklab.stream import cache_bytes

    def prefill(cache=None):
        return model(context, cache=cache, use_cache=True, logits_to_keep=1).cache

    dense = prefill()
    caches = {"dense": (dense, cache_bytes(dense))}
    for b in bits:
        cache = prefill()
        caches[f"kivi{b}"] = (cache, P.KIVI(b).apply(cache).bytes_after)
    cache = prefill()  # the path with holes: protected tokens inside the first group
    caches[f"kivi{bits[0]}_protect{PROTECTED}"] = (cache, P.KIVI(bits[0], protect=PROTECTED).apply(cache).bytes_after)
    for b in bits:
        cache = prefill(QuantizedCache(backend="quanto", config=model.config, nbits=b))
        caches[f"quanto{b}"] = (cache, quanto_bytes(cache))
    return caches


def decode(model, caches: dict, tokens, steps: int) -> dict:
    """Steps through every cache in rotating order: per cache, each step's seconds and argmax."""
    names = list(caches)
    seconds = {name: [] for name in names}
    top = {name: [] for name in names}
    for t in range(-1, steps):  # step -1: untimed, each cache's first step
        token = tokens[:, (t + 1) % tokens.shape[1]][:, None]
        for name in names[t % len(names) :] + names[: t % len(names)]:
            start = time.perf_counter()
            logits = model(token, cache=caches[name][0], use_cache=True, logits_to_keep=1).logits
            elapsed = time.perf_counter() - start
            if t >= 0:
                seconds[name].append(elapsed)
                top[name].append(int(logits[0, -1].argmax()))
    return {"seconds": seconds, "top": top}


def summarise(caches: dict, run: dict) -> dict:
    seconds, top = run["seconds"], run["top"]
    dense = seconds["dense"]
    out = {}
    for name, (_, n_bytes) in caches.items():
        mine = seconds[name]
        ratios = [a / b for a, b in zip(mine, dense)]
        quartiles = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
        out[name] = {
            "ms_median": round(1000 * statistics.median(mine), 2),
            "ms_mean": round(1000 * statistics.mean(mine), 2),
            "over_dense": round(statistics.median(ratios), 3),
            "over_dense_quartiles": [round(quartiles[0], 3), round(quartiles[2], 3)],
            "over_dense_of_means": round(statistics.mean(mine) / statistics.mean(dense), 3),
            "cache_mib": round(n_bytes / 2**20, 2),
            "bytes_over_dense": round(n_bytes / caches["dense"][1], 4),
            "top1_as_dense": round(sum(a == b for a, b in zip(top[name], top["dense"])) / len(mine), 3),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="256 tokens and 8 steps, nothing recorded (a check)")
    parser.add_argument("--context", type=int, help="tokens prefilled before the steps (default 4096; --smoke 256)")
    parser.add_argument("--steps", type=int, help="timed steps per cache (default 128; --smoke 8)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's default here)")
    args = parser.parse_args()
    if not args.smoke:
        import common  # noqa: F401 - refuses a dirty tree before measuring

    import torch

    from sinklab.compress.tasks import text_window
    from sinklab.models.hf import load_model

    args.context = args.context or (256 if args.smoke else 4096)
    args.steps = args.steps or (8 if args.smoke else 128)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    loaded = load_model(None)
    window = text_window(loaded.tokenizer, "shakespeare", args.context, "auto")
    context, after = window.context, window.ids[:, args.context :]
    caches = make_caches(loaded.model, context, BITS)
    run = decode(loaded.model, caches, after, args.steps)
    row = {
        "model": loaded.name,
        "context": args.context,
        "steps": args.steps,
        "threads": torch.get_num_threads(),
        "versions": peers.versions("sinklab", "optimum-quanto"),
        "caches": summarise(caches, run),
    }
    peers.done(row, "peers_quantized_cache", args.smoke)


if __name__ == "__main__":
    main()
