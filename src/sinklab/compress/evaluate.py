"""One family of policies (a press at every ratio and keep_sinks, or a quantizer at every bits and
protect) over every input: each context is prefilled once, then compressed once per cell from that
prefill, and scored.

The prefill's cache and attention sums do not depend on the cell, so a cell costs a compression and
a short continuation, not a prefill. Cells of a press that keep the same keys in every layer (a
score that already ranks the sink high keeps the same keys with and without ``keep_sinks``) hold the
same cache, so their continuation is scored once and its scores shared. Each cell compresses a copy
of the dense cache (:func:`~sinklab.kvcache.branch`), so the dense cache is scored too (ratio 0) and
every cell starts from the same state.
"""

from __future__ import annotations

from functools import partial
from typing import Iterator, Optional

import torch
import torch.nn.functional as F

from ..kvcache import attention_for, branch, recording, tallied
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
