"""The scanner: sinks, massive activations, super neurons and variance in a real model.

Its public API (used by ``intervene``, ``pretrain`` and ``stream``): inputs, the recorder that
reduces while recording, the metric settings and summary, and the runners.
"""

from .compare import largest_massive_activation, run_compare
from .frame import compare_rows, scan_rows
from .inputs import Inputs, InputSpec, build_inputs
from .metrics import sink_rate, super_neurons
from .recorder import Record, Recorder, RecordOptions
from .run import ScanConfig, measure_scan, record_subject, run_scan, scan_inputs, scan_native, write_scan
from .summary import SUMMARY_ENTRIES, MetricSettings, summarise

__all__ = [
    "SUMMARY_ENTRIES",
    "InputSpec",
    "Inputs",
    "MetricSettings",
    "Record",
    "RecordOptions",
    "Recorder",
    "ScanConfig",
    "build_inputs",
    "compare_rows",
    "largest_massive_activation",
    "measure_scan",
    "record_subject",
    "run_compare",
    "run_scan",
    "scan_inputs",
    "scan_native",
    "scan_rows",
    "sink_rate",
    "summarise",
    "super_neurons",
    "write_scan",
]
