"""Decode speed of the default model: ms per token through a dense and a sink cache, the floor of
reading the weights once, the levers that might close the gap, and the one-pass scorer's speed.

* ``decode``: at each cache length L, ms per single-token step with transformers' DynamicCache
  holding L tokens and with ``make_sink_cache(model, 4, L - 4)`` full and evicting at every step.
  Both caches are filled, then ``--paired-steps`` steps alternate between them (the order flips
  every pair), so a slow spell of this shared machine hits both; the verdict is the median of the
  per-pair ratios. Means are given beside medians: at 256 tokens the steps span the sink cache's
  rebases and strip moves, so its mean includes them.
* ``floor``: the model's weight bytes over the copy bandwidth measured here (a decode step reads
  every weight once); and, per length, the weights plus the cached keys and values (which a step
  also reads once) over the same bandwidth.
* ``levers`` (at the middle length, dense cache): bfloat16 weights, int8 weights (PyTorch dynamic
  quantization of every linear layer; changes the logits), every linear layer through MKL's packed
  GEMM (the weight layout ``torch.compile``'s CPU freezing uses; float32, only the summation order
  changes), a static preallocated cache, the decode step compiled with ``torch.compile`` on the
  static cache; and the
  cache update alone (every layer's ``update`` on random keys), dense against sink, which is the
  per-step work the sink cache adds.
* ``one_pass``: tokens per second of the sink policy's one-pass scorer (``sinklab stream``) against
  a plain forward pass (SDPA) of the same tokens.

Run: `.venv/bin/python benchmarks/decode_speed.py [--lengths 256,1024,4096]` (about 6 minutes)
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Optional

import torch
from common import record

from sinklab.models.hf import load_model, token_nll
from sinklab.stream.benchmark import policy_nll
from sinklab.stream.caches import make_sink_cache

SINKS = 4


def copy_bandwidth_gbs(n_bytes: int = 2**30, repeats: int = 5) -> float:
    """GB/s of one large tensor copy (bytes counted once), the best of ``repeats``."""
    src = torch.ones(n_bytes // 4)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return n_bytes / best / 1e9


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters()) + sum(
        b.numel() * b.element_size() for b in model.buffers()
    )


def kv_bytes(model, length: int) -> int:
    """Bytes of the keys and values a dense cache holds after ``length`` tokens (float32)."""
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * length * 4


class PackedLinear(torch.nn.Module):
    """A float32 linear layer whose weight MKL has repacked for single-row products."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.packed = torch.ops.mkl._mkl_reorder_linear_weight(linear.weight.detach(), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkl._mkl_linear(x, self.packed, self.weight, self.bias, 1)


