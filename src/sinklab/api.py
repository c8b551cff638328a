"""The notebook face of every capability: a model in, a :class:`RunResult` out
(``.summary``, ``.data``, ``.frame()``, ``.figures()``, ``.page()``), nothing written unless
``out`` is given.

Every function takes the model in the same forms: a transformers causal LM with its tokenizer
(``scan_model(model, tokenizer)``), what :func:`sinklab.load_model` returns (a
:class:`~sinklab.models.hf.LoadedModel`), a sinklab :class:`~sinklab.models.subjects.Subject`, or a
model's name (a folder, a .gguf file, a Hub id; None: the built-in default), loaded as the command
line loads it (the loading settings, ``dtype``, ``device``, ..., then apply).

Each function is the command line's run through the same pipeline (:func:`sinklab.core.pipeline.run`)
with the same configuration class, so the keyword arguments are the command's settings, with
the same names and defaults (``help(sinklab.scan_model)`` lists them), the same ``--out`` policy
applies to ``out=`` (a finished run of the same configuration is read back; another configuration
is refused; ``overwrite=True`` replaces it) and the summaries are equal. The model stays where it
is (any device, dtype or device map); inputs follow it.
"""

from __future__ import annotations

import inspect
import os
import warnings
from dataclasses import replace
from typing import Any, Optional, Sequence

from .adapt import ADAPT, PrefixConfig
from .bench import BENCH, BENCH_COMPARE, BenchCompareConfig, BenchConfig
from .compress import COMPRESS, CompressConfig, check_read
from .core import configs, keywords, pipeline
from .core.errors import check
from .core.results import Capability, RunResult, load_result
from .intervene import INTERVENE, InterveneConfig, Intervention, check_accuracy_read
from .models.hf import device_name, load_model, resolved_config
from .models.subjects import Subject
from .scan import COMPARE, SCAN, CompareConfig, ScanConfig, label_of
from .stream import STREAM, StreamConfig
from .tune import TUNE, TuneConfig, check_method_read

__all__ = [
    "adapt_model",
    "bench_models",
    "compare_bench",
    "compress_model",
    "intervene_model",
    "load_model",
    "load_result",
    "scan_model",
    "scan_models",
    "stream_model",
    "tune_model",
]

#: Old spellings the notebook functions still take (old name -> name).
ALIASES = {"max_tokens": "tokens"}
#: Settings a model object makes moot: where and how to load a model, and which one.
LOADING = tuple(x.name for x in configs.leaves(ScanConfig) if x.path[0] in ("model", "load"))


def by_name(model: Any) -> bool:
    """Whether ``model`` names a model to load (a folder, a .gguf file, a Hub id; None: the
    default) rather than being one."""
    return model is None or isinstance(model, (str, os.PathLike))


def subject_of(model: Any, tokenizer: Any = None, query_chunk: Optional[int] = None) -> Subject:
    """The model a notebook function was given, as sinklab measures it: a transformers causal LM
    with its tokenizer, what :func:`sinklab.load_model` returns, a :class:`Subject`, or a native
    :class:`~sinklab.models.native.Transformer`."""
    return Subject.from_model(model, tokenizer, query_chunk=query_chunk)


def _run(
    capability: Capability, model: Any, tokenizer: Any, settings: dict, out: Optional[str], overwrite: bool, what: str, **fixed
) -> RunResult:
    """Build the configuration from the keyword arguments, hand the model over, run the pipeline.
    A model named (a folder, a .gguf file, a Hub id; None: the default) is loaded as the command
    line loads it, with the loading settings given; for a model object, how to load a model is
    refused: it is loaded (the config records how)."""
    if by_name(model):
        check(tokenizer is None, f"{what}: a tokenizer goes with a model object; {model!r} names a model, loaded with its own")
        named = keywords.from_kwargs(capability.config, {**settings, **fixed, "model": model}, ALIASES, what)
        cfg, subject = resolved_config(named), None
    else:
        _refuse_loading_for_objects(settings, [model], what)
        cfg = keywords.from_kwargs(capability.config, {**settings, **fixed}, ALIASES, what)
        subject = subject_of(model, tokenizer, getattr(cfg, "query_chunk", None))
        cfg = configs.build(capability.config, {**configs.flat(cfg), **recorded_model(subject)})
    result = pipeline.run(capability, cfg, subject, out=out, overwrite=overwrite)
    _warn_if_reused(result)
    return result


