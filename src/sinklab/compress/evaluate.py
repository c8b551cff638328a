"""One family of policies (a press at every ratio and keep_sinks, or a quantizer at every bits and
protect) over every input: each context is prefilled once, then compressed once per cell from that
prefill, and scored.

The prefill's cache and attention sums do not depend on the cell, so a cell costs a compression and
a short continuation, not a prefill. Cells of a press that keep the same keys in every layer (a
score that already ranks the sink high keeps the same keys with and without ``keep_sinks``) hold the
same cache, so their continuation is scored once and its scores shared. Each cell compresses a copy
of the dense cache (:func:`~sinklab.kvcache.branch`), so the dense cache is scored too (ratio 0) and
every cell starts from the same state.

While decoding (``--during decode``, :func:`score_decoding`) a cell is a decoding press: the prompt
is prefilled once, and each cell feeds the tokens after it (the text's next ``--decode-tokens``,
or a passkey prompt's filler before its question) through a copy of the prompt's cache, ``every``
tokens at a time, the press bringing the cache back to its budget between them. Feeding ``every``
tokens at once is decoding them one by one with no compression in between (the queries are causal;
tested), at a fraction of the forwards.
"""

from __future__ import annotations

from contextlib import nullcontext
from functools import partial
from typing import Iterator, Optional

import torch
import torch.nn.functional as F

from ..core.progress import progress_bar
from ..kvcache import DETECTED, DecodingState, attention_for, branch, recording, tallied
from ..stream import cache_bytes
from .tasks import ANSWER_TOKENS, Passkey, TextWindow, first_integer, key_ids


@torch.no_grad()
def prefill(model, context: torch.Tensor, policies: list):
    """The dense cache of ``context`` and, when any of ``policies`` scores from attention, the
    prefill's attention sums (one pass for all of them)."""
    wants, window_rows = recording(policies)
    if not wants:
        return model(context, use_cache=True, logits_to_keep=1).cache, None
    with tallied(model, context.shape[-1], "received" in wants, window_rows) as tally:
        cache = model(context, use_cache=True, logits_to_keep=1).cache
    return cache, tally


def compressed(cache, policy, tally) -> tuple:
    """A copy of the dense ``cache`` compressed by ``policy`` (a press or a quantizer), and what it did."""
    twin = branch(cache)
    return twin, policy.apply(twin, tally)


@torch.no_grad()
def continuation_nll(model, cache, window: TextWindow) -> torch.Tensor:
    """(CONTINUATION,) NLL in nats of each token after the first of the continuation, fed through ``cache``."""
    cont = window.continuation.to(model.device)
    logits = model(cont[:, :-1], cache=branch(cache)).logits[0].float()
    return F.cross_entropy(logits, cont[0, 1:], reduction="none").cpu()


@torch.no_grad()
def passkey_answer(model, tokenizer, cache, prompt: Passkey) -> dict:
    """The greedy answer after the question (``correct``: its first integer is the key), and the
    true key's log-probability (nats, summed over its tokens) and the rank of its first token
    (1: the model's first choice), teacher-forced."""
    question = prompt.question.to(model.device)
    out = model(question, cache=branch(cache))
    answer = []
    for _ in range(ANSWER_TOKENS):
        token = out.logits[:, -1:].argmax(-1)
        answer.append(token.item())
        out = model(token, cache=out.cache)
    truth = key_ids(tokenizer, prompt.key).to(model.device)
    logits = model(torch.cat([question, truth[:, :-1]], 1), cache=branch(cache)).logits[0, question.shape[-1] - 1 :].float()
    logprobs = logits.log_softmax(-1).gather(1, truth[0, :, None])[:, 0]
    rank = int((logits[0] > logits[0, truth[0, 0]]).sum()) + 1
    said = tokenizer.decode(answer, skip_special_tokens=True)
    return {"correct": first_integer(said) == prompt.key, "logprob": logprobs.sum().item(), "rank": rank}


def facts(compression) -> dict:
    """What a compression did: the fraction of keys kept, the cache's bytes against the dense
    cache's, the sinks protected."""
    return {
        "kept_fraction": compression.kept_fraction,
        "bytes_ratio": compression.bytes_after / compression.bytes_before,
        "sinks": compression.sinks,
    }


def score_inputs(model, tokenizer, policies: dict, windows, prompts) -> Iterator[tuple[str, str, dict]]:
    """(input name, cell, scores) for every input and every policy of ``policies`` (cell name ->
    a press or a quantizer, all of one family): ``ppl:<text>`` inputs give the continuation's mean
    NLL, ``passkey:<depth>:<key>`` inputs the answer's scores; each with the compression's facts."""
    inputs = [(f"ppl:{w.text}", w.context, partial(_continuation_scores, model, w)) for w in windows]
    inputs += [(f"passkey:{p.depth:g}:{p.key}", p.context, partial(passkey_answer, model, tokenizer, prompt=p)) for p in prompts]
    yield from score_each(model, policies, inputs)


