"""The scanner: sinks, massive activations, super neurons and variance in a real model.

Its public API (used by ``intervene``, ``pretrain`` and ``stream``): inputs, the recorder that
reduces while recording, the metric settings and summary, and the scan capabilities (``SCAN``,
``COMPARE``) that the one pipeline runs.
"""

from .compare import COMPARE, CompareConfig, label_of, largest_massive_activation
from .frame import SCAN_TABLES, compare_rows, head_rows
from .inputs import BOS_CHOICES, Inputs, InputSpec, build_inputs, renamed_max_tokens
from .metrics import norm_ratio_first, sink_rate, super_neurons
from .recorder import Record, Recorder, RecordOptions
from .run import SCAN, ScanConfig, record_subject, scan_inputs, scan_native
from .summary import SUMMARY_ENTRIES, MetricSettings, summarise

__all__ = [
    "BOS_CHOICES",
    "COMPARE",
    "SCAN",
    "SCAN_TABLES",
    "SUMMARY_ENTRIES",
    "CompareConfig",
    "InputSpec",
    "Inputs",
    "MetricSettings",
    "Record",
    "RecordOptions",
    "Recorder",
    "ScanConfig",
    "build_inputs",
    "compare_rows",
    "head_rows",
    "label_of",
    "largest_massive_activation",
    "record_subject",
    "renamed_max_tokens",
    "scan_inputs",
    "scan_native",
    "norm_ratio_first",
    "sink_rate",
    "summarise",
    "super_neurons",
]
