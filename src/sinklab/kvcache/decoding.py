"""A press applied while decoding: every ``every`` tokens the cache is brought back to a budget.

Long generations (reasoning traces, long answers) grow the cache after the prompt, which a press
applied once after the prefill never sees. :class:`DecodingPress` (kvpress's ``DecodingPress``)
leaves the prompt's cache whole and, each time ``every`` more tokens have been fed through it
(generated or teacher-forced, one at a time or in chunks), presses every full-attention layer back
to ``budget`` keys per KV head with its press's scores: the sinks its ``keep_sinks`` names first,
then the press's own window (the most recent keys, for SnapKV and H2O), then its best scores. Kept
keys stay at their positions, as after a prefill press (:mod:`.layers`).

What a press reads from attention during decoding is what the queries fed since the last
compression paid each key the cache then holds (:mod:`.tally`, beside SDPA): H2O's accumulated
attention and SnapKV's and TOVA's window are taken over those queries (kvpress's DecodingPress
also scores from the tokens since its last compression). ``keep_sinks="detected"`` reads the sinks
from the prompt's own attention, once, at the prefill. The budget is the same in every layer (a
press with per-layer budgets, PyramidKV, keeps its scores and drops its pyramid here).

StreamingLLM's rolling window is the recency score's special case: ``DecodingPress(StreamingLLM(
keep_sinks=4), budget=B, every=1)`` keeps the same tokens as sinklab's sink cache
(:func:`sinklab.stream.make_sink_cache`) with 4 sinks and a window of ``B - 3`` (each query sees the
B kept keys and itself); the sink cache re-numbers the kept keys' positions, a press keeps them.
"""

from __future__ import annotations

import numbers
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Optional, Union

from ..core.errors import check
from .policy import CachePolicy, Compression, LayerContext
from .press import Press
from .presses.adakv import AdaKV
from .registry import DETECTED
from .rewriting import full_attention_layers, rewrite, sink_positions
from .tally import tallied


@dataclass(frozen=True)
class DecodingPress(CachePolicy):
    """``press`` applied while decoding: every ``every`` tokens fed after the prompt, each
    full-attention layer is brought back to ``budget`` keys per KV head (a number of tokens, or a
    float in (0, 1]: that fraction of the prompt). Use it alone in
    ``sinklab.applied(model, DecodingPress(SnapKV(keep_sinks=4), budget=512, every=64))``."""

    press: Press = None
    budget: Union[int, float] = 512
    every: int = 64

    kind = "press"
    aliases = {"base_press": "press", "compression_interval": "every", "target_size": "budget"}  # kvpress's names

    def __post_init__(self) -> None:
        check(
            not isinstance(self.press, AdaKV),
            "DecodingPress brings every KV head back to the same budget each step, and AdaKV gives each head its own "
            "number of keys: wrap the press AdaKV wraps, e.g. DecodingPress(SnapKV(keep_sinks=4))",
        )
        check(isinstance(self.press, Press), f"DecodingPress needs a press, e.g. SnapKV(keep_sinks=4); got {self.press!r}")
        check(
            self.press.ratio == 0,
            f"DecodingPress brings the cache to its budget: give the press no ratio (got {self.press.ratio:g})",
        )
        integral = isinstance(self.budget, numbers.Integral) and not isinstance(self.budget, bool)
        if integral:  # numpy's integers too
            object.__setattr__(self, "budget", int(self.budget))
        tokens = integral and self.budget >= 1
        fraction = isinstance(self.budget, numbers.Real) and not integral and not isinstance(self.budget, bool)
        check(
            tokens or (fraction and 0 < self.budget <= 1),
            f"budget is a number of tokens (an integer >= 1) or a fraction of the prompt (a float in (0, 1]: 1.0 is the "
            f"whole prompt); got {self.budget!r}",
        )
        check(isinstance(self.every, int) and self.every >= 1, f"every must be a number of tokens >= 1, got {self.every!r}")
        if tokens:
            self.check_fits(self.budget)

    def check_fits(self, budget: int) -> None:
        """A budget must hold the sinks and the press's own window (SnapKV's last queries, H2O's
        recent half) with room for a scored key: else the window's newest keys would be dropped."""
        sinks, window = held_apart(self.press, budget, self.every)
        check(
            budget > sinks + window,
            f"a budget of {budget} keys cannot hold the {sinks} sinks, the {window}-key "
            f"window of {self.press.name} and a key it scores: give a larger budget (or a smaller window)",
        )

    @property
    def name(self) -> str:
        return f"{self.press.name} while decoding"

    @property
    def sinks(self):
        return self.press.keep_sinks

    @property
    def needs(self) -> frozenset:
        return self.press.needs

    @property
    def idle(self) -> bool:
        """Nothing at the prefill: the prompt's cache stays whole."""
        return True

    @property
    def evicts(self) -> bool:
        """Idle at the prefill, it drops keys while decoding."""
        return True

    @property
    def prompt_recording(self) -> frozenset:
        """What the prefill records: the prompt's attention when the sinks are detected from it."""
        return frozenset({"received"}) if self.press.keep_sinks == DETECTED else frozenset()

    def tokens(self, prompt: int) -> int:
        """The budget in keys per KV head, for a prompt of ``prompt`` tokens."""
        return budget_tokens(self.budget, prompt)

    def for_prompt(self, prompt: int) -> "DecodingPress":
        """This press with its budget in tokens (a fraction of the prompt resolved)."""
        budget = self.tokens(prompt)
        self.check_fits(budget)
        return replace(self, budget=budget)

    def rewritten(self, context: LayerContext, sinks: list[int], group: list):
        check(isinstance(self.budget, int), "a DecodingPress's fractional budget is resolved at the prefill (for_prompt)")
        return self.press.rewritten(context, sinks, group, budget=self.budget)

    def label(self) -> str:
        return f"{self.press.label()} while decoding (budget {self.budget}, every {self.every})"