def score_each(model, policies: dict, inputs) -> Iterator[tuple[str, str, dict]]:
    """(input name, cell, scores) for every (name, context ids, score) of ``inputs`` and every cell
    of ``policies``: the context prefilled once, compressed per cell, ``score(compressed cache)``
    with the compression's facts; cells that kept the same keys share one scoring."""
    family = list(policies.values())
    with attention_for(model, family):
        for name, context, score in inputs:
            cache, tally = prefill(model, context.to(model.device), family)
            scored: dict = {}  # kept keys -> the scores of a cell that kept them
            for cell, policy in policies.items():
                twin, compression = compressed(cache, policy, tally)
                same_cache = _kept_keys(policy, compression) or cell
                if same_cache not in scored:
                    scored[same_cache] = score(twin)
                yield name, cell, {**scored[same_cache], **facts(compression)}


def _kept_keys(policy, compression) -> Optional[bytes]:
    """What fixes a press's compressed cache (the positions each layer and head kept), or None for
    a quantizer, whose cache also depends on its bits and protection."""
    if policy.kind != "press":
        return None
    return b"".join(positions.numpy().tobytes() for positions in compression.positions.values())


def _continuation_scores(model, window: TextWindow, cache) -> dict:
    return {"nll": continuation_nll(model, cache, window).mean().item()}


# --------------------------------------------------------------------------- while decoding


def score_decoding(model, tokenizer, policies: dict, windows, prompts, every: int) -> Iterator[tuple[str, str, dict]]:
    """(input name, cell, scores) for every input and every cell of ``policies`` (cell name -> a
    :class:`~sinklab.kvcache.DecodingPress`, or None for the dense cache): ``ppl:<text>`` the mean
    NLL of the text's tokens after the prompt, ``passkey:<depth>:<key>`` the answer's scores after
    the filler; each with what the press left (:func:`decoded_facts`)."""
    inputs = [(f"ppl:{w.text}", w.context, partial(_decoded_nll, model, w, every)) for w in windows]
    inputs += [
        (f"passkey:{p.depth:g}:{p.key}", p.context, partial(_decoded_passkey, model, tokenizer, p, every)) for p in prompts
    ]
    detect = any(policy is not None and policy.sinks == DETECTED for policy in policies.values())
    for name, context, score in progress_bar(inputs, desc="decoding inputs", unit="input", leave=False):
        context = context.to(model.device)
        with torch.no_grad(), tallied(model, context.shape[-1], True, 0) if detect else nullcontext() as tally:
            cache = model(context, use_cache=True, logits_to_keep=1).cache
        for cell, policy in policies.items():
            twin = branch(cache)
            state = None if policy is None else DecodingState(model, policy)
            if state is not None:
                state.prompt_seen(context.shape[-1], tally, twin)
            scores = score(twin, state)
            yield name, cell, {**scores, **decoded_facts(state, twin, cache_bytes(cache) / context.shape[-1])}


def decoded_facts(state: Optional[DecodingState], cache, bytes_per_token: float) -> dict:
    """What a decoding press left: the fraction of the tokens seen its last compression kept, the
    cache's bytes at the end against a dense cache of every token seen (the prompt's bytes per
    token), and the sinks it held apart."""
    last = None if state is None else state.last
    dense = bytes_per_token * cache.get_seq_length()
    return {
        "kept_fraction": 1.0 if last is None else last.kept_fraction,
        "bytes_ratio": cache_bytes(cache) / dense,
        "sinks": [] if last is None else last.sinks,
    }


@torch.no_grad()
def fed_through(model, cache, tokens: torch.Tensor, state: Optional[DecodingState], every: int) -> Iterator[torch.Tensor]:
    """Each chunk's logits (1, n, V) of ``tokens`` fed through ``cache`` ``every`` at a time, the
    decoding press's ``state`` pressing the cache between chunks (None: the dense cache grows)."""
    try:
        for start in range(0, tokens.shape[-1], every):
            chunk = tokens[:, start : start + every].to(model.device)
            if state is not None:
                state.before_step()
            yield model(chunk, cache=cache).logits
            if state is not None:
                state.after_step(chunk.shape[-1], cache)
    finally:
        if state is not None:
            state.close()


def _decoded_nll(model, window: TextWindow, every: int, cache, state) -> dict:
    """The mean NLL (nats) of the text's tokens after the prompt, each predicted through the cache
    as the press left it."""
    cont = window.continuation
    targets = cont[0, 1:].split(every)
    nll = [
        F.cross_entropy(logits[0].float(), target.to(logits.device), reduction="sum").item()
        for logits, target in zip(fed_through(model, cache, cont[:, :-1], state, every), targets)
    ]
    return {"nll": sum(nll) / (cont.shape[-1] - 1)}


def _decoded_passkey(model, tokenizer, prompt: Passkey, every: int, cache, state) -> dict:
    """The passkey's scores when its question comes after the filler, fed through the cache as
    the press keeps it (the question and the answer then read the cache as the filler left it)."""
    for _ in fed_through(model, cache, prompt.after, state, every):
        pass
    return passkey_answer(model, tokenizer, cache, prompt)
