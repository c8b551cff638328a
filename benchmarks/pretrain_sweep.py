"""A row of ``sinklab sweep`` (every attention variant under one budget, several seeds, compared),
recorded with the commit that trained every run in it.

The sweep itself is the package's (``sinklab sweep``, :mod:`sinklab.pretrain.sweep`): finished runs
are kept, half-finished ones resumed, runs of another configuration refused. A row stamped with
this tree's commit may only hold runs trained by it: before the sweep starts, a run in its
directory whose run.json names another commit, none, or uncommitted changes the row would not be
flagged with is refused, or with ``--rerun-stale`` trained again.

Run: `.venv/bin/python benchmarks/pretrain_sweep.py [sinklab sweep's flags: --corpus bb --seeds 0,1,2
--variants softmax,softmax+gate --steps N --set KEY=VALUE ... --launcher slurm ...] [--root DIR] [--record NAME]`
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Optional

from common import DIRTY, REVISION, RUNS, UNKNOWN, record

from sinklab import cli
from sinklab.cli.args import config_from, launcher_settings
from sinklab.core.errors import SinklabError
from sinklab.core.runs import SUMMARY, read_run_info
from sinklab.pretrain.sweep import DEFAULT_OUTS, SweepConfig, run_dir, run_sweep


def stale_reason(run: Path, revision: str) -> Optional[str]:
    """Why the run in ``run`` may not stand in a row stamped ``revision``: run.json's ``git`` names
    another commit, none, or uncommitted changes the row would not be flagged with. None when it may."""
    source, commit = read_run_info(run).get("git"), revision.removesuffix(DIRTY)
    if not source:
        return "its run.json records no git commit"
    if commit == UNKNOWN or not source["commit"].startswith(commit):
        return f"it was trained at commit {source['commit'][:7]}, and this tree is at {commit}"
    if source["uncommitted_changes"] and not revision.endswith(DIRTY):
        return "it was trained with uncommitted changes, and this row would be stamped clean"
    return None


def check_provenance(cfg: SweepConfig, root: Path, revision: str) -> None:
    """Refuse (or with ``cfg.rerun_stale`` remove) every run of the sweep that this row cannot stand
    for. Once a run is removed, so is the root's summary: the comparison over the old run would
    otherwise be read back as the finished sweep, and the row would stamp old numbers anew."""
    for run in (run_dir(root, c) for c in cfg.runs()):
        why = stale_reason(run, revision) if run.is_dir() else None
        if why and not cfg.rerun_stale:
            raise SinklabError(
                f"{run} holds a run this row cannot use: {why}; "
                "pass --rerun-stale to train it again, or give the sweep its own --root"
            )
        if why:
            shutil.rmtree(run)
            (root / SUMMARY).unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=None, help="the sweep's directory (default: runs/sweep, runs/sweep-bb)")
    parser.add_argument(
        "--record",
        default=None,
        help="the results file: results/NAME.jsonl (default pretrain_sweep, or pretrain_sweep_bb for --corpus bb)",
    )
    ours, rest = parser.parse_known_args()
    args = cli.build_parser().parse_args(["sweep", *rest])
    try:
        cfg = config_from(SweepConfig, args, settings=dict(args.settings))
        root = Path(ours.root) if ours.root else RUNS / Path(DEFAULT_OUTS[cfg.corpus]).name
        check_provenance(cfg, root, REVISION)
        launcher = launcher_settings(args)
        summary = run_sweep(cfg, root, launcher).summary
    except SinklabError as exc:
        sys.exit(f"pretrain_sweep: {exc}")
    record(
        ours.record or "pretrain_sweep" + ("_bb" if cfg.corpus == "bb" else ""),
        {
            "corpus": cfg.corpus,
            "steps": summary["steps"],
            "overrides": cfg.settings,
            "variants": list(cfg.variants) or None,
            "launcher": launcher.launcher,
            "target": summary["target"],
            "by_variant": summary["by_variant"],
            "paired": summary["paired"],
            "rows": summary["rows"],
        },
    )


if __name__ == "__main__":
    main()
