"""What a press is: a rule that scores every cached key of a context and keeps the best.

A press (kvpress's word) compresses a context's KV cache once, after its prefill: each
full-attention layer keeps ``budget`` of the context's ``T`` keys per KV head, the ones its
:meth:`Press.scores` ranks highest, and drops the rest from the cache tensors (the bytes go, no
mask hides them). ``ratio`` is the fraction of the context removed, as in kvpress
(``compression_ratio``): the budget is ``max(1, int(T * (1 - ratio)))``.

``keep_sinks`` protects sink tokens inside that budget (the sinks come out of the budget, not on
top of it): ``0`` protects nothing (the press keeps a sink only when its score ranks it high),
``N`` the first N tokens, ``"detected"`` the tokens that received far more attention than the
others on the prompt itself (:mod:`.sinks`, which names the positions it found). Windows a press
always keeps (SnapKV's last queries, TOVA's last token) also come out of the budget, after the
sinks.

A new press is one file in this package: a dataclass subclass of :class:`Press` decorated with
``@register("name")`` that implements :meth:`Press.scores` from a :class:`LayerContext` (the
layer's keys and values, and, when the press declares it ``needs`` them, the attention the
prefill's queries paid each key: :mod:`.attention`).

kvpress's argument names are accepted as aliases (:data:`KVPRESS_NAMES`: ``compression_ratio`` for
``ratio`` on every press, ``n_sink`` for StreamingLLM's ``keep_sinks``), so a kvpress user's
``SnapKV(compression_ratio=0.5)`` works as written.
"""

from __future__ import annotations

import inspect
import numbers
from dataclasses import dataclass, field, fields
from typing import Callable, ClassVar, Optional, Union

import torch

from ..core.errors import SinklabError, check
from ..stream import cache_bytes
from .cache import full_attention_layers
from .sinks import detected_sinks

KeepSinks = Union[int, str]
DETECTED = "detected"
#: kvpress's argument names a press also takes (kvpress's name -> sinklab's); a press class may add its own.
KVPRESS_NAMES = {"compression_ratio": "ratio"}
#: What a press may ask the prefill to record per layer (:mod:`.attention`): every query's
#: attention summed per key ("received"), and the last queries' ("window").
NEEDS = ("received", "window")

#: press name -> class, in the order they registered (``sinklab compress --press NAME``).
PRESSES: dict[str, type["Press"]] = {}


def register(name: str) -> Callable[[type["Press"]], type["Press"]]:
    """Class decorator: make a press known by ``name``."""

    def add(cls: type["Press"]) -> type["Press"]:
        if name in PRESSES:
            raise ValueError(f"press {name!r} is registered twice")
        cls.name = name
        PRESSES[name] = cls
        return cls

    return add


def press_named(name: str, **settings) -> "Press":
    """The press registered as ``name`` with ``settings`` (ratio, keep_sinks, its own fields)."""
    check(name in PRESSES, f"unknown press {name!r}; choose from: {', '.join(PRESSES)}")
    return PRESSES[name](**settings)