def _refuse_loading_for_objects(settings: dict, subjects: Sequence, what: str) -> None:
    """How to load a model, given beside a model object: refused (the object is loaded already;
    beside named models it would load only those, and the run would record it for the object too)."""
    moot = sorted(set(settings) & set(LOADING))
    check(
        not moot or all(s is None for s in subjects),
        f"{what}: {', '.join(moot)} say how to load a model, and a model given here is loaded already: give them "
        "to sinklab.load_model, or give the model by name",
    )


def recorded_model(subject: Subject) -> dict:
    """Which model a config records, and how it was loaded, as the command line records the same
    model (so that a run is recognised from either face): what :func:`sinklab.load_model` was asked
    (the model as named, the load options resolved here) for what it returned; for another model
    object, its name, its device as the command line names it, its dtype and its Hub commit."""
    request = getattr(getattr(subject, "loaded", None), "request", None)
    if request is not None:
        return dict(request)
    facts = subject.facts()
    return {"model": subject.name, "device": device_name(facts["device"]), "dtype": facts["dtype"], "revision": facts["revision"]}


def _warn_if_reused(result: RunResult) -> None:
    if result.reused:
        warnings.warn(
            f"{result.out} already holds this run, finished: its results were read back, not measured again "
            "(overwrite=True runs it again)",
            stacklevel=3,
        )


def scan_model(model, tokenizer=None, *, out: Optional[str] = None, overwrite: bool = False, **settings) -> RunResult:
    """Scan a loaded model for sinks, massive activations and super neurons (``sinklab scan``).

    ``.frame()`` (table ``heads``): one row per (layer, head) with ``first_token_mass`` (the mean
    attention weight queries give to position 0, a fraction in [0, 1], averaged over the queries
    from ``min_query`` on and the sequences), ``sink_alpha`` and ``is_sink``; ``.frame("layers")``,
    ``.frame("massive_activations")``, ``.frame("super_neurons")``. ``.data["record"]``: the
    reduced tensors ((L, H, T) per-key statistics and more). Metrics are accumulated in float32
    whatever the model's dtype. Settings (the command's flags; ``max_tokens`` is the old name of
    ``tokens``):
    """
    return _run(SCAN, model, tokenizer, settings, out, overwrite, "scan_model")


def scan_models(models, *, out: Optional[str] = None, overwrite: bool = False, launcher=None, **settings) -> RunResult:
    """Scan several models and compare them (``sinklab scan A B ...``): ``models`` is a sequence of
    model names (folders, .gguf files, Hub ids; None: the default) or of loaded models (a model
    with its tokenizer as a pair, what :func:`sinklab.load_model` returns, a :class:`Subject`), or a
    dict of them by the label you give each. With ``out``, each model's scan is its own run
    directory under ``out/models/``; named models run as jobs on ``launcher``
    (:class:`~sinklab.core.launchers.LauncherSettings`; default this machine). ``.frame()``: one
    row per (model, layer) with ``first_token_mass``. Settings: those of :func:`scan_model`.
    """
    items = list(models.items()) if isinstance(models, dict) else [(None, m) for m in models]
    names, labels, subjects = [], [], []
    for label, model in items:
        subject = (
            None
            if model is None or isinstance(model, (str, os.PathLike))
            else subject_of(*(model if isinstance(model, tuple) else (model,)))
        )
        names.append(recorded_model(subject)["model"] if subject is not None else None if model is None else str(model))
        labels.append(label if label is not None else label_of(names[-1]))
        subjects.append(subject)
    _refuse_loading_for_objects(settings, subjects, "scan_models")
    scan = replace(keywords.from_kwargs(ScanConfig, settings, ALIASES, "scan_models"), model=names[0])  # as the command line's
    if launcher is None or launcher.runs_here:  # the models by name load here
        scan = resolved_config(scan)
    cfg = CompareConfig(models=tuple(names), labels=tuple(labels), scan=scan)
    loaded = subjects if any(s is not None for s in subjects) else None
    result = pipeline.run(COMPARE, cfg, loaded, out=out, overwrite=overwrite, launcher=launcher)
    _warn_if_reused(result)
    return result


