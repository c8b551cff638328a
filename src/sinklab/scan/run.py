"""``sinklab scan``: where a model's sinks are and what drives them.

``record_subject`` runs a model over token ids with the recorder attached (reduce while
recording); :func:`~.summary.summarise` turns the :class:`~.recorder.Record` into the documented
``summary.json``; :func:`measure` does both in memory and :func:`write` writes the data and
figures: the scan :class:`~sinklab.core.results.Capability` (``SCAN``) that the one pipeline runs
for ``sinklab scan`` and ``sinklab.scan_model`` alike.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar, Optional

import torch

from ..core.configs import setting
from ..core.errors import check
from ..core.hooks import hook_name
from ..core.memory import TRIM_FROM_TOKENS, trim_heap
from ..core.progress import PhaseClock, progress_bar
from ..core.results import Capability, RunContext, RunResult, register, stamped
from ..core.schemas import REGISTERED_KEYS
from ..models.hf import MODEL_HELP, QUERY_CHUNK, LoadOptions
from ..models.subjects import HFSubject, NativeSubject, Subject
from . import page, plots
from .frame import SCAN_TABLES
from .inputs import Inputs, InputSpec, build_inputs, renamed_max_tokens
from .recorder import Record, Recorder, RecordOptions
from .summary import SUMMARY_ENTRIES, MetricSettings, summarise

TOKENS_PER_PASS = 8192  # tokens run through a model per forward pass


def every_layer(saved: dict) -> dict:
    """Scans before config version 2 (``--layers``) recorded every layer."""
    return {**saved, "layers": None}


@dataclass
class ScanConfig:
    """``sinklab scan``'s settings (and ``sinklab.scan_model``'s keyword arguments)."""

    VERSION: ClassVar[int] = 2
    MIGRATIONS: ClassVar[dict] = {0: lambda saved: {**saved, "inputs": renamed_max_tokens(saved["inputs"])}, 1: every_layer}

    model: Optional[str] = setting(None, help=MODEL_HELP, cli=False)
    inputs: InputSpec = field(default_factory=InputSpec)
    settings: MetricSettings = field(default_factory=MetricSettings)
    variance: Optional[bool] = setting(
        None,
        help="the variance-by-position curve: auto (when the batch has at least 2 sequences), on or off",
        choices=("auto", "on", "off"),
        parse=lambda text: {"auto": None, "on": True, "off": False}[text],
        shown="auto",
    )
    layers: Optional[tuple[int, ...]] = setting(
        None,
        metavar="L[,L...]",
        shown="all",
        help="record only these layers, indices from 0 (a large model's scan in less memory and time: the forward "
        "still runs every layer; the others' figures are null)",
    )
    query_chunk: int = setting(QUERY_CHUNK, help="query rows attended at once; bounds memory on long inputs", result=False)
    tokens_per_pass: int = setting(TOKENS_PER_PASS, help="tokens run through the model per forward pass", cli=False)
    load: LoadOptions = field(default_factory=LoadOptions)


def record_subject(
    subject: Subject,
    ids: torch.Tensor,
    options: RecordOptions,
    tokens_per_pass: int = TOKENS_PER_PASS,
    extra_hooks=(),
    progress: bool = True,
) -> tuple[Record, torch.Tensor]:
    """Run ``subject`` over ``ids`` (N, T) with the recorder attached; return the record and the
    mean next-token loss (nats, over all predicted positions)."""
    recorder = Recorder(subject.n_layers, options)
    positions = ids.shape[1] + getattr(subject, "prefix_positions", 0)
    recorder.reserve(subject.n_heads, positions, [subject.layer_device(i) for i in range(subject.n_layers)])
    per_pass = max(1, tokens_per_pass // ids.shape[1])
    passes = math.ceil(ids.shape[0] / per_pass)
    bar = progress_bar(
        total=passes * subject.n_layers, desc=f"scanning {ids.shape[0]}x{ids.shape[1]} tokens", unit="layer", enabled=progress
    )
    long_input = ids.shape[1] >= TRIM_FROM_TOKENS

    def after_layer(h, point) -> None:
        bar.update(1)
        if long_input:
            trim_heap()

    tick = [(hook_name("*", "hook_resid_post"), after_layer)]
    total_loss, count = 0.0, 0
    try:
        with subject.session(), subject.hooks.attached([*extra_hooks, *recorder.hooks(), *tick]):
            for start in range(0, ids.shape[0], per_pass):
                batch = ids[start : start + per_pass]
                recorder.count(batch.shape[0])
                total_loss += subject.token_nll(batch).sum().item()
                count += batch[:, 1:].numel()
    finally:
        bar.close()
    return recorder.result(), torch.tensor(total_loss / max(count, 1))


def scan_inputs(subject: Subject, spec: InputSpec) -> Inputs:
    return build_inputs(spec, subject.tokenizer, subject.max_positions, subject.vocab_size)


def measure(cfg: ScanConfig, context: RunContext = RunContext()) -> RunResult:
    """Load (unless ``subject`` is given), record and summarise, in memory: the summary (what
    summary.json holds) and the data (the record's reduced tensors and the first sequences'
    token strings)."""
    clock = PhaseClock()
    with clock.phase("load"):
        subject = context.subject or HFSubject(cfg.load.load(cfg.model), cfg.query_chunk)
        inputs = scan_inputs(subject, cfg.inputs)
    cfg.settings.check_tokens(inputs.tokens)
    variance = cfg.variance if cfg.variance is not None else inputs.ids.shape[0] >= 2
    check(not variance or inputs.ids.shape[0] >= 2, "the variance curve needs --batch of at least 2 sequences")
    for layer in cfg.layers or ():
        check(0 <= layer < subject.n_layers, f"--layers: layer {layer} does not exist (the model has {subject.n_layers} layers)")
    options = RecordOptions(
        variance=variance,
        patterns=inputs.tokens <= 256,
        massive_absolute=cfg.settings.massive_absolute,
        massive_relative=cfg.settings.massive_relative,
        layers=cfg.layers,
    )
    with clock.phase("record"):
        record, loss = record_subject(subject, inputs.ids, options, cfg.tokens_per_pass)
    with clock.phase("summarise"):
        summary = {
            "model": subject.name,
            "architecture": getattr(subject, "architecture", type(subject).__name__),
            **subject.facts(),
            "layers": subject.n_layers,
            **({"recorded_layers": sorted(set(cfg.layers))} if cfg.layers else {}),
            "heads": record.first_column.shape[1],
            "tokens": inputs.tokens,
            "sequences": inputs.ids.shape[0],
            "bos_prepended": inputs.bos_prepended,
            "inputs": inputs.description,
            "settings": asdict(cfg.settings),
            "loss": loss.item(),
            "ppl": math.exp(min(loss.item(), 50.0)),
            **summarise(record, cfg.settings, subject, inputs.ids),
        }
    summary["seconds"] = clock.seconds
    return RunResult(stamped("scan", summary), plots.data_from(record, scanned_tokens(subject, inputs.ids)))


def write(out: Path, result: RunResult) -> list[str]:
    """The record and the token strings (the figures, summary.json and the page are the pipeline's)."""
    plots.save_data(out, result.data)
    return [plots.RECORD_FILE, plots.TOKENS_FILE]


TOKEN_ROWS = 4  # sequences whose token strings are kept for the report's axes and hovers


def scanned_tokens(subject: Subject, ids: torch.Tensor) -> dict:
    """The ids and token strings of the first sequences (what the report labels its axes with)."""
    rows = ids[:TOKEN_ROWS].tolist()
    return {"ids": rows, "strings": [subject.token_strings(row) for row in rows]}


#: The entries a pretraining run's summary carries (the rest need a tokenizer or are plotted only).
NATIVE_KEYS = (
    "first_token_mass",
    "first_token_mass_by_layer",
    "sink_rate",
    "sink_share_by_layer",
    "massive_activations",
    "dominance_ratio_first",
    "dominance_ratio_rest",
    "max_abs_first",
    "max_abs_rest",
    "kurtosis",
    "super_neurons",
    "variance_by_position",
    "null_mass",
    "extreme_token_triad",
    "max_over_median",
    "attention_zero_share",
)


def scan_native(model, ids: torch.Tensor, settings: Optional[MetricSettings] = None, decode=None) -> dict:
    """The scanner's sink metrics for a native LM (used after ``sinklab pretrain``).

    Position 0 is the first token of each window, or the first learned sink token when the model
    prepends them.
    """
    subject = NativeSubject(model, tokenizer=_Decoder(decode) if decode else None)
    settings = settings or MetricSettings()
    columns = tuple(range(max(1, subject.prefix_positions)))  # the sink tokens' columns, for the null mass
    record, loss = record_subject(subject, ids, RecordOptions(variance=ids.shape[0] >= 2, key_columns=columns), progress=False)
    return {
        "scan_tokens": record.tokens,
        "scan_sequences": record.sequences,
        "scan_loss": loss.item(),
        **summarise(record, settings, subject, ids, NATIVE_KEYS),
    }


class _Decoder:
    """The one tokenizer method the scanner uses (decode), over a plain function."""

    def __init__(self, fn) -> None:
        self.decode = fn


#: A metric registered in one file (``@entry``) is a key the scan schema takes.
REGISTERED_KEYS["scan"] = lambda: list(SUMMARY_ENTRIES)

SCAN = register(
    Capability(
        "scan",
        ScanConfig,
        measure,
        write,
        tables=SCAN_TABLES,
        write_page=page.write,
        read_data=plots.read_data,
        figures=lambda result: plots.figures(result.summary, result.data),
        sections=page.sections,
    )
)
