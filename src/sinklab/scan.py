"""The scanner: where a model's sinks are and what drives them.

``record_subject`` runs a model over token ids with the recorder attached (reduce while
recording); ``summarise`` turns the :class:`~sinklab.recorder.Record` into the documented
``summary.json`` metrics; ``run_scan`` is ``sinklab scan``: load, record, summarise, plot, write.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

import torch
from safetensors.torch import save_file
from tqdm.auto import tqdm

from . import metrics, report
from .errors import check
from .hf import QUERY_CHUNK
from .hooks import hook_name
from .inputs import Inputs, InputSpec, build_inputs
from .memory import TRIM_FROM_TOKENS, trim_heap
from .recorder import Record, Recorder, RecordOptions
from .runs import atomic_path, prepare_run_dir, write_json
from .subjects import HFSubject, Subject


@dataclass
class MetricSettings:
    """Thresholds of the metrics, all written to the output next to the values."""

    eps: float = 0.3  # Gu et al. sink threshold
    sink_k: int = 1  # key position of Sink_k^eps, 1-indexed as in Gu et al. (1 = the first token)
    min_query: int = 1  # first query position averaged in the first-token mass
    massive_absolute: float = 100.0  # Sun et al. 2024
    massive_relative: float = 1000.0
    super_min_ratio: float = 100.0  # super neuron: mean |a| at position 0 / mean |a| elsewhere
    super_min_activation: float = 100.0  # ... and mean |a| at position 0 at least this
    secondary_top: int = 5

    def __post_init__(self) -> None:
        check(0 < self.eps < 1, f"--eps must lie in (0, 1), got {self.eps}")
        check(self.sink_k >= 1, f"--sink-k is 1-indexed and must be >= 1, got {self.sink_k}")
        check(self.min_query >= 0, f"--min-query must be >= 0, got {self.min_query}")


@dataclass
class ScanConfig:
    model: Optional[str] = None  # None: the built-in default (SmolLM2-135M-Instruct)
    inputs: InputSpec = field(default_factory=InputSpec)
    settings: MetricSettings = field(default_factory=MetricSettings)
    variance: Optional[bool] = None  # None: whenever the batch has at least 2 sequences
    query_chunk: int = QUERY_CHUNK
    tokens_per_pass: int = 8192
    trust_remote_code: bool = False
    out: str = "runs/scan"


def record_subject(subject: Subject, ids: torch.Tensor, options: RecordOptions, tokens_per_pass: int = 8192, extra_hooks=(), progress: bool = True) -> tuple[Record, torch.Tensor]:
    """Run ``subject`` over ``ids`` (N, T) with the recorder attached; return the record and the
    mean next-token loss (nats, over all predicted positions)."""
    recorder = Recorder(subject.n_layers, options)
    per_pass = max(1, tokens_per_pass // ids.shape[1])
    passes = math.ceil(ids.shape[0] / per_pass)
    bar = tqdm(total=passes * subject.n_layers, desc=f"scanning {ids.shape[0]}x{ids.shape[1]} tokens", unit="layer", disable=not progress)
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


def summarise(record: Record, settings: MetricSettings, subject: Subject, ids: torch.Tensor) -> dict:
    """Every scanner metric from ``record``, with the settings used (the summary.json body)."""
    alpha = record.alpha  # (L, H, T)
    k = settings.sink_k - 1
    check(k < record.tokens, f"--sink-k {settings.sink_k} is beyond the {record.tokens} scanned tokens")
    check(settings.min_query < record.tokens, f"--min-query {settings.min_query} is beyond the {record.tokens} scanned tokens")
    first = metrics.first_token_mass(record.first_column, settings.min_query)  # (L, H)
    sink_heads = alpha[..., k] > settings.eps  # (L, H)
    share_by_layer = sink_heads.double().mean(-1)
    down = [subject.down_proj_weight(layer) for layer in range(subject.n_layers)]
    return {
        "first_token_mass": first.tolist(),
        "first_token_mass_by_layer": first.mean(-1).tolist(),
        "sink_rate": {"k": settings.sink_k, "eps": settings.eps, "value": metrics.sink_rate(alpha[..., k], settings.eps), "tokens": record.tokens},
        "sink_share_by_layer": share_by_layer.tolist(),
        "sink_start_layer": _first_layer(share_by_layer >= 0.5),
        "first_token_mass_start_layer": _first_layer(first.mean(-1) >= 0.5),
        "secondary_sinks": _secondary(alpha, settings, subject, ids),
        "norms": _norms(record),
        "massive_activations": record.massive,
        "dominance_ratio_first": record.dominance[:, 0].tolist(),
        "dominance_ratio_rest": record.dominance[:, 1:].mean(-1).tolist(),
        "max_abs_first": record.max_abs[:, 0].tolist(),
        "max_abs_rest": record.max_abs[:, 1:].amax(-1).tolist(),
        "kurtosis": [metrics.nan_to_none(v) for v in record.kurtosis.tolist()],
        "super_neurons": _super_neurons(record, down, settings),
        "variance_by_position": record.variance.tolist() if record.variance is not None else None,
    }


def _first_layer(flags: torch.Tensor) -> Optional[int]:
    hits = flags.nonzero().flatten()
    return int(hits[0]) if hits.numel() else None


def _secondary(alpha: torch.Tensor, settings: MetricSettings, subject: Subject, ids: torch.Tensor) -> list[dict]:
    found = metrics.secondary_sinks(alpha, settings.secondary_top, exclude=settings.sink_k)
    return [
        {"position": pos, "alpha_mean": value, "tokens": subject.token_strings(ids[:3, pos].tolist())}
        for pos, value in found
    ]


def _norms(record: Record) -> dict:
    """Key and value norms at the first position against the mean over the others (the "no-op" account)."""
    return {
        name: {"first": t[:, 0].tolist(), "rest_mean": t[:, 1:].mean(-1).tolist()}
        for name, t in (("key", record.key_norm), ("value", record.value_norm))
    }


def _super_neurons(record: Record, down: Sequence[Optional[torch.Tensor]], s: MetricSettings) -> list[dict]:
    if record.act_first is None or record.act_rest is None:
        return []
    found = []
    for layer in range(record.act_first.shape[0]):
        found += metrics.super_neurons(record.act_first[layer], record.act_rest[layer], down[layer], layer, s.super_min_ratio, s.super_min_activation)
    return found


def scan_inputs(subject: Subject, spec: InputSpec) -> Inputs:
    return build_inputs(spec, subject.tokenizer, subject.max_positions, subject.vocab_size)


def run_scan(cfg: ScanConfig, subject: Optional[Subject] = None) -> dict:
    """``sinklab scan``: write config.json, summary.json, record.safetensors and figures to ``cfg.out``."""
    out = prepare_run_dir(cfg.out)
    if subject is None:
        from .hf import load_model

        subject = HFSubject(load_model(cfg.model, cfg.trust_remote_code), cfg.query_chunk)
    inputs = scan_inputs(subject, cfg.inputs)
    variance = cfg.variance if cfg.variance is not None else inputs.ids.shape[0] >= 2
    check(not variance or inputs.ids.shape[0] >= 2, "the variance curve needs --batch of at least 2 sequences")
    options = RecordOptions(variance=variance, patterns=inputs.tokens <= 256, massive_absolute=cfg.settings.massive_absolute, massive_relative=cfg.settings.massive_relative)
    write_json(out / "config.json", {**asdict(cfg), "model_name": subject.name})
    record, loss = record_subject(subject, inputs.ids, options, cfg.tokens_per_pass)
    summary = {
        "model": subject.name,
        "architecture": getattr(subject, "architecture", type(subject).__name__),
        "layers": subject.n_layers,
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
    summary["figures"] = report.scan_figures(summary, record, out)
    _save_record(record, out)
    write_json(out / "summary.json", summary)
    return summary


def _save_record(record: Record, out) -> None:
    """The reduced tensors, for analyses beyond the summary (safetensors, no pickle)."""
    tensors = {k: v.float().contiguous() for k, v in vars(record).items() if isinstance(v, torch.Tensor)}
    tensors.update({f"column{k}": v.float().contiguous() for k, v in record.columns.items()})
    with atomic_path(out / "record.safetensors") as tmp:
        save_file(tensors, str(tmp))


def scan_native(model, ids: torch.Tensor, settings: Optional[MetricSettings] = None, decode=None) -> dict:
    """The scanner's sink metrics for a native LM (used after ``sinklab pretrain``).

    Position 0 is the first token of each window, or the first learned sink token when the model
    prepends them.
    """
    from .subjects import NativeSubject

    subject = NativeSubject(model, tokenizer=_Decoder(decode) if decode else None)
    settings = settings or MetricSettings()
    record, loss = record_subject(subject, ids, RecordOptions(variance=ids.shape[0] >= 2), progress=False)
    full = summarise(record, settings, subject, ids)
    keys = ("first_token_mass", "first_token_mass_by_layer", "sink_rate", "sink_share_by_layer", "massive_activations",
            "dominance_ratio_first", "dominance_ratio_rest", "max_abs_first", "kurtosis", "super_neurons", "variance_by_position")
    return {"scan_tokens": record.tokens, "scan_sequences": record.sequences, "scan_loss": loss.item(), **{k: full[k] for k in keys}}


class _Decoder:
    """The one tokenizer method the scanner uses (decode), over a plain function."""

    def __init__(self, fn) -> None:
        self.decode = fn