def intervene_model(
    model, tokenizer=None, interventions: Sequence = (), *, out: Optional[str] = None, overwrite: bool = False, **settings
) -> RunResult:
    """Interventions against a baseline (``sinklab intervene``): ``interventions`` are the values
    :func:`sinklab.applied` takes (``[MaskSelf(10), VarianceAmplify(5, 4.0)]``, or one of
    them), one run each (a tuple of them is applied together; ``sinklab.intervene.interventions_for`` turns
    command-line options into them). ``.frame()``: one row per (experiment, layer) with
    ``share_at_k`` and ``share_at_0`` (the attention weight later queries give to k and to 0, in
    [0, 1], averaged over heads, queries and sequences), before and after, and the next-token
    ``loss`` (nats) and ``ppl``. Settings:
    """
    given: Any = interventions
    if not given and isinstance(tokenizer, (Intervention, list, tuple)):  # intervene_model(lm, [MaskSelf(10)])
        given, tokenizer = tokenizer, None
    asked = (given,) if isinstance(given, Intervention) else given
    check_accuracy_read(settings, settings.get("accuracy", InterveneConfig.accuracy))  # also one at its default
    return _run(INTERVENE, model, tokenizer, settings, out, overwrite, "intervene_model", interventions=asked)


def stream_model(model, tokenizer=None, *, out: Optional[str] = None, overwrite: bool = False, **settings) -> RunResult:
    """Perplexity, speed and memory of cache policies over a long stream (``sinklab stream``).
    ``.frame()``: one row per (policy, chunk of the stream) with ``ppl`` and ``ms_per_token``;
    ``.data["nll"]``: each policy's next-token NLL (nats) by position. One-pass scores that leave
    a real cache's tolerance raise :class:`~sinklab.core.errors.NumericalCheckFailed` (with
    ``out``, the run is marked failed and kept). Settings:
    """
    return _run(STREAM, model, tokenizer, settings, out, overwrite, "stream_model")


def adapt_model(model, tokenizer=None, *, out: Optional[str] = None, overwrite: bool = False, **settings) -> RunResult:
    """The sink as a cached prefix and its quantization payoff (``sinklab adapt --sink-prefix``).
    ``.frame()``: one row per (setting, condition) with ``ppl``; ``.data["prefixes"]``: the
    :class:`~sinklab.adapt.SinkPrefix` values computed. Fine-tuning a mitigation (``sinklab adapt
    --to``) keeps checkpoints, so it runs from the command line with a run directory. A prefix
    whose logits leave the exactness tolerance raises :class:`~sinklab.core.errors.NumericalCheckFailed`.
    Settings:
    """
    return _run(ADAPT, model, tokenizer, settings, out, overwrite, "adapt_model")


def compress_model(model, tokenizer=None, *, out: Optional[str] = None, overwrite: bool = False, **settings) -> RunResult:
    """The keep-sink table of KV-cache presses (``sinklab compress``): every press of
    ``presses`` at every ratio (the fraction of the context's keys removed) with each
    ``keep_sinks`` setting, judged by the perplexity of the text after a compressed context and by
    passkey retrieval, against the full cache. ``.frame()``: one row per cell, presses' and
    quantizers' alike (``policy``, ``kind``, a press's ``ratio`` or a quantizer's ``bits``,
    ``keep_sinks``: a quantizer's protect, ``context``) with ``ppl_<text>``, ``ppl_ratio_<text>``
    (1: no loss), ``passkey_accuracy`` (in [0, 1]), ``key_logprob`` (nats), ``kept_fraction`` and
    ``bytes_ratio`` (``.frame("quantized")``: the quantizers' rows only);
    ``.frame("sink_effect")``: keeping sinks against none, paired. Naming ``presses`` runs those
    presses only, naming ``quantizers`` those quantizers only, naming neither the default grid of
    both. A context longer than the model's positions allow is refused before anything runs. To
    compress your own ``generate``: :func:`sinklab.applied`. ``budget``, ``every`` and
    ``decode_tokens`` are read only with ``during="decode"``, ``accuracy_shots`` and
    ``accuracy_test`` only with ``accuracy``: given without it, they are refused. Settings:
    """
    during, accuracy = settings.get("during", CompressConfig.during), settings.get("accuracy", CompressConfig.accuracy)
    check_read(settings, during, accuracy)
    return _run(COMPRESS, model, tokenizer, settings, out, overwrite, "compress_model")


