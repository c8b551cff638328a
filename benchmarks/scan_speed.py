"""Scan speed: the scan's recording forward against an uninstrumented forward of the same input.

For each length T (batch 1, the default model, T tokens of the shipped corpus), in one process:

* ``plain``: ``model(input_ids)`` with transformers' SDPA attention and its logits, no hooks;
* ``record``: :func:`sinklab.scan.record_subject`, the scan's forward with every probe recording
  (and its next-token loss).

Rounds alternate the two, reversing the order each round so neither always runs warm; the verdict
is the ratio of the medians. Then one ``sinklab scan`` run (the pipeline) end to end per length reports the fixed costs a
user waits for: the scan's own phases (load, record, summarise) and ``files``, everything the pipeline
writes after them (the figures as PNGs through kaleido, the data, summary.json and the page).

``--random-llama-1b --device cuda`` runs the timing part on a randomly initialised Llama of the
Llama-3.2-1B shape in bfloat16 (no download) and reports the peak GPU memory of each side.

Run: `.venv/bin/python benchmarks/scan_speed.py --tokens 512,2048,4096`
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from common import record

from sinklab.core import pipeline
from sinklab.models.hf import LoadedModel, load_model
from sinklab.models.subjects import HFSubject
from sinklab.scan import SCAN, InputSpec, RecordOptions, ScanConfig, record_subject, scan_inputs

LLAMA_1B = dict(
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    vocab_size=128256,
    max_position_embeddings=131072,
    rope_theta=500000.0,
    tie_word_embeddings=True,
)


def random_llama_1b(device: str, shape: dict = LLAMA_1B) -> LoadedModel:
    """A randomly initialised Llama of ``shape`` (the Llama-3.2-1B shape unless told), bfloat16."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**shape)).to(device=device, dtype=torch.bfloat16).eval()
    return LoadedModel(model, None, "random Llama-3.2-1B shape (bfloat16)", "random")


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: str) -> tuple[float, float]:
    """(seconds, peak GPU memory in MB or 0 on CPU) of one call."""
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else 0.0
    return seconds, peak


def compare(subject: HFSubject, ids: torch.Tensor, rounds: int, device: str) -> dict:
    """Median wall time of the plain and the recorded forward over alternating rounds."""
    model = subject.model

    @torch.no_grad()
    def plain():
        model.set_attn_implementation("sdpa")
        model(input_ids=ids, use_cache=False)

    def recorded():
        record_subject(subject, ids, RecordOptions(), progress=False)

    plain()  # warm-up: first-call allocations and kernel selection
    recorded()
    runs = {"plain": [], "record": []}
    peaks = {}
    for r in range(rounds):
        for name in ("plain", "record") if r % 2 == 0 else ("record", "plain"):
            seconds, peak = timed(plain if name == "plain" else recorded, device)
            runs[name].append(round(seconds, 3))
            peaks[name] = round(max(peaks.get(name, 0.0), peak))
    medians = {name: statistics.median(times) for name, times in runs.items()}
    row = {"tokens": ids.shape[1], "seconds": runs, "median_s": medians, "ratio": round(medians["record"] / medians["plain"], 3)}
    if device == "cuda":
        row["peak_gpu_mb"] = peaks
    return row


def end_to_end(tokens: int) -> dict:
    """``sinklab scan --batch 1 --tokens T`` in-process: its phases, then ``files``: the figures, data,
    summary and page the pipeline writes after them."""
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        summary = pipeline.run(SCAN, ScanConfig(inputs=InputSpec(tokens=tokens, batch=1)), out=out).summary
        total = time.perf_counter() - start
    phases = summary["seconds"]
    return {"tokens": tokens, "total_s": round(total, 2), **phases, "files": round(total - sum(phases.values()), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", default="512,2048,4096")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument(
        "--random-llama-1b", action="store_true", help="a randomly initialised 1B-class Llama instead of the default model"
    )
    args = parser.parse_args()
    lengths = [int(t) for t in args.tokens.split(",")]
    torch.manual_seed(0)
    if args.random_llama_1b:
        subject = HFSubject(random_llama_1b(args.device))
        inputs = [torch.randint(0, LLAMA_1B["vocab_size"], (1, t), device=args.device) for t in lengths]
    else:
        subject = HFSubject(load_model(None))
        inputs = [scan_inputs(subject, InputSpec(tokens=t, batch=1)).ids for t in lengths]
    rows = []
    for ids in inputs:
        rows.append(compare(subject, ids, args.rounds, args.device))
        print(rows[-1], flush=True)
    phases = [] if args.random_llama_1b else [end_to_end(t) for t in lengths]
    record(
        "scan_speed", {"model": subject.name, "device": args.device, "rounds": args.rounds, "forward": rows, "end_to_end": phases}
    )


if __name__ == "__main__":
    main()
