"""Streaming past the context window with sink caches (StreamingLLM, Xiao et al. 2024):
:mod:`.caches` (the caches), :mod:`.rope` (exact RoPE re-rotation), :mod:`.kernel` (one-pass scoring),
:mod:`.benchmark` (``sinklab stream``), :mod:`.generate` (``sinklab generate``) and :mod:`.hostsync` (decoding
that never waits for the device, and its GPU check)."""

from .benchmark import StreamConfig, check_one_pass, measure_stream, run_stream
from .caches import POLICIES, NativeSinkCache, cache_bytes, make_sink_cache, sink_cache
from .frame import stream_rows
from .generate import check_generation, generate
from .hostsync import decode_without_host_sync, greedy_decode
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
    "decode_without_host_sync",
    "generate",
    "greedy_decode",
    "make_sink_cache",
    "measure_stream",
    "rotate",
    "rotation",
    "run_stream",
    "stream_rows",
    "sink_cache",
    "sink_window_attention",
]
