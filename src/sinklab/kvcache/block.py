"""The cache policies' part of ``with sinklab.applied(model, SnapKV(ratio=0.5, keep_sinks=4)): model.generate(...)``
(:mod:`sinklab.editing`; ``with SnapKV(ratio=0.5, keep_sinks=4)(model):`` is kvpress's spelling of the same).

Within the block, the model's next prefill (a forward over several tokens into an empty cache:
``generate``'s first step, or ``model(context_ids, use_cache=True)``) runs as usual, and its cache
is rewritten when the forward returns by each policy in turn: a press keeps the positions it
chooses (:mod:`.press`), a quantizer stores the keys in fewer bits (:mod:`.quantizer`), and a press
then a quantizer evict, then quantize what is kept (``applied(model, SnapKV(ratio=0.5,
keep_sinks=4), KIVI(bits=4, protect=4))``; at most one of each, the press first). Only
the context is compressed: the tokens after it (a question, the continuation) are added whole, as
in kvpress's pipeline. The prefill's own output is the dense model's (its attention ran before the
compression).

A prompt that ends with a question compresses the question too, and a press that scores keys by the
last queries (SnapKV, TOVA) then scores them by the question. ``applied(model, press,
question=question_ids)`` keeps it out, as kvpress's pipeline does with ``pipe(context,
question=...)``: a prefill whose ids end with ``question_ids`` runs on the context alone, the context
is compressed, and the question is fed through the compressed cache within the same call; its
output is the question's forward, with the context's logits before the question's (so ``generate``
and ``model(prompt)`` work as written); its other outputs (``hidden_states``, ``attentions``) are
the question's only, and ``labels=`` is refused (a loss over the whole prompt is computed from the
logits).

What the policies need from the prefill's attention (H2O, SnapKV, TOVA, detected sinks) is summed
once for all of them while the prefill runs (:mod:`.tally`), never as a (T, T) matrix. Hooks live only inside the
block; the compressed cache outlives it (the same ``model.generate`` may continue it later;
a cache whose layers kept different numbers of keys needs the block's attention function, so it
is continued inside the block).

:attr:`CacheState.last` reports the last compression: the context's length, what each layer kept,
the sinks held apart, and the cache's bytes before and after (with several policies, the whole
composition's; ``CacheState.steps`` has each policy's own).
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Iterator, Optional

import torch
from torch import nn

from ..core.errors import SinklabError, check
from ..core.hooks import Applied
from .decoding import DecodingPress, DecodingState
from .narrowed import attention_for
from .policy import CachePolicy, Compression, not_a_policy, recording
from .rewriting import rewrite
from .tally import tallied


class CacheState:
    """What a block of cache policies yields (``sinklab.applied(...).cache``): the policies, the
    model, and the last rewrite of the cache (an eviction, a quantization, or both)."""

    def __init__(self, model: nn.Module, policies: tuple, question: Optional[torch.Tensor] = None) -> None:
        self.model, self.policies, self.question = model, policies, question
        self.last: Optional[Compression] = None
        self.steps: list[Compression] = []
        self._prefill: Optional[ExitStack] = None
        self._tally = None
        self._held_back: Optional[dict] = None  # the question's forward, run after the context's compression
        decoding = policies[0] if isinstance(policies[0], DecodingPress) else None
        self.decoding = DecodingState(model, decoding) if decoding is not None else None
        self._step_tokens = 0  # the tokens of the forward running through a filled cache (a decoding press counts them)

    # -- hooks on the model's forward --------------------------------------------------------

    def before(self, module, args, kwargs) -> Optional[tuple]:
        ids = kwargs.get("input_ids", args[0] if args else None)
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        filled = cache is not None and cache.get_seq_length() > 0
        check(
            ids is not None or filled or kwargs.get("inputs_embeds") is None,
            "a press compresses a prefill given as input_ids; this one is given as inputs_embeds",
        )
        if ids is None or ids.shape[-1] < 2 or filled:  # a decode step, or tokens after the context
            if self.decoding is not None and ids is not None and self.decoding.governs(cache):
                self.decoding.before_step()
                self._step_tokens = ids.shape[-1]
            return
        check(
            kwargs.get("use_cache", True) is not False,
            "a press compresses the prefill's cache: call the model with use_cache=True",
        )
        check_unpadded(kwargs.get("attention_mask"))
        if self.question is not None:
            args, kwargs = self._hold_back_question(args, kwargs, ids)
        if self.decoding is not None:
            self.decoding.close()  # an interval's tally from a cache before must not hook this prefill
        wants, window_rows = (self.decoding.press.prompt_recording, 0) if self.decoding else recording(self.policies)
        self._prefill = ExitStack()
        if wants:
            context_length = ids.shape[-1] - (0 if self.question is None else self.question.shape[-1])
            self._tally = self._prefill.enter_context(tallied(self.model, context_length, "received" in wants, window_rows))
        return args, kwargs

    def _hold_back_question(self, args: tuple, kwargs: dict, ids: torch.Tensor) -> tuple[tuple, dict]:
        """The prefill's inputs cut to the context; the question's own (its ids, positions, the full
        attention mask, the cache argument) kept for :meth:`after`."""
        size = self.question.shape[-1]
        question = self.question.to(ids.device)
        check(
            ids.shape[-1] > size and bool((ids[..., -size:] == question).all()),
            f"the prompt does not end with the question given to applied(question=...) ({size} tokens): "
            "pass the ids the prompt ends with, or leave question out to compress the whole prompt",
        )
        keep = kwargs.get("logits_to_keep", 0)
        check(isinstance(keep, int), "with question=, logits_to_keep must be a number of last positions")
        check(
            kwargs.get("labels") is None,
            "with question=, labels= is not taken: the call runs the context and the question as two forwards "
            "and returns the question's, so compute the loss from output.logits (the whole prompt's)",
        )
        cache_key = "past_key_values" if "past_key_values" in kwargs else "cache"
        held = {"input_ids": ids[..., -size:], "logits_to_keep": keep, "cache_key": cache_key, "use_cache": True}
        kwargs = dict(kwargs)
        for key in ("position_ids", "cache_position"):  # per-token arguments: the context's, then the question's
            if isinstance(kwargs.get(key), torch.Tensor) and kwargs[key].shape[-1] == ids.shape[-1]:
                kwargs[key], held[key] = kwargs[key][..., :-size], kwargs[key][..., -size:]
        if kwargs.get("attention_mask") is not None:  # the question sees the context and itself
            held["attention_mask"], kwargs["attention_mask"] = kwargs["attention_mask"], kwargs["attention_mask"][..., :-size]
        if "input_ids" in kwargs:
            kwargs["input_ids"] = ids[..., :-size]
        else:
            args = (ids[..., :-size], *args[1:])
        self._held_back = held
        return args, kwargs

    def after(self, module, args, kwargs, output) -> None:
        if self._prefill is None:
            if self._step_tokens:
                tokens, self._step_tokens = self._step_tokens, 0
                compression = self.decoding.after_step(tokens, output.cache)
                if compression is not None:
                    self.steps, self.last = [compression], compression
            return
        tally, self._tally = self._tally, None
        self._prefill.close()
        self._prefill = None
        cache = getattr(output, "cache", None)
        check(cache is not None, "the prefill returned no cache to compress (call the model with use_cache=True)")
        if self.decoding is not None:  # the prompt's cache stays whole
            self.decoding.prompt_seen(cache.get_seq_length(), tally, cache)
            return
        self.steps = [rewrite(cache, policy, tally) for policy in self.policies]
        self.last = composed(self.steps)
        if self._held_back is not None:
            return self._ask_question(module, output.logits, cache)

    def _ask_question(self, module: nn.Module, context_logits: torch.Tensor, cache):
        """The held-back question through the compressed cache (this block's hooks see a filled
        cache: a continuation, not compressed); its output with the context's logits first."""
        held, self._held_back = self._held_back, None
        keep = held.pop("logits_to_keep")
        held[held.pop("cache_key")] = cache
        output = module(**held)
        logits = torch.cat([context_logits, output.logits], dim=-2)
        output.logits = logits[..., -keep:, :] if keep else logits
        return output

    def close(self) -> None:
        self._held_back = None
        if self.decoding is not None:
            self.decoding.close()
        if self._prefill is not None:
            self._prefill.close()
            self._prefill = None


