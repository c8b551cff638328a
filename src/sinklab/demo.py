"""``make demo``: every capability once, on the built-in defaults, in a few minutes on a laptop CPU."""

from __future__ import annotations

from pathlib import Path

from . import report, trigger_lab
from .runs import prepare_run_dir
from .trigger import TriggerConfig


def run_demo(out: str) -> list[Path]:
    """Run each capability's quick form under ``out``; return the run directories."""
    root = prepare_run_dir(out)
    print("== 1. trigger lab (Ran-Milo 2026): 1x1 and 2x2 attention-only models, softmax vs ReLU")
    trigger_dir = root / "trigger"
    summary = trigger_lab.run_lab(trigger_lab.paper_configs([0], TriggerConfig(), shapes=trigger_lab.QUICK_SHAPES), str(trigger_dir))
    print(report.trigger_table(summary["runs"]))
    construction = trigger_lab.construction_report(TriggerConfig().task, str(trigger_dir / "relu-construction"))
    print(f"hand-built ReLU solution: max |error| {construction['max_abs_error']:.1e} on {construction['sequences']} sequences, "
          f"non-trigger rows exactly zero: {construction['non_trigger_rows_exactly_zero']}")
    return [trigger_dir]
