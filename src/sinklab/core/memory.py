"""Keep a long scan's resident memory near its live tensors."""

from __future__ import annotations

import ctypes
import functools
from typing import Optional

TRIM_FROM_TOKENS = 1024  # below this the heap stays small and trimming would only cost time
HEAP_SLACK_BYTES = 2**30  # freed heap memory tolerated before it is handed back


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (glibc 2.33+): heap statistics summed over every arena."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
    ]


@functools.lru_cache(maxsize=1)
def _glibc() -> Optional[ctypes.CDLL]:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    if not (hasattr(libc, "malloc_trim") and hasattr(libc, "mallinfo2")):
        return None
    libc.mallinfo2.restype = _MallInfo2
    return libc


def trim_heap(slack: int = HEAP_SLACK_BYTES) -> None:
    """Hand freed heap pages back to the OS once more than ``slack`` bytes of them have piled up
    (glibc only; elsewhere nothing happens).

    glibc raises its mmap threshold after large frees, so a long forward pass then serves its
    per-layer activations (tens of MB each) from the heap, where freed memory stays resident.
    Trimming costs the page faults of refilling what it handed back: trimming after every layer
    made a 2,048-token scan about 40 % slower, so it waits until the slack is worth returning
    (the scan keeps the heap from fragmenting in the first place: ``Recorder.reserve``).
    """
    libc = _glibc()
    if libc is not None and libc.mallinfo2().fordblks > slack:
        libc.malloc_trim(0)
