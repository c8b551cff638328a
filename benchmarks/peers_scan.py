"""The scan against TransformerLens 4.3 and nnsight 0.8: the same numbers from the same input, time
and peak memory, each framework in its own process (BENCHMARKS.md 7).

What each computes, on the default model over one sequence of ``--tokens`` tokens (default 2,048;
``sinklab.scan.build_inputs``, the scan's own Shakespeare window, the same ids for all):

* the first-token mass per layer and head: the mean over query positions i >= 1 of A[i, 0];
* the largest residual at position 0 per layer: max over dimensions of |h_0| after each decoder
  layer (``hook_resid_post``).

How, as a user of each would:

* ``sinklab``: ``sinklab.scan.record_subject`` with the default ``RecordOptions`` (every probe of
  ``sinklab scan``, reduced while recording; ``metrics.first_token_mass`` of ``first_column`` and
  ``max_abs[:, 0]``);
* ``transformer_lens/patterns``: ``TransformerBridge.boot_transformers(folder)`` (raw HF weights,
  eager attention), ``run_with_cache`` filtered to every layer's ``attn.hook_pattern`` and
  ``hook_resid_post``: the patterns are kept, then reduced;
* ``nnsight/patterns``: ``TransformersModel(folder, attn_implementation="eager")``, one
  ``trace`` saving every layer's attention weights (``self_attn.output[1]``) and output;
* ``transformer_lens/reduced`` and ``nnsight/reduced`` (``--captures``): the careful user's
  version, each layer's pattern reduced to what is measured inside the hook or trace and dropped.

Every framework loads the same safetensors folder (``sinklab.models.hf.default_model_folder``),
float32. TransformerLens 4.3 and nnsight 0.8 run beside the venv's transformers 5, each from its
own site (``.peers/transformer_lens``, ``.peers/nnsight``) on its worker's path. Per round, one
worker per method, the order reversed every round; each worker loads, runs one warm-up capture
(counted in its peak memory, reported as ``first_s``) and ``--repeats`` timed ones. Time: the
median of the timed captures over every round; memory (``peers.py``: VmHWM reset after loading):
the median over rounds of each worker's peak and of what the captures added above the loaded model.
Agreement: each method's numbers against sinklab's (largest absolute difference of the masses,
largest relative difference of the residuals), with ``--mass-atol`` and ``--resid-rtol``.
Goal: sinklab faster and at most half the memory (above the loaded model) of either.

Run: `.venv/bin/python benchmarks/peers_scan.py` (after `make bench-peers` built the sites; about
10 minutes on 2 cores); `--smoke` runs 256 tokens once and records nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import peers

SCRIPT = "peers_scan.py"
METHODS = {  # method -> its framework's site
    "sinklab": None,
    "transformer_lens/patterns": "transformer_lens",
    "transformer_lens/reduced": "transformer_lens",
    "nnsight/patterns": "nnsight",
    "nnsight/reduced": "nnsight",
}


# -- workers: each returns capture(ids) -> (mass (L, H), resid0 (L,)) as float64 tensors ---------


def first_mass(pattern):
    """(1, H, T, T) weights -> (H,): the mean over queries i >= 1 of A[i, 0]."""
    return pattern[0, :, 1:, 0].double().mean(-1)


def resid_peak(h):
    """(1, T, D) residual stream -> (): max |h_0|."""
    return h[0, 0].abs().max().double()


def sinklab_capture(job: dict):
    from sinklab.models.hf import load_model
    from sinklab.models.subjects import HFSubject
    from sinklab.scan import RecordOptions, metrics, record_subject

    subject = HFSubject(load_model(job["model"]))

    def capture(ids):
        record, _ = record_subject(subject, ids, RecordOptions(), progress=False)
        return metrics.first_token_mass(record.first_column), record.max_abs[:, 0]

    return capture


def transformer_lens_capture(job: dict):
    import torch
    from transformer_lens.model_bridge import TransformerBridge

    bridge = TransformerBridge.boot_transformers(job["model"], device="cpu", dtype=torch.float32)
    n_layers = bridge.cfg.n_layers
    wanted = lambda name: name.endswith(("attn.hook_pattern", "hook_resid_post"))  # noqa: E731

    def patterns(ids):
        _, cache = bridge.run_with_cache(ids, names_filter=wanted)
        mass = torch.stack([first_mass(cache[f"blocks.{i}.attn.hook_pattern"]) for i in range(n_layers)])
        resid = torch.stack([resid_peak(cache[f"blocks.{i}.hook_resid_post"]) for i in range(n_layers)])
        return mass, resid

    def reduced(ids):
        found = {}

        def keep(tensor, hook):
            layer = int(hook.name.split(".")[1])
            found[(layer, "attn" in hook.name)] = first_mass(tensor) if "attn" in hook.name else resid_peak(tensor)

        bridge.run_with_hooks(ids, fwd_hooks=[(wanted, keep)])
        return torch.stack([found[(i, True)] for i in range(n_layers)]), torch.stack([found[(i, False)] for i in range(n_layers)])

    return patterns if job["method"].endswith("patterns") else reduced


def nnsight_capture(job: dict):
    import nnsight
    import torch
    from nnsight import TransformersModel

    model = TransformersModel(
        job["model"], task="text-generation", dispatch=True, attn_implementation="eager", dtype=torch.float32
    )
    layers = model.model.layers
    keep_patterns = job["method"].endswith("patterns")

    def capture(ids):
        with model.trace(ids):
            weights, outputs = nnsight.save([]), nnsight.save([])
            for layer in layers:  # in the order the forward reaches them
                w, h = layer.self_attn.output[1], layer.output
                weights.append(w if keep_patterns else first_mass(w))
                outputs.append(h if keep_patterns else resid_peak(h))
        if keep_patterns:
            return torch.stack([first_mass(w) for w in weights]), torch.stack([resid_peak(h) for h in outputs])
        return torch.stack(list(weights)), torch.stack(list(outputs))

    return capture


CAPTURES = {"sinklab": sinklab_capture, "transformer_lens": transformer_lens_capture, "nnsight": nnsight_capture}


def worker(job: dict) -> dict:
    peers.start_worker(job)
    framework = job["method"].split("/")[0]
    capture = CAPTURES[framework](job)
    ids = peers.read_ids(job)
    capture(ids[:, :16])  # pages in the weights (a lazily mapped checkpoint) before memory is measured
    mark = peers.memory_mark()
    first, _ = peers.timed(lambda: capture(ids))
    times, numbers = [], None
    for _ in range(job["repeats"]):
        seconds, numbers = peers.timed(lambda: capture(ids))
        times.append(round(seconds, 3))
        peers.trim_heap()
    mass, resid = numbers
    return {
        "method": job["method"],
        "versions": peers.versions(framework.replace("_", "-")),
        "first_s": round(first, 3),
        "seconds": times,
        **peers.memory_since(mark),
        "mass": mass.tolist(),
        "resid0": resid.tolist(),
    }


# -- the orchestrator ---------------------------------------------------------------------------


def agreement(mine: dict, theirs: dict, mass_atol: float, resid_rtol: float) -> dict:
    import torch

    mass = (torch.tensor(theirs["mass"]) - torch.tensor(mine["mass"])).abs().max().item()
    ref = torch.tensor(mine["resid0"])
    resid = ((torch.tensor(theirs["resid0"]) - ref).abs() / ref.abs().clamp(min=1e-12)).max().item()
    return {"mass_max_abs_diff": mass, "resid0_max_rel_diff": resid, "agree": mass <= mass_atol and resid <= resid_rtol}


def summarise(runs: dict, args) -> dict:
    out = {}
    for method, results in runs.items():
        ok = [r for r in results if "failed" not in r]
        out[method] = {
            "seconds": peers.median([s for r in ok for s in r["seconds"]], 3),
            "seconds_range": peers.spread([s for r in ok for s in r["seconds"]]),
            "first_s": peers.median([r["first_s"] for r in ok], 3),
            "peak_mib": peers.median([r["peak_mib"] for r in ok], 1),
            "above_loaded_mib": peers.median([r["above_loaded_mib"] for r in ok], 1),
            "above_loaded_range": peers.spread([r["above_loaded_mib"] for r in ok], 1),
            "memory_method": ok[0]["memory_method"] if ok else None,
            "versions": ok[0]["versions"] if ok else None,
            **({"failed": [r["failed"] for r in results if "failed" in r]} if len(ok) < len(results) else {}),
        }
        if ok:
            mass = ok[-1]["mass"]
            resid = ok[-1]["resid0"]
            top = max(range(len(resid)), key=lambda i: resid[i])
            out[method]["largest_resid0"] = {"layer": top, "value": round(resid[top], 3)}
            out[method]["first_token_mass_mean"] = round(sum(map(sum, mass)) / (len(mass) * len(mass[0])), 5)
    mine = next((r for r in runs["sinklab"] if "failed" not in r), None)
    for method, results in runs.items():
        theirs = next((r for r in results if "failed" not in r), None)
        if method == "sinklab" or mine is None or theirs is None:
            continue
        out[method]["agreement_with_sinklab"] = agreement(mine, theirs, args.mass_atol, args.resid_rtol)
        a, b = out["sinklab"], out[method]
        out[method]["sinklab_over_this"] = {
            "seconds": round(a["seconds"] / b["seconds"], 3),
            "peak_mib": round(a["peak_mib"] / b["peak_mib"], 3),
            "above_loaded_mib": round(a["above_loaded_mib"] / max(b["above_loaded_mib"], 1.0), 3),
        }
        out[method]["goal_met"] = a["seconds"] < b["seconds"] and a["above_loaded_mib"] <= 0.5 * b["above_loaded_mib"]
    if mine is not None:
        out["sinklab"]["mass"] = mine["mass"]
        out["sinklab"]["resid0"] = mine["resid0"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="256 tokens, one round, nothing recorded (a check)")
    parser.add_argument("--tokens", type=int, help="tokens in the sequence, BOS included (default 2048; --smoke 256)")
    parser.add_argument("--rounds", type=int, help="workers per method (default 3; --smoke 1)")
    parser.add_argument("--repeats", type=int, default=2, help="timed captures per worker after its warm-up (default 2)")
    parser.add_argument("--captures", default="patterns,reduced", help="the peers' captures: patterns, reduced or both")
    parser.add_argument("--threads", type=int, help="threads of every worker (default: torch's default here)")
    parser.add_argument("--limit-gb", type=float, default=20.0, help="address-space cap per worker (default 20)")
    parser.add_argument("--mass-atol", type=float, default=1e-4, help="agreement: largest mass difference (default 1e-4)")
    parser.add_argument(
        "--resid-rtol", type=float, default=1e-3, help="agreement: largest relative residual difference (default 1e-3)"
    )
    args = parser.parse_args()
    if not args.smoke:
        import common  # noqa: F401 - refuses a dirty tree before measuring

    import torch
    from transformers import AutoConfig, AutoTokenizer

    from sinklab.models.hf import default_model_folder
    from sinklab.scan import InputSpec, build_inputs

    args.tokens = args.tokens or (256 if args.smoke else 2048)
    args.rounds = args.rounds or (1 if args.smoke else 3)
    args.threads = args.threads or torch.get_num_threads()
    captures = args.captures.split(",")
    methods = [m for m in METHODS if m == "sinklab" or m.split("/")[1] in captures]
    for site in {METHODS[m] for m in methods} - {None}:
        peers.site_path(site)
    folder = default_model_folder()
    config = AutoConfig.from_pretrained(folder)
    ids = build_inputs(InputSpec(tokens=args.tokens, batch=1), AutoTokenizer.from_pretrained(folder),
                       config.max_position_embeddings, config.vocab_size).ids  # fmt: skip
    runs = {method: [] for method in methods}
    with tempfile.TemporaryDirectory() as tmp:
        job = {"model": str(folder), "ids": peers.write_ids(ids, Path(tmp) / "ids.json"), "repeats": args.repeats}
        for r, order in peers.alternated(methods, args.rounds):
            for method in order:
                result = peers.run_worker(SCRIPT, METHODS[method], {**job, "method": method}, args.threads, args.limit_gb)
                print(f"round {r} {method}:", {k: v for k, v in result.items() if k not in ("mass", "resid0")}, flush=True)
                runs[method].append(result)
    row = {
        "model": folder.name,
        "tokens": ids.shape[1],
        "threads": args.threads,
        "args": vars(args),
        "methods": summarise(runs, args),
    }
    peers.done(row, "peers_scan", args.smoke)


if __name__ == "__main__":
    job = peers.read_job(sys.argv)
    if job is not None:
        peers.emit(worker(job))
    else:
        main()
