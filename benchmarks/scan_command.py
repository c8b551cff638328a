"""The scan command end to end against one plain forward: where the seconds beyond the forward go.

In one run, rounds alternate (order reversed every round), the default model, batch 1, T tokens:

* ``plain``: ``model(input_ids)`` with SDPA attention in this process (the model already loaded);
* ``command``: ``sinklab scan --tokens T --batch 1`` as a new process, wall clock from start to exit;
* ``command_no_png``: the same with ``SINKLAB_IMAGES=off`` (no browser, no PNG): the difference is
  what the PNG figures cost the user;
* ``imports``: a new process that only imports ``sinklab.cli`` (Python, torch and transformers).

Each command's own phases come from its ``summary.json`` (``seconds``: load, record, summarise); the
rest of its wall clock is split into the imports (the median of ``imports``) and ``files_and_exit``
(figures, data, summary, page, and closing the browser at exit).

Run: `.venv/bin/python benchmarks/scan_command.py --tokens 2048`
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import record

from sinklab.models.hf import load_model
from sinklab.models.subjects import HFSubject
from sinklab.scan import InputSpec, scan_inputs

SINKLAB = str(Path(sys.executable).with_name("sinklab"))


def wall(argv: list[str], **env) -> float:
    """Seconds from starting ``argv`` as a new process to its exit (it must succeed)."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def command(tokens: int, images: bool) -> dict:
    """One ``sinklab scan`` in a new process: its wall clock and its own phases."""
    with tempfile.TemporaryDirectory() as out:
        argv = [SINKLAB, "scan", "--tokens", str(tokens), "--batch", "1", "--quiet", "--out", f"{out}/run"]
        seconds = wall(argv, SINKLAB_IMAGES="on" if images else "off")
        phases = json.loads(Path(f"{out}/run/summary.json").read_text())["seconds"]
        pngs = len(list(Path(f"{out}/run").glob("*.png")))
    return {"wall": seconds, **phases, "pngs": pngs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    loaded = load_model(None)
    ids = scan_inputs(HFSubject(loaded), InputSpec(tokens=args.tokens, batch=1)).ids

    @torch.no_grad()
    def plain() -> float:
        loaded.model.set_attn_implementation("sdpa")
        start = time.perf_counter()
        loaded.model(input_ids=ids, use_cache=False)
        return time.perf_counter() - start

    plain()  # warm-up
    steps = {
        "plain": plain,
        "command": lambda: command(args.tokens, images=True),
        "command_no_png": lambda: command(args.tokens, images=False),
        "imports": lambda: wall([sys.executable, "-c", "import sinklab.cli"]),
    }
    runs = {name: [] for name in steps}
    for r in range(args.rounds):
        for name in list(steps) if r % 2 == 0 else reversed(list(steps)):
            runs[name].append(steps[name]())
            print(name, runs[name][-1], flush=True)
    median = {name: statistics.median(v if isinstance(v, float) else v["wall"] for v in values) for name, values in runs.items()}
    phases = {key: round(statistics.median(run[key] for run in runs["command"]), 3) for key in ("load", "record", "summarise")}
    files_and_exit = median["command"] - median["imports"] - sum(phases.values())
    record(
        "scan_command",
        {
            "model": loaded.name,
            "tokens": args.tokens,
            "rounds": args.rounds,
            "runs": runs,
            "median_s": {name: round(value, 3) for name, value in median.items()},
            "command_phases_s": {"imports": round(median["imports"], 3), **phases, "files_and_exit": round(files_and_exit, 3)},
            "command_over_plain": round(median["command"] / median["plain"], 3),
            "command_no_png_over_plain": round(median["command_no_png"] / median["plain"], 3),
        },
    )


if __name__ == "__main__":
    main()
