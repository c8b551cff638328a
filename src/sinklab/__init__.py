"""sinklab: a toolkit for studying attention sinks in transformers."""

__version__ = "0.1.0"