@dataclass(frozen=True)
class LayerContext:
    """What a press scores one layer from. ``keys``/``values``: (B, Hkv, T, D) as cached (keys after
    RoPE); ``layer``/``n_layers``: where it is; ``received``: (B, Hq, T) the attention each key got,
    summed over every query of the prefill; ``window``: (B, Hq, T) the same summed over the last
    ``window_rows`` queries only (each None unless the press ``needs`` it)."""

    keys: torch.Tensor
    values: torch.Tensor
    layer: int
    n_layers: int
    received: Optional[torch.Tensor] = None
    window: Optional[torch.Tensor] = None
    window_rows: int = 0

    @property
    def length(self) -> int:
        return self.keys.shape[-2]

    def per_kv_head(self, attention: torch.Tensor) -> torch.Tensor:
        """(B, Hq, T) -> (B, Hkv, T): the mean over each KV head's group of query heads (GQA), as
        kvpress averages them (a kept key serves every query head of its group)."""
        batch, heads, length = attention.shape
        groups = heads // self.keys.shape[1]
        return attention.view(batch, heads // groups, groups, length).mean(2)


class _TakesKvpressNames(type):
    """Presses take kvpress's argument names too: a dataclass's own ``__init__`` would reject
    ``compression_ratio=`` with a bare TypeError, so the names in the class's ``kvpress_names`` are
    renamed before it runs (giving both spellings is one line)."""

    def __call__(cls, *args, **kwargs):
        positional = [f.name for f in fields(cls) if f.init and not f.kw_only][: len(args)]
        for theirs, ours in cls.kvpress_names.items():
            if theirs in kwargs:
                given = ours in kwargs or ours in positional  # SnapKV(0.5, compression_ratio=0.5) too
                check(not given, f"{cls.__name__}: give {ours}= (or positionally) or kvpress's {theirs}=, not both")
                kwargs[ours] = kwargs.pop(theirs)
        return super().__call__(*args, **kwargs)

    @property
    def __signature__(cls) -> inspect.Signature:
        """The dataclass's fields, as ``help()`` and tab completion show them (not ``__call__``'s)."""
        init = inspect.signature(cls.__init__)
        return init.replace(parameters=list(init.parameters.values())[1:])


def check_ratio(ratio: float, name: str = "ratio") -> None:
    """A press's ``ratio`` (and ``--ratio``): the fraction of the context removed, 0 (nothing: the
    full cache, kvpress's default) or in (0, 1). The one check of it, for the class and the command."""
    number = isinstance(ratio, numbers.Real) and not isinstance(ratio, bool)  # numpy's and Python's numbers
    check(
        number and 0 <= ratio < 1,
        f"{name} is the fraction of the context removed: 0 (the full cache) or in (0, 1); got {ratio!r}",
    )


@dataclass(frozen=True)
class Press(metaclass=_TakesKvpressNames):
    """A compression rule: after a prefill, each full-attention layer keeps the context's keys its
    :meth:`scores` rank highest and drops the rest from the cache.

    ``ratio``: the fraction of the context's keys removed, 0 (keeps every key: the dense cache) or
    in (0, 1); kvpress's ``compression_ratio``, accepted under that name too. ``keep_sinks``: 0, N
    (the first N tokens) or "detected", protected inside the budget. Use it with
    ``with sinklab.press.applied(model, press): model.generate(...)``, or ``press.apply(cache)``."""

    ratio: float = 0.0
    keep_sinks: KeepSinks = 0

    name: ClassVar[str] = ""
    #: kvpress's argument names this press takes (kvpress's name -> field).
    kvpress_names: ClassVar[dict] = KVPRESS_NAMES
    #: What the prefill must record for :meth:`scores` (from :data:`NEEDS`).
    needs: ClassVar[frozenset] = frozenset()
    #: Whether layers keep different numbers of keys (:meth:`budget` depends on the layer).
    per_layer_budgets: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_ratio(self.ratio)
        check_sink_setting(self.keep_sinks, "keep_sinks")

    # -- what a subclass defines ---------------------------------------------------------------

    def scores(self, context: LayerContext) -> torch.Tensor:
        """(B, Hkv, T) float: how much each key is worth keeping (higher is kept)."""
        raise NotImplementedError

    def budget(self, length: int, layer: int, n_layers: int) -> int:
        """Keys a layer keeps per KV head out of a context of ``length`` (kvpress's
        ``compute_n_kept``; a press with per-layer budgets overrides it)."""
        return max(1, int(length * (1 - self.ratio)))

    def always_kept(self, length: int, budget: int) -> range:
        """Positions the press keeps whatever their score (its own window), inside the budget."""
        return range(0)

    # -- derived -------------------------------------------------------------------------------

    def keep(self, context: LayerContext, sinks: list[int]) -> torch.Tensor:
        """(B, Hkv, budget) the positions this layer keeps, ascending: ``sinks`` first, then the
        press's own window, then its best scores."""
        budget = self.budget(context.length, context.layer, context.n_layers)
        if budget >= context.length:  # nothing to drop (ratio 0): no score needed
            return torch.arange(context.length, device=context.keys.device).expand(*context.keys.shape[:2], -1)
        return kept_positions(self.scores(context), budget, sinks, self.always_kept(context.length, budget))

    @property
    def recording(self) -> frozenset:
        """What the prefill records: the press's needs, plus every query's attention when the
        sinks are detected from it; nothing at ratio 0 (every key is kept, and the prefill runs
        exactly as without a press)."""
        if self.ratio == 0:
            return frozenset()
        return self.needs | ({"received"} if self.keep_sinks == DETECTED else frozenset())

    @property
    def window_rows(self) -> int:
        """The last queries whose attention the press reads ("window" in :attr:`needs`)."""
        return 0

    def apply(self, cache, tally=None) -> "Compression":
        """Compress ``cache`` (just filled by a prefill) in place; see :func:`compress`."""
        return compress(cache, self, tally)

    def settings(self) -> dict:
        """The press as a config records it: its name and every field."""
        return {"press": self.name, **{f.name: getattr(self, f.name) for f in fields(self)}}

    def label(self) -> str:
        sinks = {0: "no sink kept", DETECTED: "detected sinks kept"}.get(self.keep_sinks, f"first {self.keep_sinks} kept")
        return f"{self.name} (ratio {self.ratio:g}, {sinks})"


def check_sink_setting(value, name: str, detected: bool = True) -> None:
    """A ``keep_sinks`` or ``protect`` setting: a number of first tokens (not a bool), or
    "detected" where ``detected`` allows it; anything else is a one-line error."""
    number = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    check(
        number or (detected and value == DETECTED),
        f"{name} must be 0, a number of first tokens N{', or ' + repr(DETECTED) if detected else ''}; got {value!r}",
    )


def kept_positions(scores: torch.Tensor, budget: int, protected: list[int], windows: range) -> torch.Tensor:
    """(B, Hkv, budget) positions to keep (budget below T), ascending: the ``protected`` sinks
    first, then the press's ``windows``, then the best scores. A budget smaller than the protected
    positions keeps the earliest of them."""
    check(not torch.isnan(scores).any(), "a press scored a key NaN: its inputs hold NaN (the model's cache is broken)")
    ranked = scores.float().clamp(max=torch.finfo(torch.float32).max / 2)  # a copy, below the forced
    forced = [*protected, *(p for p in windows if p not in protected)][:budget]
    if forced:  # at most ``budget`` of them, all above every score: all kept
        ranked[..., forced] = torch.finfo(ranked.dtype).max
    return ranked.topk(budget, dim=-1).indices.sort(dim=-1).values


def gathered(states: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(B, Hkv, T, D) states at (B, Hkv, K) positions -> (B, Hkv, K, D), a new contiguous tensor
    (the dropped positions' memory is freed with the old one)."""
    return states.gather(2, positions[..., None].expand(*positions.shape, states.shape[-1])).contiguous()


def not_a_press(value) -> SinklabError:
    return SinklabError(f"expected a sinklab press (e.g. SnapKV(ratio=0.5, keep_sinks=4)), got {type(value).__name__}")


@dataclass
class Compression:
    """What one press did to one context: ``length`` (tokens compressed), ``positions`` (per
    compressed layer, the (B, Hkv, K) positions each KV head kept, ascending), ``sinks`` (the
    positions protected), and the cache's bytes before and after (every layer's keys and values,
    sliding-window layers included, which a press leaves as they are)."""

    length: int
    positions: dict = field(default_factory=dict)
    sinks: list = field(default_factory=list)
    bytes_before: int = 0
    bytes_after: int = 0

    @property
    def layers(self) -> list[int]:
        """The layers compressed (the full-attention ones)."""
        return list(self.positions)

    @property
    def kept(self) -> dict[int, int]:
        """Keys each KV head kept, per compressed layer."""
        return {layer: positions.shape[-1] for layer, positions in self.positions.items()}

    @property
    def kept_fraction(self) -> float:
        return sum(self.kept.values()) / (len(self.kept) * self.length)


def started(cache) -> tuple[list[int], Compression]:
    """The full-attention layers of ``cache`` (just filled by a prefill) that a press or a quantizer
    rewrites, and the report it fills in: the context's length and the cache's bytes before."""
    layers = full_attention_layers(cache)
    length = cache.layers[layers[0]].keys.shape[-2]
    return layers, Compression(length, bytes_before=cache_bytes(cache))


def sink_positions(setting: KeepSinks, length: int, tally, layers: list[int]) -> list[int]:
    """The positions a ``keep_sinks`` (or a quantizer's ``protect``) setting names in a context of
    ``length`` tokens: the first N, or those detected from the prefill's attention ``tally`` (None
    when nothing was recorded) in the full-attention ``layers`` (a sliding-window layer's keys are
    seen by a window of queries, not by every later one, so its mean per query would be misread)."""
    if setting == DETECTED:
        check(
            tally is not None and bool(tally.received),
            "detected sinks are read from the prefill's attention: compress inside `press.applied(model, ...)`, "
            "or pass the tally of a prefill run under `press.tallied(...)`",
        )
        return detected_sinks({index: tally.received[index] for index in layers})
    return list(range(min(setting, length)))


def compress(cache, press: Press, tally=None) -> Compression:
    """Compress every full-attention layer of ``cache`` (just filled by a prefill) with ``press``,
    from the prefill's attention ``tally`` when the press needs it."""
    check(
        press.ratio == 0 or not press.needs or tally is not None,
        f"{press.name} scores keys from the prefill's attention: compress inside `press.applied(model, ...)`",
    )
    layers, report = started(cache)
    length = report.length
    # at ratio 0 every key is kept: the cache only learns to count positions
    report.sinks = [] if press.ratio == 0 else sink_positions(press.keep_sinks, length, tally, layers)
    group: list = []
    from .pressed_layer import PressedLayer

    n_layers = len(cache.layers)
    for index in layers:
        layer = cache.layers[index]
        context = LayerContext(
            layer.keys, layer.values, index, n_layers,
            received=tally.received.get(index) if tally is not None else None,
            window=tally.window.get(index) if tally is not None else None,
            window_rows=press.window_rows,
        )  # fmt: skip
        positions = press.keep(context, report.sinks)
        cache.layers[index] = PressedLayer(gathered(layer.keys, positions), gathered(layer.values, positions), length, group)
        report.positions[index] = positions.cpu()
    report.bytes_after = cache_bytes(cache)
    return report
