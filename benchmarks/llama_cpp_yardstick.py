"""llama.cpp as the yardstick: the same GGUF file run by a real engine and by sinklab.

* ``decode``: ms per single-token step after a prompt of ``--cache-length`` tokens, llama.cpp
  (the Q4_1 weights as shipped, its default float16 KV cache, 2 threads) against sinklab
  (transformers on the dequantised float32 weights, dense and sink cache), alternating rounds.
* ``stream``: perplexity over the same ``--tokens`` tokens of the shipped Shakespeare stream with
  4 kept first tokens and a 1,024-token cache: llama.cpp's context shift with ``n_keep`` = 4,
  evicting one token per step (remove it from the KV cache, shift the later positions down by one:
  the StreamingLLM policy) against sinklab's sink policy (one-pass scores, checked against a real
  cache by ``sinklab stream``). The first cache-full of tokens (no eviction yet) is reported
  separately: there the two differ only by the weights' format.

llama-cpp-python builds llama.cpp from source (several minutes on 2 cores), so it is not part of
``make test``: ``make bench-llama-cpp`` installs it and runs this script.

Run: `.venv/bin/python benchmarks/llama_cpp_yardstick.py [--tokens 16384]`
"""

from __future__ import annotations

import argparse
import ctypes
import math
import statistics
import time

import numpy as np
import torch
from common import record
from decode_speed import alternate, decode_ms, dense_cache, sink_cache
from tqdm.auto import tqdm

from sinklab.models.hf import default_gguf_path, load_model
from sinklab.stream.benchmark import policy_nll, stream_tokens

N_KEEP = 4
THREADS = 2


def open_llama(n_ctx: int):
    import llama_cpp

    return llama_cpp.Llama(
        model_path=str(default_gguf_path()), n_ctx=n_ctx, n_batch=512, n_threads=THREADS, n_threads_batch=THREADS, verbose=False
    )


class Engine:
    """Token-level access to a llama.cpp context: decode, logits, and the KV-cache shift."""

    def __init__(self, llm) -> None:
        import llama_cpp

        self.lib, self.llm = llama_cpp, llm
        self.ctx = llm._ctx.ctx
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_vocab = llm.n_vocab()
        self.cached = 0

    def reset(self) -> None:
        self.lib.llama_memory_clear(self.memory, True)
        self.cached = 0

    def feed(self, tokens: list[int]) -> None:
        """Decode ``tokens`` at the next positions, in batches of at most 512."""
        for start in range(0, len(tokens), 512):
            piece = tokens[start : start + 512]
            array = (self.lib.llama_token * len(piece))(*piece)
            code = self.lib.llama_decode(self.ctx, self.lib.llama_batch_get_one(array, len(piece)))
            if code != 0:
                raise RuntimeError(f"llama_decode returned {code}")
            self.cached += len(piece)

    def last_logits(self) -> np.ndarray:
        pointer = self.lib.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=(self.n_vocab,)).astype(
            np.float64
        )

    def evict_one(self) -> None:
        """Context shift by one: drop the token after the kept ones, move the later ones down."""
        self.lib.llama_memory_seq_rm(self.memory, 0, N_KEEP, N_KEEP + 1)
        self.lib.llama_memory_seq_add(self.memory, 0, N_KEEP + 1, -1, -1)
        self.cached -= 1


def nll_of(logits: np.ndarray, target: int) -> float:
    top = logits.max()
    return float(top + math.log(np.exp(logits - top).sum()) - logits[target])


def llama_stream_nll(engine: Engine, ids: list[int], capacity: int) -> np.ndarray:
    """NLL of tokens 1..T-1 streamed one at a time through a context-shifted cache of ``capacity``."""
    engine.reset()
    nll = np.empty(len(ids) - 1)
    for t in tqdm(range(len(ids) - 1), desc="llama.cpp context shift", unit="tok"):
        if engine.cached == capacity:
            engine.evict_one()
        engine.feed([ids[t]])
        nll[t] = nll_of(engine.last_logits(), ids[t + 1])
    return nll


def llama_decode_ms(engine: Engine, ids: list[int], length: int, steps: int) -> float:
    engine.reset()
    engine.feed(ids[:length])
    times = []
    for t in range(length, length + steps):
        begin = time.perf_counter()
        engine.feed([ids[t]])
        engine.last_logits()
        times.append(time.perf_counter() - begin)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--cache-length", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import llama_cpp

    torch.set_num_threads(THREADS)
    loaded = load_model(None)
    model = loaded.model
    ids = stream_tokens(loaded.tokenizer, "shakespeare", args.tokens, bos=True)
    capacity = args.cache_length
    engine = Engine(open_llama(n_ctx=capacity + args.steps + 8))
    decode = alternate(
        {
            "llama.cpp": lambda: llama_decode_ms(engine, ids.tolist(), capacity, args.steps),
            "sinklab dense": lambda: decode_ms(model, ids, dense_cache, capacity, args.steps),
            "sinklab sink": lambda: decode_ms(model, ids, sink_cache, capacity, args.steps),
        },
        args.rounds,
    )
    print(decode, flush=True)
    shifted = Engine(open_llama(n_ctx=capacity))
    llama_nll = llama_stream_nll(shifted, ids.tolist(), capacity)
    sinklab_nll = policy_nll(model, ids, "sink", N_KEEP, capacity - N_KEEP).double().numpy()
    full = capacity - 1  # tokens scored before the first eviction
    ppl = lambda nll: math.exp(float(np.mean(nll)))  # noqa: E731
    stream = {
        "tokens": args.tokens,
        "n_keep": N_KEEP,
        "cache": capacity,
        "ppl": {"llama.cpp context shift": ppl(llama_nll), "sinklab sink": ppl(sinklab_nll)},
        "ppl_before_first_eviction": {"llama.cpp": ppl(llama_nll[:full]), "sinklab": ppl(sinklab_nll[:full])},
        "ppl_after_first_eviction": {"llama.cpp": ppl(llama_nll[full:]), "sinklab": ppl(sinklab_nll[full:])},
        "mean_abs_nll_difference": float(np.abs(llama_nll - sinklab_nll).mean()),
    }
    print(stream, flush=True)
    record(
        "llama_cpp_yardstick",
        {
            "llama_cpp_python": llama_cpp.__version__,
            "threads": THREADS,
            "cache_length": capacity,
            "steps": args.steps,
            "rounds": args.rounds,
            "decode_ms": decode,
            "stream": stream,
        },
    )


if __name__ == "__main__":
    main()
