"""What handing jobs to an engine costs: one short Bigram-Backcopy sweep (the sweep's own configs and
job function at a reduced step count) through the local pool, submitit's local executor (the Slurm
path: pickled jobs run as subprocesses) and a local Ray, one after another in one run, each into a
fresh folder. Reported per launcher: wall time, overhead per job ((launcher wall - pool wall) /
jobs), and whether every run's final validation loss equals the pool's; plus Ray's own cost: its
start-up and its scheduling time per trivial no-op job on an already started Ray.

Submitit's local executor starts every job at once (it has no array parallelism), the pool and Ray
run ``--workers`` at a time: on a loaded machine the submitit figure includes that difference.

Run: `.venv/bin/python benchmarks/launcher_overhead.py [--steps 100] [--variants 4] [--seeds 0,1] [--workers 2] [--noop-jobs 200]`
(`--smoke`: a few seconds of each, printed, not recorded)
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from common import RUNS, record

from sinklab.core.launchers import LauncherSettings, launch
from sinklab.pretrain.sweep import SweepConfig, SweepJob, run_dir, train_one

LAUNCHERS = {
    "local": LauncherSettings(),
    "submitit-local": LauncherSettings(launcher="slurm", cluster="local"),
    "ray": LauncherSettings(launcher="ray"),
}


def sweep_wall(settings: LauncherSettings, configs: list, root: Path, workers: int) -> tuple[float, dict]:
    """Seconds to train every config from scratch into ``root`` on ``settings``; each run's final
    validation loss by run name."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    jobs = [SweepJob(cfg, str(run_dir(root, cfg)), False) for cfg in configs]
    start = time.perf_counter()
    summaries = launch(train_one, jobs, settings, root, workers, desc="sweep", label=lambda job: Path(job.out).name)
    wall = time.perf_counter() - start
    return wall, {Path(job.out).name: summary["final_val_loss"] for job, summary in zip(jobs, summaries)}


def noop(job: int) -> int:
    return job


def ray_scheduling(jobs: int, workers: int, root: Path) -> dict:
    """Ray's start-up, and seconds per no-op job through launch() on the started Ray."""
    import ray

    start = time.perf_counter()
    ray.init(num_cpus=workers, include_dashboard=False)
    started = time.perf_counter()
    try:
        launch(noop, list(range(jobs)), LAUNCHERS["ray"], root, workers, desc="no-op jobs")
        done = time.perf_counter()
    finally:
        ray.shutdown()
    return {"ray_start_s": round(started - start, 3), "noop_jobs": jobs, "noop_s_per_job": round((done - started) / jobs, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--steps", type=int, default=100, help="training steps per run (default 100; the sweep's budget is 1,200)"
    )
    parser.add_argument("--variants", type=int, default=4, help="the sweep's first N variants (default 4)")
    parser.add_argument("--seeds", default="0,1", help="comma-separated seeds (default 0,1)")
    parser.add_argument("--workers", type=int, default=2, help="jobs at a time for the pool and Ray (default 2)")
    parser.add_argument("--noop-jobs", type=int, default=200, help="no-op jobs timed on Ray (default 200)")
    parser.add_argument("--smoke", action="store_true", help="4 steps, 1 variant, 1 seed, 4 no-op jobs; printed, not recorded")
    args = parser.parse_args()
    steps, variants, seeds, noop_jobs = (4, 1, "0", 4) if args.smoke else (args.steps, args.variants, args.seeds, args.noop_jobs)
    seed_list = [int(s) for s in seeds.split(",")]
    variant_names = tuple(c.variant for c in SweepConfig(corpus="bb", seeds=(0,)).runs()[:variants])
    configs = SweepConfig(corpus="bb", seeds=tuple(seed_list), steps=steps, variants=variant_names).runs()
    root = RUNS / "launcher-overhead"
    walls, losses = {}, {}
    for name, settings in LAUNCHERS.items():
        walls[name], losses[name] = sweep_wall(settings, configs, root / name, args.workers)
    pool = walls["local"]
    row = {
        "steps": steps,
        "variants": variants,
        "seeds": seed_list,
        "jobs": len(configs),
        "workers": args.workers,
        "launchers": {
            name: {
                "wall_s": round(wall, 3),
                "overhead_s_per_job": round((wall - pool) / len(configs), 3),
                "same_results": losses[name] == losses["local"],
            }
            for name, wall in walls.items()
        },
        **ray_scheduling(noop_jobs, args.workers, root / "noop"),
    }
    if args.smoke:
        print(json.dumps(row, indent=2))
    else:
        record("launcher_overhead", row)


if __name__ == "__main__":
    main()
