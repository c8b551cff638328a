"""``make gpu-check``: the checks that need a GPU, as one short prepared run (at most 8 minutes on one
GPU, nothing downloaded), each recorded as a row of ``results/gpu_check.jsonl``:

* ``dtype_agreement``: the default model scanned on the GPU in float32 and bfloat16 against the CPU
  float32 scan (first-token mass, Sink_1^0.3, the largest massive activation);
* ``scan_1b``: a randomly initialised Llama of the Llama-3.2-1B shape (config only, bfloat16) scanned
  at 8,192 tokens, against a plain SDPA forward on the same GPU, with peak GPU memory;
* ``device_map``: the default model split between the GPU and the CPU (half the layers each) gives
  the single-device scan's figures (the CPU rehearsal sends half to disk: accelerate offloads them
  as it offloads the GPU run's CPU half);
* ``sink_cache``: streaming through the sink cache on the GPU: sink/dense decode-step time, kept
  keys in bfloat16 against keys rotated directly at their cache index, and no host synchronisation
  in a decode step (CUDA's sync debug mode set to "error");
* ``trigger_paper``: ``sinklab trigger --paper --seeds 0-31 --device cuda`` wall time (target 120 s);
* ``pretrain_larger``, only with ``--only pretrain_larger`` (time-boxed at about 7 minutes of
  training; 325 s for all eight variants on an H200): issue 52's optional larger budget, the survey's mitigations against softmax
  on natural text with a fixed first token, one seed each, where the softmax baseline may grow a sink.

A section that fails records its error and the others still run. ``--smoke`` runs the sections named
(by default all but ``pretrain_larger``) at toy sizes on the CPU; the test suite runs every one, so
the script is known to work before a GPU is lent.

Run: `make gpu-check` (on a GPU machine) or `.venv/bin/python benchmarks/gpu_check.py --smoke`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import traceback
from typing import Optional

import torch
from common import record

import sinklab
from sinklab.models.hf import load_model


def dtype_agreement(device: str, smoke: bool) -> dict:
    from dtype_agreement import compare

    return compare(device, ["float32", "bfloat16"], 32 if smoke else 256, 1 if smoke else 4)


def scan_1b(device: str, smoke: bool) -> dict:
    from scan_speed import LLAMA_1B, compare, random_llama_1b

    from sinklab.models.subjects import HFSubject

    if smoke:
        shape = dict(
            LLAMA_1B,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=512,
        )
        subject, tokens = HFSubject(random_llama_1b(device, shape)), 64
    else:
        subject, tokens = HFSubject(random_llama_1b(device)), 8192
    ids = torch.randint(0, subject.vocab_size, (1, tokens), device=device, generator=None)
    return {"model": subject.name, "layers": subject.n_layers, **compare(subject, ids, 1 if smoke else 2, device)}


def half_split(n_layers: int, first: str, second: str, output: Optional[str] = None) -> dict:
    """An accelerate device map of a Llama-layout model: embeddings and the first half of the layers
    on ``first``, the rest on ``second``, the output layer on ``output`` (default ``second``)."""
    half = n_layers // 2
    layers = {f"model.layers.{i}": first if i < half else second for i in range(n_layers)}
    output = output if output is not None else second
    return {"model.embed_tokens": first, "model.rotary_emb": first, **layers, "model.norm": output, "lm_head": output}


def device_map(device: str, smoke: bool) -> dict:
    single = load_model(None, device=device)
    reference = sinklab.scan_model(single.model, single.tokenizer, tokens=32 if smoke else 128, batch=2).summary
    n_layers = single.model.config.num_hidden_layers
    del single
    # On the CPU rehearsal the second half of the layers goes to disk: accelerate offloads it as meta
    # parameters, the path the GPU run's CPU half takes (its weights held in CPU memory instead). The
    # output layer stays: its weight is the embeddings' (tied), which no disk index holds.
    mapping = half_split(n_layers, "cpu", "disk", output="cpu") if device == "cpu" else half_split(n_layers, "cuda:0", "cpu")
    split = load_model(None, device_map=json.dumps(mapping))
    spread = sinklab.scan_model(split.model, split.tokenizer, tokens=32 if smoke else 128, batch=2).summary
    gap = (torch.tensor(reference["first_token_mass"]) - torch.tensor(spread["first_token_mass"])).abs().max().item()
    return {
        "devices": spread["device_map"],
        "first_token_mass_max_abs_diff": gap,
        "loss": [reference["loss"], spread["loss"]],
        "sink_rate": [reference["sink_rate"]["value"], spread["sink_rate"]["value"]],
        "super_neurons_agree": reference["super_neurons"] == spread["super_neurons"],  # their weights read outside the forward
    }


def sink_cache(device: str, smoke: bool) -> dict:
    """The sink cache on ``device`` in bfloat16 (float32 on a CPU): paired decode steps against a
    dense cache, layer 0's kept keys against keys rotated directly at their cache index (layer 0's
    keys depend on the token alone, so a fresh prefill of the kept tokens gives the exact ones),
    and, on a GPU, decode steps under CUDA's sync debug mode "error"."""
    from transformers import DynamicCache

    from sinklab.stream import decode_without_host_sync, make_sink_cache
    from sinklab.stream.walks import clock

    dtype = "float32" if device == "cpu" else "bfloat16"
    model = load_model(None, device=device, dtype=dtype).model
    n_sink, window, steps = 4, (16 if smoke else 252), (24 if smoke else 256)
    ids = torch.randint(100, 20000, (1, n_sink + window + steps), generator=torch.Generator().manual_seed(0)).to(device)
    sink, dense = make_sink_cache(model, n_sink, window), DynamicCache()
    with torch.no_grad():
        fill = n_sink + window
        for cache in (sink, dense):
            model(input_ids=ids[:, :fill], cache=cache, use_cache=True)
        times = {"sink": [], "dense": []}
        for t in range(fill, ids.shape[1]):
            for name, cache in (("dense", dense), ("sink", sink)) if t % 2 else (("sink", sink), ("dense", dense)):
                start = clock(torch.device(device))
                model(input_ids=ids[:, t : t + 1], cache=cache, use_cache=True)
                times[name].append(clock(torch.device(device)) - start)
        layer = sink.layers[0]
        kept = ids[0, layer.positions.reshape(-1).to(ids.device)]
        fresh = DynamicCache()
        model(input_ids=kept[None], cache=fresh, use_cache=True)
        exact = fresh.layers[0].keys.float()
        kept_keys = layer.keys_in_cache().float()
    ratios = sorted(s / d for s, d in zip(times["sink"], times["dense"]))
    row = {
        "dtype": dtype,
        "steps": steps,
        "window": window,
        "sink_ms_median": 1000 * statistics.median(times["sink"]),
        "dense_ms_median": 1000 * statistics.median(times["dense"]),
        "sink_over_dense_median_of_pairs": ratios[len(ratios) // 2],
        "kept_keys": len(kept),
        "kept_key_max_abs_error": (kept_keys - exact).abs().max().item(),
        "key_max_abs": exact.abs().max().item(),
    }
    if device == "cuda":
        tokens = decode_without_host_sync(model, make_sink_cache(model, n_sink, window), ids[:, :fill], 64)
        row["decode_steps_without_host_sync"] = tokens.shape[1]
    return row


def trigger_paper(device: str, smoke: bool) -> dict:
    from sinklab.trigger import TriggerConfig, paper_configs, run_lab

    seeds = range(1 if smoke else 32)
    configs = (
        paper_configs(seeds, TriggerConfig(max_steps=20), shapes=((1, 1),)) if smoke else paper_configs(seeds, TriggerConfig())
    )
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        summary = run_lab(configs, out, workers=1 if smoke else None, device=device).summary
        seconds = time.perf_counter() - start
    runs = summary["runs"]
    return {
        "seeds": len(seeds),
        "wall_seconds": round(seconds, 1),
        "target_seconds": 120,
        "runs": len(runs),
        "converged": sum(bool(r["converged"]) for r in runs),
        "compile_fallbacks": sorted(set(summary["compile_fallbacks"].values())),  # why a step trained uncompiled
    }


def pretrain_larger(device: str, smoke: bool) -> dict:
    from pretrain_larger import measure

    return measure(device, smoke)


SECTIONS = {
    "dtype_agreement": dtype_agreement,
    "scan_1b": scan_1b,
    "device_map": device_map,
    "sink_cache": sink_cache,
    "trigger_paper": trigger_paper,
}
#: Sections run only when named (``--only``): long ones, given their own time limit on a lent device
#: (docs/contributing/gpu-check.md).
NAMED_ONLY = {"pretrain_larger": pretrain_larger}
EVERY_SECTION = {**SECTIONS, **NAMED_ONLY}


def run_sections(device: str, smoke: bool, names=tuple(SECTIONS), done=lambda name, result: None) -> dict:
    """Every section in turn; a failure is recorded (with its traceback's last line) and the rest run.
    ``done(name, result)`` is called as each section ends, so a run stopped at a time limit keeps the
    sections it finished (the first GPU run lost four finished sections when the fifth ran over)."""
    results = {}
    for name in names:
        start = time.perf_counter()
        try:
            results[name] = {"ok": True, **EVERY_SECTION[name](device, smoke)}
        except Exception as exc:  # noqa: BLE001 - one section's failure must not lose the others' rows
            results[name] = {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "where": traceback.format_exc().strip().splitlines()[-3:],
            }
        results[name]["section_seconds"] = round(time.perf_counter() - start, 1)
        print(name, json.dumps(results[name]), flush=True)
        done(name, results[name])
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="toy sizes on the CPU (what the test suite runs)")
    parser.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"comma-separated sections (default: all but {', '.join(NAMED_ONLY)}, which run only when named)",
    )
    args = parser.parse_args()
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(names) - set(EVERY_SECTION))
    if not names or unknown:
        parser.error(f"--only: unknown {', '.join(unknown) or '(none named)'}; the sections are {', '.join(EVERY_SECTION)}")
    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_check: PyTorch sees no GPU here; run it on a GPU machine, or --smoke for the CPU rehearsal")
    where = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    name = "gpu_check_smoke" if args.smoke else "gpu_check"
    run_sections(
        device,
        args.smoke,
        names,
        lambda section, result: record(name, {"device": where, "section": section, **result}),
    )


if __name__ == "__main__":
    main()
