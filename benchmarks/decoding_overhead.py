"""What pressing the cache while decoding costs, on the default model.

A ``--prompt``-token prompt, then ``--steps`` single-token decode steps (teacher-forced text, one
token a step, as ``generate`` feeds them) under ``DecodingPress(press, budget, every)``, per press.
Each compression is timed where it runs (:class:`~sinklab.kvcache.DecodingState`'s ``after_step``
when it presses), so a press's overhead is its compressions' time over the decode time of the
steps they govern (every step's forward, the tally of the attention-reading presses included).
The tally's own cost shows as the decode time of an attention-reading press over Knorm's (which
reads no attention), at the same cache sizes. Presses run in turn, twice, alternating, and each
figure is the median of its runs.

Run: `.venv/bin/python benchmarks/decoding_overhead.py` (about 10 minutes)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import record

from sinklab import kvcache as P
from sinklab.compress.tasks import text_window
from sinklab.models.hf import load_model

PRESSES = {
    "streaming_llm": P.StreamingLLM(keep_sinks=4),
    "knorm": P.Knorm(keep_sinks=4),
    "snapkv": P.SnapKV(keep_sinks=4),
    "h2o": P.H2O(keep_sinks=4),
    "tova": P.TOVA(keep_sinks=4),
}


class TimedState(P.DecodingState):
    """A decoding press's state that adds up the time its compressions take."""

    compressing = 0.0
    compressions = 0

    def after_step(self, tokens, cache):
        start = time.perf_counter()
        done = super().after_step(tokens, cache)
        if done is not None:
            TimedState.compressing += time.perf_counter() - start
            TimedState.compressions += 1
        return done


@torch.no_grad()
def decode(model, ids: torch.Tensor, prompt: int, press: P.DecodingPress) -> dict:
    """Seconds of the decode steps and of the compressions among them."""
    TimedState.compressing, TimedState.compressions = 0.0, 0
    cache = model(ids[:, :prompt], use_cache=True, logits_to_keep=1).cache
    state = TimedState(model, press)
    state.prompt_seen(prompt, None, cache)
    start = time.perf_counter()
    for t in range(prompt, ids.shape[-1]):
        state.before_step()
        model(ids[:, t : t + 1], cache=cache)
        state.after_step(1, cache)
    state.close()
    total = time.perf_counter() - start
    compressing = TimedState.compressing
    return {"decode_s": total - compressing, "compress_s": compressing, "compressions": TimedState.compressions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--steps", type=int, default=1024)
    parser.add_argument("--budget", type=int, default=512)
    parser.add_argument("--every", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    lm = load_model()
    ids = text_window(lm.tokenizer, "shakespeare", args.prompt, "auto", args.steps).ids[:, : args.prompt + args.steps]
    runs = {name: [] for name in PRESSES}
    for _ in range(args.rounds):
        for name, press in PRESSES.items():
            runs[name].append(decode(lm.model, ids, args.prompt, P.DecodingPress(press, args.budget, args.every)))
    found = {}
    for name, measured in runs.items():
        decode_s = statistics.median(m["decode_s"] for m in measured)
        compress_s = statistics.median(m["compress_s"] for m in measured)
        found[name] = {
            "decode_ms_per_step": 1000 * decode_s / args.steps,
            "compress_ms_each": 1000 * compress_s / max(1, measured[0]["compressions"]),
            "compressions": measured[0]["compressions"],
            "overhead": compress_s / decode_s,
        }
    knorm = found["knorm"]["decode_ms_per_step"]
    for row in found.values():
        row["decode_over_knorm"] = row["decode_ms_per_step"] / knorm
    record("decoding_overhead", {"settings": vars(args), "threads": torch.get_num_threads(), "presses": found})


if __name__ == "__main__":
    main()