@contextmanager
def _rewriting(model: nn.Module, *policies: CachePolicy, question=None) -> Iterator[CacheState]:
    """Rewrite the cache of the model's next prefill(s) inside the block with ``policies`` (a press,
    a quantizer, or presses then one quantizer, applied in that order); yields the
    :class:`CacheState`, whose ``last`` describes the last compression. Nothing stays on the model
    after the block (its hooks and attention implementation are restored, also on error).

    ``question``: the token ids a prompt ends with (a list, or a tensor of shape (Q,) or (1, Q)),
    kept out of the compression as kvpress's pipeline keeps its ``question=``: the context before
    them is compressed, then they are fed through the compressed cache (see the module's docstring):
    the output's logits cover the whole prompt, its ``hidden_states`` and ``attentions`` the question
    only, and ``labels=`` is refused."""
    from ..models.hf.support import check_causal

    check_order(policies, question)
    question = None if question is None else _question_ids(question)
    check(
        isinstance(model, nn.Module) and hasattr(model, "config"),
        f"expected a transformers causal LM, got {type(model).__name__}",
    )
    check_causal(model)
    state = CacheState(model, policies, question)
    with attention_for(model, policies):
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
def _alone(model, policy: CachePolicy, question=None) -> Iterator[Applied]:
    """``with policy(model):``, kvpress's spelling: the block ``sinklab.applied(model, policy)``
    runs for one cache policy, yielding the same :class:`~sinklab.core.hooks.Applied`."""
    from ..models.hf import LoadedModel

    with _rewriting(model.model if isinstance(model, LoadedModel) else model, policy, question=question) as state:
        yield Applied(None, state)


