"""Compression against kvpress 0.5.5: a prefill with compression over a plain prefill, per press,
sinklab and kvpress side by side (BENCHMARKS.md 11).

The presses, at ``--ratio`` (default 0.5) and at each ``--contexts`` length (default 2,048 and
8,192 tokens of the shipped Shakespeare, ``sinklab.compress.tasks.text_window``, the same ids
for both): SnapKV, TOVA, Knorm, KeyDiff, StreamingLLM (4 sinks in both) and H2O, which kvpress
implements as ``ObservedAttentionPress``: it reads the attention weights, so it needs eager
attention (the model switched to eager for its prefill, back to SDPA for the plain one).
sinklab's presses keep no sink unless the press itself does (``keep_sinks=0``; StreamingLLM 4),
as kvpress's do. Both load the same safetensors folder (``sinklab.models.hf.default_model_folder``,
the default model dequantised once), float32, SDPA, batch 1, ``logits_to_keep=1``, no grad.

kvpress pins transformers < 5.3, so its worker runs with ``.peers/kvpress`` (kvpress, transformers
5.2 and their pure-Python dependencies, beside the project's torch) first on its path; sinklab's
worker runs in the venv (transformers 5.x). Each in its own process (``peers.py``), same torch,
same thread count, alternated:

* ``time``: per length and round, one worker per framework (the order reversed every round)
  runs, per press, ``--pairs`` pairs of a plain prefill and a pressed one (the order flipping
  every pair) after one warm-up prefill. A press's overhead is the median over its pairs (every
  round) of pressed / plain; ``sinklab_over_kvpress`` compares the overheads and the pressed
  seconds. Goal: no sinklab press slower than kvpress's.
* ``memory``: per length, a fresh worker per framework and prefill (plain, or one press) runs one
  prefill; its peak resident memory (``peers.py``: VmHWM reset after loading), medians of
  ``--memory-pairs`` alternated workers, and each press's peak over its own framework's plain
  prefill. Goal: sinklab's H2O within 1.2x a plain prefill's memory where kvpress's needs eager
  attention.

Run: `.venv/bin/python benchmarks/peers_kvpress.py` (after `make bench-peers` built the sites; the
full size takes about an hour on 2 cores); `--smoke` runs 256 tokens once and records nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import peers

import sinklab

SCRIPT = "peers_kvpress.py"
PRESSES = ("snapkv", "tova", "knorm", "keydiff", "streaming_llm", "h2o")
KVPRESS_CLASSES = {
    "snapkv": "SnapKVPress",
    "tova": "TOVAPress",
    "knorm": "KnormPress",
    "keydiff": "KeyDiffPress",
    "streaming_llm": "StreamingLLMPress",
    "h2o": "ObservedAttentionPress",
}
EAGER = {"h2o"}  # kvpress's press reads the materialised weights
SINKS = {"streaming_llm": 4}
FRAMEWORKS = {"sinklab": None, "kvpress": "kvpress"}  # framework -> its site
VERSIONS: dict = {}  # framework -> what its workers ran (torch, transformers, the framework, threads)


# -- workers ------------------------------------------------------------------------------------


def sinklab_prefill(job: dict):
    """prefill(ids, press name or None) -> the kept fraction, for sinklab: ``sinklab.applied``."""
    from sinklab import kvcache as P
    from sinklab.models.hf import load_model

    model = load_model(job["model"]).model

    def prefill(ids, name):
        if name is None:
            model(ids, use_cache=True, logits_to_keep=1)
            return 1.0
        press = P.policy_named(name, ratio=job["ratio"], keep_sinks=SINKS.get(name, 0))
        with sinklab.applied(model, press) as pressing:
            model(ids, use_cache=True, logits_to_keep=1)
        return pressing.cache.last.kept_fraction

    return prefill


def kvpress_prefill(job: dict):
    """prefill(ids, press name or None) -> the kept fraction, for kvpress: ``with press(model): model(...)``."""
    import kvpress
    from transformers import AutoModelForCausalLM

    eager_only = job.get("what") in EAGER  # a memory worker of the observed-attention press: loaded as a user would
    model = AutoModelForCausalLM.from_pretrained(
        job["model"], dtype="float32", attn_implementation="eager" if eager_only else "sdpa"
    ).eval()

    def prefill(ids, name):
        if name is None:
            model(ids, use_cache=True, logits_to_keep=1)
            return 1.0
        cls = getattr(kvpress, KVPRESS_CLASSES[name])
        press = cls(compression_ratio=job["ratio"], **({"n_sink": SINKS[name]} if name in SINKS else {}))
        attention = "eager" if name in EAGER else "sdpa"
        if model.config._attn_implementation != attention:
            model.set_attn_implementation(attention)
        try:
            with press(model):
                cache = model(ids, use_cache=True, logits_to_keep=1).past_key_values
        finally:
            if not eager_only:
                model.set_attn_implementation("sdpa")
        return sum(layer.keys.shape[-2] for layer in cache.layers) / (len(cache.layers) * ids.shape[-1])

    return prefill


def worker(job: dict) -> dict:
    peers.start_worker(job)
    prefill = (sinklab_prefill if job["framework"] == "sinklab" else kvpress_prefill)(job)
    out = {"framework": job["framework"], "versions": peers.versions(job["framework"])}
    ids = peers.read_ids(job)
    prefill(ids[:, :16], None)  # pages in the weights (a lazily mapped checkpoint) before memory is measured
    if job["mode"] == "memory":
        name = None if job["what"] == "plain" else job["what"]
        mark = peers.memory_mark()
        seconds, kept = peers.timed(lambda: prefill(ids, name))
        return {**out, **peers.memory_since(mark), "seconds": round(seconds, 3), "kept_fraction": kept}
    prefill(ids, None)  # warm-up
    presses = {}
    for name in job["presses"]:
        plain, pressed, kept = [], [], None
        for i in range(job["pairs"]):
            for which in ("plain", "pressed") if i % 2 == 0 else ("pressed", "plain"):
                target = None if which == "plain" else name
                seconds, fraction = peers.timed(lambda target=target: prefill(ids, target))
                (plain if which == "plain" else pressed).append(round(seconds, 3))
                kept = fraction if which == "pressed" else kept
        presses[name] = {"plain_s": plain, "pressed_s": pressed, "kept_fraction": kept}
    return {**out, "presses": presses}


# -- the orchestrator ---------------------------------------------------------------------------


def run(job: dict, threads: int, limit_gb: float) -> dict:
    """One worker of ``job["framework"]``; what it ran is kept for the row."""
    result = peers.run_worker(SCRIPT, FRAMEWORKS[job["framework"]], job, threads, limit_gb)
    if "versions" in result:
        VERSIONS.setdefault(job["framework"], result["versions"])
    return result


def time_part(jobs: dict, args, presses: list) -> dict:
    """Per length: every round's workers, then per press each framework's overhead."""
    found = {}
    for length, job in jobs.items():
        runs = {name: [] for name in FRAMEWORKS}
        for r, order in peers.alternated(list(FRAMEWORKS), args.rounds):
            for name in order:
                timing = {**job, "framework": name, "mode": "time", "presses": presses, "pairs": args.pairs}
                result = run(timing, args.threads, args.limit_gb)
                print(f"time {length} round {r} {name}:", str(result)[:400], flush=True)
                runs[name].append(result)
        found[str(length)] = {press: compare_times(runs, press) for press in presses}
    return found


def compare_times(runs: dict, press: str) -> dict:
    row = {}
    for name, workers in runs.items():
        pairs = [(p, q) for w in workers if press in w.get("presses", {})
                 for p, q in zip(w["presses"][press]["plain_s"], w["presses"][press]["pressed_s"])]  # fmt: skip
        failed = [w["failed"] for w in workers if "failed" in w]
        row[name] = {
            "plain_s": peers.median([p for p, _ in pairs], 3),
            "pressed_s": peers.median([q for _, q in pairs], 3),
            "overhead": peers.median([q / p - 1 for p, q in pairs]),
            "overhead_range": peers.spread([q / p - 1 for p, q in pairs]),
            "pairs": len(pairs),
            "kept_fraction": next((w["presses"][press]["kept_fraction"] for w in workers if press in w.get("presses", {})), None),
            **({"failed": failed} if failed else {}),
        }
    mine, theirs = row["sinklab"], row["kvpress"]
    if mine["pressed_s"] and theirs["pressed_s"]:
        row["sinklab_over_kvpress"] = {
            "pressed_s": round(mine["pressed_s"] / theirs["pressed_s"], 3),
            "overhead_factor": round((1 + mine["overhead"]) / (1 + theirs["overhead"]), 3),  # (pressed/plain) over theirs
        }
        row["not_slower"] = mine["overhead"] <= theirs["overhead"] and mine["pressed_s"] <= theirs["pressed_s"]
    return row


def memory_part(jobs: dict, args, presses: list) -> dict:
    found = {}
    for length, job in jobs.items():
        peaks = {name: {what: [] for what in ("plain", *presses)} for name in FRAMEWORKS}
        for r, order in peers.alternated(list(FRAMEWORKS), args.memory_pairs):
            for what in ("plain", *presses):
                for name in order:
                    result = run({**job, "framework": name, "mode": "memory", "what": what}, args.threads, args.limit_gb)
                    print(f"memory {length} {what} round {r} {name}:", str(result)[:300], flush=True)
                    peaks[name][what].append(result)
        found[str(length)] = {name: summarise_memory(peaks[name]) for name in FRAMEWORKS}
        h2o = {name: found[str(length)][name].get("h2o", {}) for name in FRAMEWORKS}
        found[str(length)]["h2o_goal"] = {
            "sinklab_h2o_over_plain": h2o["sinklab"].get("over_plain"),
            "kvpress_observed_over_plain": h2o["kvpress"].get("over_plain"),
            "kvpress_observed_failed": h2o["kvpress"].get("failed"),
            "met": None if h2o["sinklab"].get("over_plain") is None else h2o["sinklab"]["over_plain"] <= 1.2,
        }
    return found


def summarise_memory(by_what: dict) -> dict:
    """Per prefill: median peak and what it added, and its peak (and what it added) over the plain
    prefill's, the median of the per-round ratios. Across frameworks compare what was added: the
    loaded process differs (kvpress's site imports datasets and pyarrow)."""
    plain = by_what["plain"]
    out = {}
    for what, results in by_what.items():
        ok = [r for r in results if "failed" not in r]
        pairs = [(r, p) for r, p in zip(results, plain) if "failed" not in r and "failed" not in p]
        ratios = [r["peak_mib"] / p["peak_mib"] for r, p in pairs]
        added = [r["above_loaded_mib"] / max(p["above_loaded_mib"], 1.0) for r, p in pairs]
        out[what] = {
            "peak_mib": peers.median([r["peak_mib"] for r in ok], 1),
            "above_loaded_mib": peers.median([r["above_loaded_mib"] for r in ok], 1),
            "loaded_mib": peers.median([r["loaded_mib"] for r in ok], 1),
            "over_plain": peers.median(ratios, 3) if what != "plain" else None,
            "over_plain_range": peers.spread(ratios) if what != "plain" else None,
            "above_loaded_over_plain": peers.median(added, 3) if what != "plain" else None,
            "seconds": peers.median([r["seconds"] for r in ok], 2),
            "kept_fraction": ok[0]["kept_fraction"] if ok else None,
            "memory_method": ok[0]["memory_method"] if ok else None,
            **({"failed": [r["failed"] for r in results if "failed" in r]} if len(ok) < len(results) else {}),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="256 tokens, one pair and round, nothing recorded (a check)")
    parser.add_argument("--contexts", help="context lengths (default 2048,8192; --smoke 256)")
    parser.add_argument("--presses", default=",".join(PRESSES), help=f"default {','.join(PRESSES)}")
    parser.add_argument("--ratio", type=float, default=0.5, help="fraction of the context removed (default 0.5)")
    parser.add_argument("--pairs", type=int, help="plain/pressed pairs per press in each worker (default 2; --smoke 1)")
    parser.add_argument("--rounds", type=int, help="timing workers per framework and length (default 2; --smoke 1)")
    parser.add_argument("--memory-pairs", type=int, help="alternated memory workers per prefill (default 2; --smoke 1)")
    parser.add_argument("--parts", default="time,memory", help="time, memory or both (default)")
    parser.add_argument("--threads", type=int, help="threads of every worker (default: torch's default here)")
    parser.add_argument("--limit-gb", type=float, default=20.0, help="address-space cap per worker (default 20)")
    args = parser.parse_args()
    if not args.smoke:
        import common  # noqa: F401 - refuses a dirty tree before an hour of measuring

    import torch
    from transformers import AutoTokenizer

    from sinklab.compress.tasks import text_window
    from sinklab.models.hf import default_model_folder

    args.contexts = args.contexts or ("256" if args.smoke else "2048,8192")
    args.pairs = args.pairs or (1 if args.smoke else 2)
    args.rounds = args.rounds or (1 if args.smoke else 2)
    args.memory_pairs = args.memory_pairs or (1 if args.smoke else 2)
    args.threads = args.threads or torch.get_num_threads()
    presses = args.presses.split(",")
    peers.site_path("kvpress")
    folder = default_model_folder()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with tempfile.TemporaryDirectory() as tmp:
        jobs = {}
        for length in (int(c) for c in args.contexts.split(",")):
            ids = text_window(tokenizer, "shakespeare", length, "auto").context
            jobs[length] = {
                "model": str(folder),
                "ratio": args.ratio,
                "ids": peers.write_ids(ids, Path(tmp) / f"ids{length}.json"),
            }
        parts = args.parts.split(",")
        row = {"model": folder.name, "threads": args.threads, "ratio": args.ratio, "args": vars(args)}
        if "time" in parts:
            row["timing"] = time_part(jobs, args, presses)
        if "memory" in parts:
            row["memory"] = memory_part(jobs, args, presses)
    row["versions"] = VERSIONS
    peers.done(row, "peers_kvpress", args.smoke)


if __name__ == "__main__":
    job = peers.read_job(sys.argv)
    if job is not None:
        peers.emit(worker(job))
    else:
        main()