def tune_model(model, tokenizer=None, *, out: Optional[str] = None, overwrite: bool = False, **settings) -> RunResult:
    """The sink as a lever for accuracy (``sinklab tune``): ``method`` zerotuning (the initial
    token's attention scaled per head; Han et al., ICLR 2026) or act (sinks after the first token
    calibrated; Yu et al., ICML 2024), chosen per task of ``tasks`` (BIG-bench names or task.json
    paths) on the validation split (``mode`` supervised: accuracy; unsupervised: output entropy) and
    judged against the untouched model on the test split by lm-evaluation-harness, example by
    example. ``.frame()``: one row per task with ``acc_untouched``, ``acc_tuned``, the paired
    ``acc_change`` with its 95 % interval, ``mcnemar_p`` and the gold answer's log-likelihood
    change; ``.frame("validation")``: every candidate tried; ``.data["tunings"][task]``: the tuning,
    for ``with sinklab.applied(model, tuning):``. Settings:
    """
    check_method_read(settings, settings.get("method", TuneConfig.method), settings.get("batch_size", TuneConfig.batch_size))
    return _run(TUNE, model, tokenizer, settings, out, overwrite, "tune_model")


def bench_models(models=(None,), *, out: Optional[str] = None, overwrite: bool = False, launcher=None, **settings) -> RunResult:
    """The sink benchmark (``sinklab bench``): every task of ``suite`` on each of ``models`` (a
    model or a sequence of them, in the forms every notebook function takes: names (folders, .gguf
    files, Hub ids; None: the default), what :func:`sinklab.load_model` returns, a transformers
    model with its tokenizer as a pair), each task measured through its capability with fixed
    inputs. With ``out``, one job per (model, task), named models' on ``launcher``
    (:class:`~sinklab.core.launchers.LauncherSettings`; default this machine) and model objects'
    in this process, finished jobs of named models kept and reused, and one results file per model
    under ``out/results/``. ``.frame()`` (table
    ``leaderboard``): one row per model, each task's headline metric (None where it does not
    apply); ``.frame("metrics")``: one row per (model, task, metric) with ``value``, ``spread``
    (the standard deviation, n - 1, over the ``n`` units named in ``over``: prompts, layers,
    chunks) and ``better``.
    Settings:
    """
    given = [models] if by_name(models) or not isinstance(models, (list, tuple)) else list(models)
    subjects = [None if by_name(m) else subject_of(*(m if isinstance(m, tuple) else (m,))) for m in given]
    _refuse_loading_for_objects(settings, subjects, "bench_models")
    names = tuple(
        recorded_model(subject)["model"] if subject is not None else None if m is None else str(m)
        for m, subject in zip(given, subjects)
    )
    cfg = keywords.from_kwargs(BenchConfig, {**settings, "models": names}, ALIASES, "bench_models")
    if launcher is None or launcher.runs_here:
        cfg = resolved_config(cfg)
    loaded = subjects if any(s is not None for s in subjects) else None
    result = pipeline.run(BENCH, cfg, loaded, out=out, overwrite=overwrite, launcher=launcher)
    _warn_if_reused(result)
    return result


def compare_bench(runs: Sequence, *, out: Optional[str] = None, overwrite: bool = False) -> RunResult:
    """One leaderboard from bench runs (or results files) made on different machines
    (``sinklab bench --compare``); results of a task at different versions are refused."""
    cfg = BenchCompareConfig(runs=tuple(str(run) for run in runs))
    result = pipeline.run(BENCH_COMPARE, cfg, out=out, overwrite=overwrite)
    _warn_if_reused(result)
    return result


_POSITIONAL, _KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY
_MODEL = [inspect.Parameter("model", _POSITIONAL), inspect.Parameter("tokenizer", _POSITIONAL, default=None)]
_INTERVENTIONS = inspect.Parameter("interventions", _POSITIONAL, default=())
_MODELS = [inspect.Parameter("models", _POSITIONAL, default=(None,)), inspect.Parameter("launcher", _KEYWORD, default=None)]
_OUT = [inspect.Parameter("out", _KEYWORD, default=None), inspect.Parameter("overwrite", _KEYWORD, default=False)]
keywords.document(scan_model, ScanConfig, _MODEL, _OUT, LOADING)
keywords.document(intervene_model, InterveneConfig, [*_MODEL, _INTERVENTIONS], _OUT, (*LOADING, "interventions"))
keywords.document(stream_model, StreamConfig, _MODEL, _OUT, LOADING)
keywords.document(adapt_model, PrefixConfig, _MODEL, _OUT, LOADING)
keywords.document(compress_model, CompressConfig, _MODEL, _OUT, LOADING)
keywords.document(tune_model, TuneConfig, _MODEL, _OUT, LOADING)
keywords.document(scan_models, ScanConfig, [inspect.Parameter("models", _POSITIONAL)], _OUT, ("model",))
keywords.document(bench_models, BenchConfig, _MODELS, _OUT, ("models",))
