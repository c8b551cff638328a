"""Peak memory and wall time of a long scan: sinklab's recorder against two baselines.

* ``output_attentions``: one eager forward with ``output_attentions=True``, every layer's weights
  returned at once, then reduced (what most notebooks do);
* ``layer_hooks``: the fair baseline a careful user writes: eager attention with a forward hook on
  each attention module that reduces that layer's weights as they are made and drops them.

All compute the same attention metrics (first-token mass per layer and head, Gu et al. alpha_k for
every key, Sink_1^0.3) on the default model over one sequence of T tokens of the shipped corpus.
Each measurement runs in a fresh process; peak memory is the process's maximum resident set size,
reported in full and above the loaded model.

Run: `.venv/bin/python benchmarks/scan_memory.py --tokens 2048,4096`
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@torch.no_grad()
def output_attentions(model, ids):
    """Every layer's weights returned at once, reduced per layer from the returned tuple (no
    extra stacked copy)."""
    model.set_attn_implementation("eager")
    attentions = model(input_ids=ids, output_attentions=True, use_cache=False).attentions
    return reduce_all([a[..., 0].mean(0) for a in attentions], [a.sum(-2).mean(0) for a in attentions])


@torch.no_grad()
def layer_hooks(model, ids):
    """Each layer's weights reduced by a forward hook as the layer makes them, then dropped."""
    from sinklab.models.hf import decoder_layers

    model.set_attn_implementation("eager")
    columns, received = [], []

    def reduce(module, args, output):
        weights = output[1]
        columns.append(weights[..., 0].mean(0))
        received.append(weights.sum(-2).mean(0))

    handles = [layer.self_attn.register_forward_hook(reduce) for layer in decoder_layers(model)]
    try:
        model(input_ids=ids, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return reduce_all(columns, received)


def reduce_all(columns: list, received: list):
    return torch.stack(columns).double(), torch.stack(received).double()


BASELINES = {"output_attentions": output_attentions, "layer_hooks": layer_hooks}


def measure(method: str, tokens: int) -> dict:
    """Runs in the child process: load, then scan one sequence with ``method``."""
    from sinklab.models.hf import load_model
    from sinklab.models.subjects import HFSubject
    from sinklab.scan import InputSpec, RecordOptions, metrics, record_subject, scan_inputs

    subject = HFSubject(load_model(None))
    ids = scan_inputs(subject, InputSpec(corpus="shakespeare", tokens=tokens, batch=1)).ids
    loaded_mb = peak_rss_mb()
    start = time.perf_counter()
    if method == "recorder":
        record, _ = record_subject(subject, ids, RecordOptions(), progress=False)
        first_column, received = record.first_column, record.received
    else:
        first_column, received = BASELINES[method](subject.model, ids)
    first = metrics.first_token_mass(first_column)
    rate = metrics.sink_rate(metrics.sink_scores(received)[..., 0], 0.3)
    seconds = time.perf_counter() - start
    return {
        "method": method,
        "tokens": tokens,
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(peak_rss_mb()),
        "peak_above_model_mb": round(peak_rss_mb() - loaded_mb),
        "sink_rate": rate,
        "first_token_mass_mean": first.mean().item(),
    }


def run_child(method: str, tokens: int, limit_gb: float) -> dict:
    code = (
        "import json, resource, sys; sys.path.insert(0, 'benchmarks');"
        f"resource.setrlimit(resource.RLIMIT_AS, ({int(limit_gb * 2**30)}, {int(limit_gb * 2**30)}));"
        f"from scan_memory import measure; print('RESULT' + json.dumps(measure({method!r}, {tokens})))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT"):
            return json.loads(line[6:])
    tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
    return {"method": method, "tokens": tokens, "failed": tail[:200]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", default="2048,4096")
    parser.add_argument(
        "--limit-gb", type=float, default=22.0, help="address-space cap per child, so a baseline that does not fit fails cleanly"
    )
    args = parser.parse_args()
    sys.path.insert(0, "benchmarks")
    from common import record

    rows = []
    for tokens in (int(t) for t in args.tokens.split(",")):
        for method in ("recorder", *BASELINES):
            rows.append(run_child(method, tokens, args.limit_gb))
            print(rows[-1], flush=True)
    record("scan_memory", {"limit_gb": args.limit_gb, "rows": rows, "ratios": ratios(rows)})


def ratios(rows: list[dict]) -> list[dict]:
    """Recorder against each baseline at each length: memory above the model and wall time."""
    out = []
    for tokens in sorted({r["tokens"] for r in rows}):
        mine = next(r for r in rows if r["tokens"] == tokens and r["method"] == "recorder")
        for base in (r for r in rows if r["tokens"] == tokens and r["method"] in BASELINES and "failed" not in r):
            out.append(
                {
                    "tokens": tokens,
                    "baseline": base["method"],
                    "memory_above_model": round(mine["peak_above_model_mb"] / max(base["peak_above_model_mb"], 1), 3),
                    "seconds": round(mine["seconds"] / base["seconds"], 3),
                }
            )
    return out


if __name__ == "__main__":
    main()
