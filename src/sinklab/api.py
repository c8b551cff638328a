"""Notebook entry points: every capability on a model object the caller already loaded, results in
memory (``.summary`` and ``.frame()``), nothing written unless ``out`` is given.

Each is a thin layer over the capability's own runner and config, with their defaults: the
command line and these functions compute the same summary. The model stays where it is (any
device, dtype or device map); inputs follow it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from .adapt import PrefixConfig, adapt_rows, run_sink_prefix
from .core.results import RunResult
from .intervene import InterveneConfig, intervene_rows, measure_intervene, run_intervene
from .models.subjects import Subject
from .scan import InputSpec, MetricSettings, ScanConfig, measure_scan, run_scan, scan_rows
from .stream import StreamConfig, check_one_pass, measure_stream, run_stream, stream_rows


def _where(out: Optional[str]) -> Optional[Path]:
    return Path(out) if out is not None else None


def scan_model(model, tokenizer=None, text: Optional[str] = None, max_tokens: int = 64, batch: int = 1, out: Optional[str] = None,
               bos: str = "auto", settings: Optional[MetricSettings] = None) -> RunResult:
    """Scan a loaded model for sinks, massive activations and super neurons (``sinklab scan``).

    ``text``: the string to scan (None: windows of the default Shakespeare corpus); ``max_tokens``
    per sequence, BOS included; ``batch`` sequences; ``bos`` yes / no / auto (prepend the
    tokenizer's BOS when it has one). Metrics are accumulated in float32 whatever the model's
    dtype. ``.frame()``: one row per (layer, head) with ``layer``, ``head``, ``first_token_mass``,
    ``sink_alpha`` and ``is_sink``. With ``out``, the run directory ``sinklab scan`` writes."""
    subject = Subject.from_model(model, tokenizer)
    cfg = ScanConfig(inputs=InputSpec(prompt=text, max_tokens=max_tokens, batch=batch, bos=bos), settings=settings or MetricSettings(), out=out)
    summary = run_scan(cfg, subject) if out is not None else measure_scan(cfg, subject)[0]
    return RunResult(summary, scan_rows, _where(out))


def intervene_model(model, tokenizer=None, interventions: Optional[dict] = None, text: Optional[str] = None, max_tokens: int = 64,
                    batch: int = 1, lams: Sequence[float] = InterveneConfig.lams, out: Optional[str] = None, bos: str = "auto") -> RunResult:
    """Interventions against a baseline (``sinklab intervene``): ``interventions`` maps an option of
    the registry to its value, as on the command line (``{"mask_self": [10], "suppress_sink": True}``);
    ``lams`` are the strengths swept by amplify and scale. ``.frame()``: one row per (experiment,
    layer) with ``share_at_k``, ``share_at_0``, ``loss`` and ``ppl``. To edit your own forward or
    ``generate`` instead, use :func:`sinklab.intervene.applied`."""
    subject = Subject.from_model(model, tokenizer)
    cfg = InterveneConfig(inputs=InputSpec(prompt=text, max_tokens=max_tokens, batch=batch, bos=bos), edits=dict(interventions or {}),
                          lams=tuple(lams), out=out)
    summary = run_intervene(cfg, subject) if out is not None else measure_intervene(cfg, subject)[0]
    return RunResult(summary, intervene_rows, _where(out))


def stream_model(model, tokenizer=None, tokens: int = StreamConfig.tokens, sinks: int = StreamConfig.sinks, window: int = StreamConfig.window,
                 policies: Sequence[str] = StreamConfig.policies, corpus: str = StreamConfig.corpus, out: Optional[str] = None, **options) -> RunResult:
    """Perplexity, speed and memory of cache policies over a long stream (``sinklab stream``);
    ``options`` are the other fields of :class:`~sinklab.stream.StreamConfig`. ``.frame()``: one row
    per (policy, chunk of the stream) with ``ppl`` and ``ms_per_token``. As on the command line, one-pass
    scores that leave a real cache's tolerance raise :class:`~sinklab.core.errors.NumericalCheckFailed`."""
    subject = Subject.from_model(model, tokenizer)
    cfg = StreamConfig(corpus=corpus, tokens=tokens, sinks=sinks, window=window, policies=tuple(policies), out=out, **options)
    if out is not None:
        return RunResult(run_stream(cfg, subject), stream_rows, _where(out))
    summary = measure_stream(cfg, subject)[0]
    check_one_pass(summary)
    return RunResult(summary, stream_rows, None)


def adapt_model(model, tokenizer=None, corpus: str = PrefixConfig.corpus, tokens: int = PrefixConfig.tokens, windows: int = PrefixConfig.windows,
                out: Optional[str] = None, **options) -> RunResult:
    """The sink as a cached prefix and its quantization payoff (``sinklab adapt --sink-prefix``);
    ``options`` are the other fields of :class:`~sinklab.adapt.PrefixConfig` (``schemes``, ``bos``,
    ...). ``.frame()``: one row per (setting, condition) with ``ppl``. Fine-tuning a mitigation
    (``sinklab adapt --to``) keeps checkpoints, so it runs through ``sinklab.adapt.run_finetune``
    with a run directory. A prefix whose logits leave the exactness tolerance raises
    :class:`~sinklab.core.errors.NumericalCheckFailed`."""
    subject = Subject.from_model(model, tokenizer)
    cfg = PrefixConfig(corpus=corpus, tokens=tokens, windows=windows, out=out, **options)
    return RunResult(run_sink_prefix(cfg, subject, progress=True), adapt_rows, _where(out))
