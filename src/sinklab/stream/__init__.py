"""Streaming past the context window with sink caches (StreamingLLM, Xiao et al. 2024):
:mod:`.caches` (the caches), :mod:`.rope` (exact RoPE re-rotation), :mod:`.kernel` (one-pass scoring),
:mod:`.benchmark` (``sinklab stream``; its settings in :mod:`.config`), :mod:`.generate` (``sinklab
generate``) and :mod:`.hostsync` (decoding that never waits for the device, and its GPU check)."""

from .benchmark import STREAM, check_one_pass, stream_tokens
from .caches import POLICIES, NativeSinkCache, cache_bytes, make_sink_cache, sink_cache
from .config import StreamConfig
from .frame import stream_rows
from .generate import check_generation, generate
from .hostsync import decode_without_host_sync, greedy_decode
from .kernel import sink_window_attention
from .rope import RopeShift, rotate, rotation

__all__ = [
    "POLICIES",
    "STREAM",
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
    "rotate",
    "rotation",
    "stream_rows",
    "sink_cache",
    "sink_window_attention",
    "stream_tokens",
]
