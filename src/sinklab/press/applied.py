"""``with sinklab.press.applied(model, SnapKV(ratio=0.5, keep_sinks=4)): model.generate(...)``.

Within the block, the model's next prefill (a forward over several tokens into an empty cache:
``generate``'s first step, or ``model(context_ids, use_cache=True)``) runs as usual, and its cache
is compressed when the forward returns: each full-attention layer keeps the positions the press
chooses (:mod:`.base`), in a :class:`~.pressed_layer.PressedLayer`. Only the context is compressed: the
tokens after it (a question, the continuation) are added whole, as in kvpress's pipeline.
The prefill's own output is the dense model's (its attention ran before the compression).

What the press needs from the prefill's attention (H2O, SnapKV, TOVA, detected sinks) is summed
while the prefill runs (:mod:`.attention`), never as a (T, T) matrix. Hooks live only inside the
block; the compressed cache outlives it (the same ``model.generate`` may continue it later;
a cache whose layers kept different numbers of keys needs the block's attention function, so it
is continued inside the block).

:attr:`Pressing.last` reports the last compression: the context's length, what each layer kept,
the sinks protected, and the cache's bytes before and after.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Iterator, Optional

from torch import nn

from ..core.errors import check
from .attention import tallied
from .base import Compression, Press, compress, not_a_press
from .cache import NARROWED_SDPA, check_unpadded, register_narrowed_sdpa


class Pressing:
    """The state of an :func:`applied` block: the press, the model, and the last compression."""

    def __init__(self, model: nn.Module, press: Press) -> None:
        self.model, self.press = model, press
        self.last: Optional[Compression] = None
        self._prefill: Optional[ExitStack] = None
        self._tally = None

    # -- hooks on the model's forward --------------------------------------------------------

    def before(self, module, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        filled = cache is not None and cache.get_seq_length() > 0
        check(
            ids is not None or filled or kwargs.get("inputs_embeds") is None,
            "a press compresses a prefill given as input_ids; this one is given as inputs_embeds",
        )
        if ids is None or ids.shape[-1] < 2 or filled:
            return  # a decode step, or tokens after the context: not compressed
        check(
            kwargs.get("use_cache", True) is not False,
            "a press compresses the prefill's cache: call the model with use_cache=True",
        )
        check_unpadded(kwargs.get("attention_mask"))
        wants = self.press.recording
        if wants:
            self._prefill = ExitStack()
            self._tally = self._prefill.enter_context(
                tallied(self.model, ids.shape[-1], "received" in wants, self.press.window_rows)
            )
        else:
            self._prefill = ExitStack()

    def after(self, module, args, kwargs, output) -> None:
        if self._prefill is None:
            return
        tally, self._tally = self._tally, None
        self._prefill.close()
        self._prefill = None
        cache = getattr(output, "cache", None)
        check(cache is not None, "the prefill returned no cache to compress (call the model with use_cache=True)")
        self.last = compress(cache, self.press, tally)

    def close(self) -> None:
        if self._prefill is not None:
            self._prefill.close()
            self._prefill = None


@contextmanager
def applied(model: nn.Module, press: Press) -> Iterator[Pressing]:
    """Compress the cache of the model's next prefill(s) inside the block with ``press``; yields the
    :class:`Pressing`, whose ``last`` describes the last compression. Nothing stays on the model
    after the block (its hooks and attention implementation are restored, also on error)."""
    from ..models.hf.support import check_causal

    if not isinstance(press, Press):
        raise not_a_press(press)
    check(
        isinstance(model, nn.Module) and hasattr(model, "config"),
        f"expected a transformers causal LM, got {type(model).__name__}",
    )
    check_causal(model)
    state = Pressing(model, press)
    with attention_for(model, press):
        handles = [
            model.register_forward_pre_hook(state.before, with_kwargs=True),
            model.register_forward_hook(state.after, with_kwargs=True),
        ]
        try:
            yield state
        finally:
            for handle in handles:
                handle.remove()
            state.close()


@contextmanager
def attention_for(model: nn.Module, press: Press) -> Iterator[None]:
    """Within the block the model attends as a cache compressed by ``press`` needs: unchanged,
    except that per-layer budgets need each layer's mask cut to its keys (:mod:`.cache`)."""
    if not press.per_layer_budgets:
        yield
        return
    previous = model.config._attn_implementation
    check(
        previous == "sdpa",
        f"{press.name} keeps a different number of keys per layer, which sinklab's cache supports under the sdpa attention "
        f"only; this model uses {previous!r} (load it with attn_implementation='sdpa')",
    )
    register_narrowed_sdpa()
    model.set_attn_implementation(NARROWED_SDPA)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)
