"""``sinklab demo`` (what ``make demo`` runs): three quick runs, in a few minutes (pretrain,
intervene on a pretrained model and adapt are not among them).

1. the trigger lab (Ran-Milo 2026): 1x1 and 2x2 models, softmax against ReLU, plus the exact
   hand-built ReLU solution and the BOS-sink removal that breaks softmax but not ReLU;
2. a brief scan of the default model (SmolLM2-135M-Instruct) on Shakespeare;
3. a short stream past a small cache: sinks + window against the window alone.
"""

from __future__ import annotations

from pathlib import Path

from ..core import html
from ..core.runs import prepare_run_dir
from ..intervene import InterveneConfig, run_trigger_interventions
from ..intervene import report as intervene_report
from ..scan import ScanConfig, run_scan
from ..scan import report as scan_report
from ..stream import StreamConfig, run_stream
from ..stream import report as stream_report
from ..trigger import QUICK_SHAPES, TriggerConfig, construction_report, paper_configs, run_lab
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
    """Run the trigger lab, the scan and the stream quickly under ``out``; return the run directories."""
    root = prepare_run_dir(out)
    trigger_dir, scan_dir, stream_dir = root / "trigger", root / "scan", root / "stream"

    _section("1. trigger lab (Ran-Milo 2026): attention-only models, softmax vs ReLU")
    summary = run_lab(paper_configs([0], TriggerConfig(), shapes=QUICK_SHAPES), str(trigger_dir))
    print(trigger_report.trigger_table(summary["runs"]))
    built = construction_report(TriggerConfig().task, str(trigger_dir / "relu-construction"))
    print(f"\nhand-built ReLU solution: max |error| {built['max_abs_error']:.1e} over {built['sequences']} sequences; "
          f"non-trigger rows exactly zero: {built['non_trigger_rows_exactly_zero']}")
    edits = run_trigger_interventions(InterveneConfig(out=str(trigger_dir / "suppress-sink")), str(trigger_dir))
    print("\nremoving the BOS sink (score bias -inf on position 0):")
    print(intervene_report.trigger_intervention_table(edits["results"]))

    _section("2. scanner: sinks, massive activations and super neurons of SmolLM2-135M-Instruct")
    scanned = run_scan(ScanConfig(out=str(scan_dir)))
    print(scan_report.scan_headline(scanned))

    _section("3. streaming (StreamingLLM): 4 sinks + 60 recent tokens against 64 recent tokens")
    streamed = run_stream(StreamConfig(tokens=768, sinks=4, window=60, policies=("window", "sink"), chunk=128, out=str(stream_dir)))
    print(stream_report.stream_table(streamed))
    return [trigger_dir, trigger_dir / "suppress-sink", scan_dir, stream_dir]


def _section(title: str) -> None:
    print(f"\n== {title}", flush=True)
