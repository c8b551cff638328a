"""sinklab: a toolkit for studying attention sinks in transformers.

In a notebook: ``sinklab.scan_model(model, tokenizer)`` (and ``intervene_model``, ``stream_model``,
``adapt_model``) on a model you loaded, ``sinklab.Subject.from_model`` for the run functions, and
``sinklab.intervene.applied`` around your own forward or ``generate``. Imported on first use, so
``import sinklab`` stays light.
"""

__version__ = "0.1.0"

_EXPORTS = {
    "scan_model": ("api", "scan_model"),
    "intervene_model": ("api", "intervene_model"),
    "stream_model": ("api", "stream_model"),
    "adapt_model": ("api", "adapt_model"),
    "Subject": ("models.subjects", "Subject"),
    "LoadOptions": ("models.hf", "LoadOptions"),
    "load_model": ("models.hf", "load_model"),
    "RunResult": ("core.results", "RunResult"),
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sinklab' has no attribute {name!r}")
    from importlib import import_module

    module, attr = _EXPORTS[name]
    return getattr(import_module(f"{__name__}.{module}"), attr)