CachePolicy._block = staticmethod(_alone)


def check_order(policies: tuple, question) -> None:
    """At least one policy: a press, a quantizer, or a press then a quantizer (it stores what the
    press kept); or a decoding press alone."""
    if not policies:
        raise SinklabError(
            "sinklab.applied needs a press or a quantizer here, e.g. sinklab.applied(model, SnapKV(ratio=0.5, keep_sinks=4))"
        )
    for policy in policies:
        if not isinstance(policy, CachePolicy):
            raise not_a_policy(policy)
    if any(isinstance(policy, DecodingPress) for policy in policies):
        check(len(policies) == 1, "a DecodingPress works alone in sinklab.applied: it presses the cache the decoding grows")
        check(
            question is None,
            "question= keeps a question out of a prefill's compression; a DecodingPress leaves the prefill whole",
        )
        return
    kinds = [policy.kind for policy in policies]
    check(
        kinds in (["press"], ["quantizer"], ["press", "quantizer"]),
        f"sinklab.applied takes a press, a quantizer, or a press then a quantizer (it stores what the press kept); "
        f"got {', '.join(kinds)}",
    )


def composed(steps: list[Compression]) -> Compression:
    """One report of policies applied in turn: the positions the last one holds, the sinks any held
    apart, the bytes before the first and after the last."""
    first, last = steps[0], steps[-1]
    sinks = sorted({sink for step in steps for sink in step.sinks})
    return Compression(first.length, last.positions, sinks, first.bytes_before, last.bytes_after)


def _question_ids(question) -> torch.Tensor:
    """``question`` as a (1, Q) tensor of token ids, or one line saying what it takes."""
    ids = torch.as_tensor(question)
    check(
        ids.dtype in (torch.int64, torch.int32) and ids.dim() in (1, 2) and ids.shape[-1] >= 1 and ids.numel() == ids.shape[-1],
        f"question= takes the token ids the prompt ends with (a list, or a tensor of shape (Q,) or (1, Q)), "
        f"got {tuple(ids.shape)} of {ids.dtype}",
    )
    return ids.reshape(1, -1).long()


def check_unpadded(attention_mask) -> None:
    """Refuse a padded batch: its padding would land on the wrong kept columns after a press."""
    if attention_mask is not None and not bool(attention_mask.all()):
        raise SinklabError(
            "a press compresses unpadded contexts only: this batch is padded (its attention_mask has zeros), and after "
            "compression the padding would mask the wrong keys; compress one context at a time or contexts of equal length"
        )