def pack_linear_layers(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` with every ``nn.Linear`` inside it replaced by a :class:`PackedLinear`."""
    for name, child in module.named_children():
        if isinstance(child, torch.nn.Linear):
            setattr(module, name, PackedLinear(child))
        else:
            pack_linear_layers(child)
    return module


def dense_cache(model, length: int):
    from transformers import DynamicCache

    return DynamicCache()


def static_cache(model, length: int):
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=length + 64)


def sink_cache(model, length: int):
    return make_sink_cache(model, SINKS, length - SINKS)


@torch.no_grad()
def decode_ms(model, ids: torch.Tensor, make_cache, length: int, steps: int) -> float:
    """Median ms of ``steps`` single-token steps after a prefill of ``length`` tokens (plus
    ``SINKS`` more, so a sink cache of ``length`` evicts at every timed step)."""
    cache = make_cache(model, length)
    start = length + SINKS
    model(input_ids=ids[None, :start], cache=cache, use_cache=True, logits_to_keep=1)
    times = []
    for t in range(start, start + steps):
        begin = time.perf_counter()
        model(input_ids=ids[None, t : t + 1], cache=cache, use_cache=True, logits_to_keep=1)
        times.append(time.perf_counter() - begin)
    return 1000 * statistics.median(times)


@torch.no_grad()
def paired_decode(model, ids: torch.Tensor, length: int, steps: int) -> dict:
    """Dense and sink single-token steps, alternating after both caches are filled (see the
    module docstring); ms as median and mean, and the median of the per-pair ratios."""
    start = length + SINKS
    caches = {"dense": dense_cache(model, length), "sink": sink_cache(model, length)}
    for cache in caches.values():
        model(input_ids=ids[None, :start], cache=cache, use_cache=True, logits_to_keep=1)
    times = {name: [] for name in caches}
    for t in range(start, start + steps):
        for name in caches if t % 2 == 0 else reversed(list(caches)):
            begin = time.perf_counter()
            model(input_ids=ids[None, t : t + 1], cache=caches[name], use_cache=True, logits_to_keep=1)
            times[name].append(time.perf_counter() - begin)
    ratios = [s / d for s, d in zip(times["sink"], times["dense"])]
    ms = {
        name: {"median": round(1000 * statistics.median(v), 2), "mean": round(1000 * statistics.mean(v), 2)}
        for name, v in times.items()
    }
    quartiles = statistics.quantiles(ratios, n=4)
    return {
        "steps": steps,
        "ms": ms,
        "sink_over_dense": round(statistics.median(ratios), 3),
        "sink_over_dense_quartiles": [round(quartiles[0], 3), round(quartiles[2], 3)],
        "sink_over_dense_of_means": round(ms["sink"]["mean"] / ms["dense"]["mean"], 3),
    }


class CompiledDecode:
    """Decode steps through ``torch.compile(model.forward)`` on one static cache, compiled at the
    first call (the compile time is kept apart) and reset before every measurement, so the
    compiled graph is reused across rounds."""

    def __init__(self, model, ids: torch.Tensor, length: int, steps: int) -> None:
        from transformers import StaticCache

        self.model, self.ids, self.length, self.steps = model, ids, length, steps
        self.cache = StaticCache(config=model.config, max_cache_len=length + SINKS + steps + 8)
        self.forward = torch.compile(model.forward, dynamic=False)
        self.compile_s: Optional[float] = None

    @torch.no_grad()
    def __call__(self) -> float:
        self.cache.reset()
        start = self.length + SINKS
        self.model(input_ids=self.ids[None, :start], cache=self.cache, use_cache=True, logits_to_keep=1)
        times = []
        for t in range(start, start + self.steps):
            begin = time.perf_counter()
            self.forward(
                input_ids=self.ids[None, t : t + 1],
                cache=self.cache,
                use_cache=True,
                logits_to_keep=1,
                cache_position=torch.tensor([t]),
            )
            times.append(time.perf_counter() - begin)
        if self.compile_s is None:
            self.compile_s = times[0]
            return self()  # the first step compiled; measure again
        return 1000 * statistics.median(times)


def alternate(measures: dict, rounds: int) -> dict:
    """Median over ``rounds`` of each measurement, the order reversed every round."""
    runs = {name: [] for name in measures}
    for r in range(rounds):
        for name in measures if r % 2 == 0 else reversed(list(measures)):
            runs[name].append(round(measures[name](), 2))
    return {name: {"median": statistics.median(v), "runs": v} for name, v in runs.items()}


@torch.no_grad()
def update_only_ms(model, length: int, repeats: int = 50) -> dict:
    """ms per decode step spent in the caches' ``update`` alone (every layer, random keys)."""
    cfg = model.config
    heads, dim = cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    out = {}
    for name, make in (("dense", dense_cache), ("sink", sink_cache)):
        cache = make(model, length)
        tap = cache.layers[0].book.taps.position if name == "sink" else None  # the positions the model would report
        fill = torch.randn(1, heads, length + SINKS, dim)
        if tap is not None:
            tap.positions = torch.arange(length + SINKS).view(1, -1)
        for layer in range(cfg.num_hidden_layers):
            cache.update(fill, fill, layer)
        new = torch.randn(1, heads, 1, dim)
        begin = time.perf_counter()
        for _ in range(repeats):
            if tap is not None:
                tap.positions = torch.tensor([[cache.get_seq_length()]])  # a manual loop's next position
            for layer in range(cfg.num_hidden_layers):
                cache.update(new, new, layer)
        out[name] = round(1000 * (time.perf_counter() - begin) / repeats, 3)
    return out


def levers(model_spec, ids: torch.Tensor, length: int, steps: int, rounds: int, baseline) -> dict:
    """Dense decode at ``length`` under each lever, each against float32 measured in the same rounds."""
    bf16 = load_model(model_spec, dtype=torch.bfloat16).model
    int8 = torch.ao.quantization.quantize_dynamic(load_model(model_spec).model, {torch.nn.Linear}, dtype=torch.qint8)
    packed = pack_linear_layers(load_model(model_spec).model)
    compiled = CompiledDecode(baseline, ids, length, steps)
    measures = {
        "float32 weights, dynamic cache": lambda: decode_ms(baseline, ids, dense_cache, length, steps),
        "bfloat16 weights": lambda: decode_ms(bf16, ids, dense_cache, length, steps),
        "int8 weights (dynamic quantization)": lambda: decode_ms(int8, ids, dense_cache, length, steps),
        "MKL packed float32 weights": lambda: decode_ms(packed, ids, dense_cache, length, steps),
        "static preallocated cache": lambda: decode_ms(baseline, ids, static_cache, length, steps),
        "static cache, compiled step (torch.compile)": compiled,
    }
    result = alternate(measures, rounds)
    result["static cache, compiled step (torch.compile)"]["compile_s"] = round(compiled.compile_s, 1)
    return result


@torch.no_grad()
def one_pass_speed(model, ids: torch.Tensor, rounds: int) -> dict:
    measures = {
        "plain forward": lambda: _seconds(lambda: token_nll(model, ids[None])),
        "one-pass sink scorer": lambda: _seconds(lambda: policy_nll(model, ids, "sink", SINKS, 1024 - SINKS)),
    }
    result = alternate(measures, rounds)
    plain, mine = result["plain forward"]["median"], result["one-pass sink scorer"]["median"]
    return {
        "tokens": len(ids),
        "seconds": result,
        "tokens_per_s": {"plain": len(ids) / plain, "one_pass": len(ids) / mine},
        "ratio": round(plain / mine, 3),
    }


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lengths", default="256,1024,4096")
    parser.add_argument("--steps", type=int, default=32, help="timed steps per lever and round")
    parser.add_argument("--paired-steps", type=int, default=300, help="timed dense/sink pairs per cache length")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--one-pass-tokens", type=int, default=4096)
    args = parser.parse_args()
    torch.manual_seed(0)
    loaded = load_model(None)
    model = loaded.model
    lengths = [int(n) for n in args.lengths.split(",")]
    ids = torch.randint(
        0, model.config.vocab_size, (max(lengths + [args.one_pass_tokens]) + SINKS + max(args.steps, args.paired_steps) + 1,)
    )
    bandwidth = copy_bandwidth_gbs()
    floor = 1000 * weight_bytes(model) / (bandwidth * 1e9)
    decode = []
    for length in lengths:
        result = paired_decode(model, ids, length, args.paired_steps)
        dense, sink = result["ms"]["dense"]["median"], result["ms"]["sink"]["median"]
        floor_with_cache = 1000 * (weight_bytes(model) + kv_bytes(model, length)) / (bandwidth * 1e9)
        decode.append(
            {
                "cache_length": length,
                **result,
                "dense_over_floor": round(dense / floor, 2),
                "sink_over_floor": round(sink / floor, 2),
                "floor_with_cache_ms": round(floor_with_cache, 2),
                "dense_over_floor_with_cache": round(dense / floor_with_cache, 2),
                "sink_over_floor_with_cache": round(sink / floor_with_cache, 2),
            }
        )
        print(decode[-1], flush=True)
    middle = lengths[len(lengths) // 2]
    row = {
        "model": loaded.name,
        "steps": args.steps,
        "paired_steps": args.paired_steps,
        "rounds": args.rounds,
        "copy_bandwidth_gbs": round(bandwidth, 2),
        "weight_mb": round(weight_bytes(model) / 1e6, 1),
        "floor_ms": round(floor, 2),
        "decode": decode,
        "levers": {"cache_length": middle, "ms": levers(None, ids, middle, args.steps, args.rounds, model)},
        "update_only_ms": {"cache_length": middle, **update_only_ms(model, middle)},
        "one_pass": one_pass_speed(model, ids[: args.one_pass_tokens], args.rounds),
    }
    record("decode_speed", row)


if __name__ == "__main__":
    main()
