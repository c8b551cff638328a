"""``sinklab demo`` (what ``make demo`` runs): three quick runs, in a few minutes (pretrain,
intervene on a pretrained model and adapt are not among them).

1. the trigger lab (Ran-Milo 2026): 1x1 and 2x2 models, softmax against ReLU, plus the exact
   hand-built ReLU solution and the BOS-sink removal that breaks softmax but not ReLU;
2. a brief scan of the default model (SmolLM2-135M-Instruct) on Shakespeare;
3. a short stream past a small cache: sinks + window against the window alone.
"""

from __future__ import annotations

from pathlib import Path

from ..core import html, pipeline
from ..intervene import TRIGGER_EDITS, TriggerEditConfig
from ..intervene import report as intervene_report
from ..scan import SCAN, ScanConfig
from ..scan import report as scan_report
from ..stream import STREAM, StreamConfig
from ..stream import report as stream_report
from ..trigger import CONSTRUCT, LAB, QUICK_SHAPES, ConstructConfig, LabConfig, TriggerConfig, paper_configs
from ..trigger import report as trigger_report

DEFAULT_OUT = "runs/demo"


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="the trigger lab, a scan and a stream, briefly, on the built-in defaults (make demo)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"root directory of the demo runs (default {DEFAULT_OUT})")
    p.set_defaults(handler=demo_command, on_interrupt="run it again: the trigger lab resumes, the rest starts over")


def demo_command(args) -> int:
    dirs = run_demo(args.out)
    print("\noutputs:")
    for d in dirs:
        print(f"  {d}/summary.json (+ figures)")
    print("\ninteractive reports (open in a browser; they work offline):")
    for d in dirs:
        print(f"  {html.report_path(d)}")
    return 0


def run_demo(out: str) -> list[Path]:
    """Run the trigger lab, the scan and the stream quickly under ``out`` (each its own run
    directory, replaced each time); return the run directories."""
    root = Path(out)
    trigger_dir, scan_dir, stream_dir = root / "trigger", root / "scan", root / "stream"

    _section("1. trigger lab (Ran-Milo 2026): attention-only models, softmax vs ReLU")
    lab = pipeline.run(LAB, LabConfig(tuple(paper_configs([0], TriggerConfig(), shapes=QUICK_SHAPES))), out=trigger_dir)
    print(trigger_report.trigger_table(lab.summary["runs"]))
    built = pipeline.run(CONSTRUCT, ConstructConfig(), out=trigger_dir / "relu-construction", overwrite=True).summary[
        "relu_construction"
    ]
    print(
        f"\nhand-built ReLU solution: max |error| {built['max_abs_error']:.1e} over {built['sequences']} sequences; "
        f"non-trigger rows exactly zero: {built['non_trigger_rows_exactly_zero']}"
    )
    edits = pipeline.run(
        TRIGGER_EDITS, TriggerEditConfig(lab_dir=str(trigger_dir)), out=trigger_dir / "suppress-sink", overwrite=True
    )
    print("\nremoving the BOS sink (score bias -inf on position 0):")
    print(intervene_report.trigger_intervention_table(edits.summary["results"]))

    _section("2. scanner: sinks, massive activations and super neurons of SmolLM2-135M-Instruct")
    scanned = pipeline.run(SCAN, ScanConfig(), out=scan_dir, overwrite=True)
    print(scan_report.scan_headline(scanned.summary))

    _section("3. streaming (StreamingLLM): 4 sinks + 60 recent tokens against 64 recent tokens")
    streamed = pipeline.run(
        STREAM,
        StreamConfig(tokens=768, sinks=4, window=60, policies=("window", "sink"), chunk=128),
        out=stream_dir,
        overwrite=True,
    )
    print(stream_report.stream_table(streamed.summary))
    return [trigger_dir, trigger_dir / "suppress-sink", scan_dir, stream_dir]


def _section(title: str) -> None:
    print(f"\n== {title}", flush=True)