def budget_tokens(budget: Union[int, float], prompt: int) -> int:
    """A decoding budget in keys per KV head for a prompt of ``prompt`` tokens: a number of tokens
    as it is, a fraction of the prompt rounded down (at least one key)."""
    return budget if isinstance(budget, int) else max(1, int(prompt * budget))


def held_apart(press: Press, budget: int, every: int) -> tuple[int, int]:
    """(sinks, window): the keys ``press`` keeps whatever their score at a compression to
    ``budget`` keys, ``every`` tokens after the last (its first ``keep_sinks`` tokens, none counted
    for detected sinks, and its own window); a budget must hold both and a key it scores."""
    sinks = 0 if press.keep_sinks == DETECTED else press.keep_sinks
    return sinks, max(len(press.always_kept(budget + every, budget)), press.window_rows)


def least_budget(press: Press, every: int, most: int = 1 << 16) -> Optional[int]:
    """The smallest budget in keys that holds ``press``'s sinks, its window and a key it scores
    (the window may grow with the budget: H2O's recent half); None when none up to ``most`` does."""
    return next((budget for budget in range(1, most) if budget > sum(held_apart(press, budget, every))), None)


class DecodingState:
    """An ``applied`` block's bookkeeping for a :class:`DecodingPress`: the sinks (positions), the
    budget in tokens once the prompt is seen, the tokens fed since the last compression and the
    tally of their attention (open across the forwards of one interval), and the last compression."""

    def __init__(self, model, press: DecodingPress) -> None:
        self.model, self.press = model, press
        self.resolved: Optional[DecodingPress] = None
        self.sinks: Optional[list[int]] = None
        self.fed = 0
        self.cache = None
        self.last: Optional[Compression] = None
        self._interval: Optional[ExitStack] = None
        self._tally = None

    def prompt_seen(self, prompt: int, tally, cache) -> None:
        """After the prefill of ``prompt`` tokens (``tally``: its attention, when the sinks are
        detected): the budget in tokens and the sinks' positions."""
        self.close()  # a tally left open by the cache before
        self.resolved = self.press.for_prompt(prompt)
        setting = self.press.sinks
        self.sinks = sink_positions(setting, prompt, tally, full_attention_layers(cache)) if setting == DETECTED else None
        self.fed, self.cache = 0, cache

    def governs(self, cache) -> bool:
        """Whether a forward through ``cache`` is one this press counts and presses: the cache of
        the last prefill (or of the first step, decoding from an empty cache), not another cache
        the block runs through (a branch, a sink cache)."""
        if self.cache is None:
            self.cache = cache
        return cache is self.cache

    def before_step(self) -> None:
        """Before a forward through the filled cache: the interval's tally opened if the press reads attention."""
        if self.resolved is None:  # decoding from an empty cache: no prompt
            check(
                isinstance(self.press.budget, int) and self.press.sinks != DETECTED,
                "this DecodingPress reads the prompt (a budget that is a fraction of it, or detected sinks), "
                "and decoding started with no prefill: give a budget in tokens and keep_sinks=N",
            )
            self.resolved = self.press
        if self.press.needs and self._interval is None:
            self._interval = ExitStack()
            needs = self.press.needs
            self._tally = self._interval.enter_context(tallied(self.model, 0, "received" in needs, self.press.every))

    def after_step(self, tokens: int, cache) -> Optional[Compression]:
        """After a forward that fed ``tokens`` through the cache: every ``every`` tokens, the cache
        brought back to the budget (where it holds more); the compression, or None."""
        self.fed += tokens
        if self.fed < self.press.every:
            return None
        tally, self._tally = self._tally, None
        self.close()
        self.fed -= self.press.every  # a chunk that overshot counts toward the next interval
        held = max(cache.layers[i].keys.shape[-2] for i in full_attention_layers(cache))
        if held <= self.resolved.budget:
            return None
        sinks = self.sinks if self.sinks is not None else list(range(self.press.sinks))
        self.last = rewrite(cache, self.resolved, tally, sinks=sinks)
        return self.last

    def close(self) -> None:
        if self._interval is not None:
            self._interval.close()
            self._interval = None
