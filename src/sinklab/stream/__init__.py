"""Streaming past the context window with sink caches (StreamingLLM, Xiao et al. 2024):
:mod:`.caches` (the caches), :mod:`.rope` (exact RoPE re-rotation), :mod:`.kernel` (one-pass scoring),
:mod:`.benchmark` (``sinklab stream``) and :mod:`.generate` (``sinklab generate``)."""

from .benchmark import StreamConfig, check_one_pass, measure_stream, run_stream
from .caches import POLICIES, NativeSinkCache, cache_bytes, make_sink_cache
from .frame import stream_rows
from .generate import check_generation, generate
from .kernel import sink_window_attention
from .rope import RopeShift, rotate, rotation

__all__ = [
    "POLICIES",
    "NativeSinkCache",
    "RopeShift",
    "StreamConfig",
    "cache_bytes",
    "check_one_pass",
    "check_generation",
    "generate",
    "make_sink_cache",
    "measure_stream",
    "rotate",
    "rotation",
    "run_stream",
    "stream_rows",
    "sink_window_attention",
]
