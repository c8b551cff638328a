"""A kvpress user's first moves (issue 39): kvpress's argument names work as written, every press
and quantizer explains itself in ``help()``, and ``applied(..., question=)`` keeps the question out
of the compressed context as kvpress's pipeline does."""

from __future__ import annotations

import inspect
import pydoc

import pytest
import torch
from test_press import tiny

import sinklab
from sinklab import kvcache as P
from sinklab.core.errors import SinklabError

CONTEXT, QUESTION = 40, 6


def test_kvpress_argument_names_are_accepted_as_aliases():
    """``compression_ratio=`` on every press and StreamingLLMPress's ``n_sink=`` were plain
    TypeErrors; they are kvpress's names for ``ratio`` and ``keep_sinks``."""
    for name, cls in P.PRESSES.items():
        assert cls(compression_ratio=0.25) == cls(ratio=0.25), name
        assert P.policy_named(name, compression_ratio=0.5).ratio == 0.5
    assert P.StreamingLLM(compression_ratio=0.5, n_sink=4) == P.StreamingLLM(ratio=0.5, keep_sinks=4)
    for both in ({"ratio": 0.5}, {}):  # a positional ratio too: it was a bare TypeError
        with pytest.raises(SinklabError, match=r"give ratio= \(or positionally\) or compression_ratio=, not both"):
            P.SnapKV(*([] if both else [0.5]), compression_ratio=0.5, **both)
    assert P.SnapKV(0.5, 4) == P.SnapKV(ratio=0.5, keep_sinks=4)
    with pytest.raises(TypeError):
        P.Knorm(n_sink=4)  # StreamingLLM's own name only
    assert list(inspect.signature(P.SnapKV).parameters) == ["ratio", "keep_sinks", "window_size", "kernel_size"]


def test_a_ratio_of_any_real_number_type_is_taken():
    """check_ratio refused numpy's numbers (``np.float32(0.5)``, what a ratio computed with numpy
    is); a bool is still not a ratio."""
    import numpy as np

    for ratio in (np.float32(0.5), np.float64(0.25), np.int64(0), 0.5, 0):
        assert P.SnapKV(ratio=ratio).ratio == ratio
    with pytest.raises(SinklabError, match="fraction of the context removed"):
        P.SnapKV(ratio=True)


@pytest.mark.parametrize("cls", [*P.PRESSES.values(), P.QuantoKV], ids=lambda cls: cls.__name__)
def test_every_press_and_quantizer_has_a_docstring_in_help(cls):
    """help(SnapKV) showed dataclass boilerplate only: each class now says what it keeps and, for
    a press, kvpress's names it takes."""
    own = cls.__doc__ or ""
    assert own and not own.startswith(f"{cls.__name__}("), cls
    assert own.split(":")[0] in pydoc.render_doc(cls, renderer=pydoc.plaintext)
    if cls in P.PRESSES.values():
        assert "compression_ratio" in own


def prompt(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    context, question = torch.randint(2, 300, (1, CONTEXT), generator=g), torch.randint(2, 300, (1, QUESTION), generator=g)
    return context, question, torch.cat([context, question], -1)


@torch.no_grad()
def test_the_question_is_kept_out_of_the_compression_as_in_kvpresss_pipeline():
    """With ``question=`` a prompt's prefill compresses its context alone and then feeds the
    question through the compressed cache: the logits are those of that two-step run, the context's
    first, and SnapKV's window is the context's end, not the question (without it, the whole prompt
    is compressed and the question chooses the keys: the passkey was lost that way)."""
    model, press = tiny("llama"), P.SnapKV(0.5, keep_sinks=1, window_size=4)
    context, question, whole = prompt()
    with sinklab.applied(model, press) as by_hand:
        first = model(context, use_cache=True)
        then = model(question, cache=first.cache)
    with sinklab.applied(model, press, question=question[0].tolist()) as pressing:
        out = model(whole, use_cache=True)
    assert out.logits.shape[1] == CONTEXT + QUESTION and pressing.cache.last.length == CONTEXT
    torch.testing.assert_close(out.logits[:, :CONTEXT], first.logits)
    torch.testing.assert_close(out.logits[:, CONTEXT:], then.logits)
    assert all(
        torch.equal(pressing.cache.last.positions[i], by_hand.cache.last.positions[i]) for i in by_hand.cache.last.positions
    )
    with sinklab.applied(model, press) as whole_prompt:
        model(whole, use_cache=True)
    assert whole_prompt.cache.last.length == CONTEXT + QUESTION


@torch.no_grad()
def test_generate_with_a_question_answers_from_the_compressed_context():
    """``model.generate(prompt)`` inside ``applied(..., question=)`` gives the greedy answer of the
    question fed through the compressed context (kvpress's pipeline), with logits_to_keep and the
    positions generate passes."""
    model, press = tiny("llama"), P.SnapKV(0.5, keep_sinks=1, window_size=4)
    context, question, whole = prompt(1)
    with sinklab.applied(model, press, question=question):
        generated = model.generate(whole, max_new_tokens=4, do_sample=False, pad_token_id=1)[0, CONTEXT + QUESTION :].tolist()
    with sinklab.applied(model, press):
        out = model(question, cache=model(context, use_cache=True).cache)
        loop = []
        for _ in range(4):
            token = out.logits[:, -1:].argmax(-1)
            loop.append(token.item())
            out = model(token, cache=out.cache)
    assert generated == loop


def test_a_prompt_that_does_not_end_with_the_question_is_one_line_and_leaves_nothing_on_the_model():
    model = tiny("llama")
    _, question, whole = prompt()
    with pytest.raises(SinklabError, match="does not end with the question"), torch.no_grad():
        with sinklab.applied(model, P.Knorm(0.5), question=question[0, :-1]):
            model(whole, use_cache=True)
    with pytest.raises(SinklabError, match="question= takes the token ids"):
        with sinklab.applied(model, P.Knorm(0.5), question=torch.ones(2, 3)):
            pass
    with pytest.raises(SinklabError, match="with question=, labels= is not taken"), torch.no_grad():
        with sinklab.applied(model, P.Knorm(0.5), question=question):
            model(whole, labels=whole, use_cache=True)  # it was a shape-mismatch traceback
    assert not model._forward_hooks and not model._forward_pre_hooks
