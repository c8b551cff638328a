"""``sinklab stream``'s settings (and ``sinklab.stream_model``'s keyword arguments): :class:`StreamConfig`,
the stream, the cache and the policies compared over it, and its migrations; the run is :mod:`.benchmark`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from ..core.configs import setting
from ..core.errors import check
from ..models.hf import MODEL_HELP, LoadOptions
from ..scan import BOS_CHOICES
from .caches import POLICIES, check_sizes


def migrated_bos(saved: dict) -> dict:
    """Runs before config version 1 recorded ``bos`` as a bool: True put the tokenizer's BOS first
    when it had one (``auto``), False never (``no``)."""
    return {**saved, "bos": "auto" if saved["bos"] else "no"}


@dataclass
class StreamConfig:
    """``sinklab stream``'s settings (and ``sinklab.stream_model``'s keyword arguments)."""

    VERSION: ClassVar[int] = 1
    MIGRATIONS: ClassVar[dict] = {0: migrated_bos}

    model: Optional[str] = setting(None, help=f"{MODEL_HELP}; one with rotary positions", cli=False)
    corpus: str = setting("shakespeare", help="shakespeare, a text file or folder, or hf:NAME")
    tokens: int = setting(4096, help="length of the stream in tokens, BOS included")
    sinks: int = setting(4, help="first tokens kept in the cache")
    window: int = setting(1020, help="recent tokens kept, the current one included")
    policies: tuple[str, ...] = setting(
        ("dense", "window", "sink", "recompute"), help=f"comma-separated, from {', '.join(POLICIES)}", choices=POLICIES
    )
    recompute_every: int = setting(512, help="evaluate the recompute policy on every n-th position")
    chunk: int = setting(1024, help="positions per reported chunk")
    latency_steps: int = setting(16, help="timed decode steps per chunk")
    check: bool = setting(
        True,
        negate=True,
        help="skip streaming the sink (or window) policy token by token through a real cache to check the one-pass scores",
    )
    bos: str = setting(
        "auto",
        choices=BOS_CHOICES,
        help="put a BOS token first in the stream: yes, no, or auto (when the tokenizer has one; yes does the same here)",
    )
    ablation: tuple[int, ...] = setting(
        (), metavar="N[,N...]", help="also run these sink counts at the same total cache size, e.g. 0,1,2,4,8"
    )
    load: LoadOptions = field(default_factory=LoadOptions)

    def __post_init__(self) -> None:
        unknown = [p for p in self.policies if p not in POLICIES]
        check(not unknown, f"unknown policy {', '.join(unknown)}; choose from: {', '.join(POLICIES)}")
        check_sizes(self.sinks, self.window)
        check(self.tokens >= 2, f"--tokens must be at least 2, got {self.tokens}")
        for name in ("recompute_every", "chunk", "latency_steps"):
            check(getattr(self, name) >= 1, f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for n in self.ablation:
            check(0 <= n < self.capacity, f"ablation sink count {n} leaves no room in a cache of {self.capacity}")
        check(self.bos in BOS_CHOICES, f"--bos must be yes, no or auto, got {self.bos!r}")

    @property
    def capacity(self) -> int:
        return self.sinks + self.window
