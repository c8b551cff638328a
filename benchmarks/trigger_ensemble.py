"""Many seeds in the time of one? Trigger ensembles against one seed trained alone, side by side.

Parts (each writes one row to results/trigger_ensemble.jsonl):

* ``shape``: softmax 2x2 with one seed against eight seeds as ensembles (``--seeds 0-7
  --ensemble``) and as independent single-model jobs (``--seeds 0-7``, the CPU default), each from
  scratch and timed end to end as ``sinklab trigger`` runs it;
* ``paper``: ``--paper`` with one seed against ``--paper --seeds 0-7`` (48 models, the CPU
  default: independent jobs);
* ``profile``: where an ensemble step's time goes, per operation (torch.profiler), for eight
  members of softmax 2x2, and the matrix products' arithmetic rate against a large GEMM's on the
  same core.

Run: `.venv/bin/python benchmarks/trigger_ensemble.py --part shape` (or paper, profile)
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections import defaultdict
from dataclasses import replace

import torch
from common import RUNS, record

from sinklab.core.jobs import default_workers
from sinklab.trigger import TriggerConfig, ensemble, paper_configs, run_lab

SHAPE = TriggerConfig(layers=2, heads=2)


def timed_lab(configs, name: str, ensembles: bool) -> dict:
    """Train ``configs`` from scratch in a fresh run directory; wall time and per-run steps."""
    out = RUNS / f"bench-ensemble-{name}"
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    summary = run_lab(configs, out, ensembles=ensembles).summary
    return {
        "wall_seconds": round(time.perf_counter() - start, 1),
        "steps": {r["key"]: r["steps"] for r in summary["runs"]},
        "solved": sum(r["converged"] for r in summary["runs"]),
        "step_modes": sorted({r["step_mode"] for r in summary["runs"]}),
    }


def shape_part() -> dict:
    one = timed_lab([SHAPE], "one", ensembles=False)
    eight = [replace(SHAPE, seed=s) for s in range(8)]
    ensembles = timed_lab(eight, "eight", ensembles=True)
    independent = timed_lab(eight, "independent", ensembles=False)
    return {
        "shape": "softmax 2x2",
        "one_seed": one,
        "eight_seeds_ensembles": ensembles,
        "eight_seeds_independent_jobs": independent,
        "ratio_ensembles": round(ensembles["wall_seconds"] / one["wall_seconds"], 2),
        "ratio_independent": round(independent["wall_seconds"] / one["wall_seconds"], 2),
        "summed_steps_ratio": round(sum(ensembles["steps"].values()) / sum(one["steps"].values()), 2),
    }


def paper_part() -> dict:
    one = timed_lab(paper_configs([0], TriggerConfig()), "paper-one", ensembles=False)
    eight = timed_lab(paper_configs(range(8), TriggerConfig()), "paper-eight", ensembles=False)
    return {
        "paper_one_seed": one,
        "paper_eight_seeds_independent_jobs": eight,
        "ratio": round(eight["wall_seconds"] / one["wall_seconds"], 2),
    }


def profile_part(members: int = 8, steps: int = 1000) -> dict:
    """Per-operation time of ``steps`` ensemble steps, in one thread (the step is compiled before;
    the profiled run still retraces it once, from the warm cache, which lands in "other")."""
    import torch._inductor.config
    from torch.profiler import ProfilerActivity, profile

    torch._inductor.config.cpp.enable_kernel_profile = True  # name each compiled kernel in the profile
    torch.set_num_threads(1)
    configs = [replace(SHAPE, seed=s, max_steps=50) for s in range(members)]
    ensemble.Ensemble(configs).train()  # compiles (and warms the caches)
    run = ensemble.Ensemble([replace(c, max_steps=steps) for c in configs])
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        start = time.perf_counter()
        run.train()
        seconds = time.perf_counter() - start
    by_kind: dict[str, float] = defaultdict(float)
    bmm_flops = 0
    for event in prof.key_averages(group_by_input_shape=True):
        kind = _kind(event.key)
        if kind:
            by_kind[kind] += event.self_cpu_time_total / 1e6
        if event.key == "aten::bmm":
            (b, m, k), (_, _, n) = event.input_shapes[:2]
            bmm_flops += 2 * b * m * k * n * event.count
    return {
        "members": members,
        "steps": steps,
        "ms_per_step": round(1e3 * seconds / steps, 2),
        "ms_per_member_step": round(1e3 * seconds / steps / members, 3),
        "seconds_by_kind": {k: round(v, 3) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "seconds_profiled": round(seconds, 3),
        "bmm_gflops_per_s": round(bmm_flops / by_kind["matrix products (aten::bmm/mm)"] / 1e9, 1),
        "large_gemm_gflops_per_s": round(_large_gemm_rate() / 1e9, 1),
        "threads": 1,
    }


def _kind(name: str) -> str:
    if name in ("aten::bmm", "aten::mm", "aten::addmm"):
        return "matrix products (aten::bmm/mm)"
    if name.startswith("graph_") or "cpp_fused" in name:
        return "compiled element-wise kernels (inductor)"
    if name in ("aten::rand", "aten::uniform_", "aten::randint", "aten::random_"):
        return "random draws (data)"
    if name.startswith(("aten::index", "aten::cumsum", "aten::zeros", "aten::cat", "aten::fill_", "aten::copy_", "aten::clone")):
        return "data assembly and copies"
    return "other (Python, dispatch, guards)"


def _large_gemm_rate() -> float:
    a, b = torch.randn(2048, 512), torch.randn(512, 512)
    for _ in range(3):
        a @ b
    start = time.perf_counter()
    for _ in range(20):
        a @ b
    return 20 * 2 * 2048 * 512 * 512 / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("shape", "paper", "profile"), required=True)
    args = parser.parse_args()
    row = {"shape": shape_part, "paper": paper_part, "profile": profile_part}[args.part]()
    record("trigger_ensemble", {"part": args.part, "workers": default_workers(), **row})


if __name__ == "__main__":
    main()
