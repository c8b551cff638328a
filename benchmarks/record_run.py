"""Run one ``sinklab`` command and keep its result as a row of ``results/<name>.jsonl``.

For the tables of BENCHMARKS.md that a plain ``sinklab`` command produces: the row holds the
command, its wall time and CPU time (this process's threads and its finished child processes: a
wall beside other work is no cost figure, the CPU time is the closer one), the run's
``summary.json`` (``compare.json`` for pretraining comparisons) and the sizes of its JSON, HTML
and PNG files, so the table can be checked against data in the repository rather than in the git-ignored ``runs/``.

Run: `.venv/bin/python benchmarks/record_run.py NAME -- sinklab scan --out runs/scan-text`
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import sys
import time
from pathlib import Path

from common import record

from sinklab import cli


def cpu_seconds() -> float:
    """User and system CPU seconds so far of this process (every thread) and of its children that
    have ended (a launcher's worker processes)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="the results file: results/NAME.jsonl")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- sinklab ARGS (must include --out)")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if command[:1] != ["sinklab"] or "--out" not in command:
        parser.error("give the command as: -- sinklab ARGS ... --out DIR")
    out = Path(command[command.index("--out") + 1])
    if (out / "summary.json").exists() and "--overwrite" not in command:  # the command would only point at it
        parser.error(f"{out} holds a finished run already; add --overwrite to measure it again, or choose a new --out")
    start, cpu_start = time.perf_counter(), cpu_seconds()
    code = cli.main(command[1:])
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
    if code != 0:
        sys.exit(f"the command failed (exit {code}); nothing recorded")
    result = next((out / f for f in ("summary.json", "compare.json") if (out / f).exists()), None)
    if result is None:
        sys.exit(f"{out} holds no summary.json or compare.json; nothing recorded")
    sizes = {
        str(f.relative_to(out)): f.stat().st_size
        for f in sorted(out.rglob("*"))
        if f.is_file() and f.suffix in (".json", ".html", ".png")
    }
    record(
        args.name,
        {
            "command": shlex.join(command),
            "wall_seconds": round(seconds, 1),
            "cpu_seconds": round(cpu, 1),
            "result_file": result.name,
            "result": json.loads(result.read_text()),
            "file_bytes": sizes,
        },
    )


if __name__ == "__main__":
    main()
