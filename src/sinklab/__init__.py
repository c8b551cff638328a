"""sinklab: a toolkit for studying attention sinks in transformers.

In a notebook, on a model you loaded (or ``sinklab.load_model()``, the built-in default):
``sinklab.scan_model(model, tokenizer)``, ``scan_models``, ``intervene_model``, ``stream_model``,
``adapt_model``, ``compress_model``, ``tune_model``, ``bench_models`` and ``compare_bench`` return a :class:`RunResult`
(``.summary``, ``.data``, ``.frame()``, ``.figures()``, ``.page()``); ``sinklab.load_result(run_dir)``
reads any finished run back;
``sinklab.applied(model, *edits)`` puts interventions, ZeroTuning or ACT tunings, KV-cache presses
and quantizers around your own forward or ``generate``: the one block for every edit.
Names are imported on first use, so ``import sinklab`` stays light; ``dir(sinklab)`` lists them.
"""

__version__ = "0.1.0"

_EXPORTS = {
    "scan_model": ("api", "scan_model"),
    "scan_models": ("api", "scan_models"),
    "intervene_model": ("api", "intervene_model"),
    "stream_model": ("api", "stream_model"),
    "adapt_model": ("api", "adapt_model"),
    "compress_model": ("api", "compress_model"),
    "tune_model": ("api", "tune_model"),
    "bench_models": ("api", "bench_models"),
    "compare_bench": ("api", "compare_bench"),
    "load_result": ("api", "load_result"),
    "applied": ("editing", "applied"),
    "load_model": ("models.hf", "load_model"),
    "default_gguf_path": ("models.hf", "default_gguf_path"),
    "default_model_folder": ("models.hf", "default_model_folder"),
    "LoadOptions": ("models.hf", "LoadOptions"),
    "Subject": ("models.subjects", "Subject"),
    "RunResult": ("core.results", "RunResult"),
    "SinklabError": ("core.errors", "SinklabError"),
    "NumericalCheckFailed": ("core.errors", "NumericalCheckFailed"),
}
#: The capabilities' packages, imported on first use (``sinklab.kvcache.SnapKV`` after ``import sinklab``).
_SUBPACKAGES = (
    "scan",
    "intervene",
    "stream",
    "adapt",
    "kvcache",
    "compress",
    "tune",
    "accuracy",
    "bench",
    "pretrain",
    "trigger",
    "core",
    "models",
)
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    from importlib import import_module

    if name in _SUBPACKAGES:
        return import_module(f"{__name__}.{name}")
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sinklab' has no attribute {name!r}")
    module, attr = _EXPORTS[name]
    return getattr(import_module(f"{__name__}.{module}"), attr)


def __dir__() -> list[str]:
    return sorted({*(n for n in globals() if not n.startswith("_")), "__version__", *_EXPORTS, *_SUBPACKAGES})
