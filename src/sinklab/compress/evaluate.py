"""One press family over every input: each context is prefilled once, then compressed once per
(ratio, keep_sinks) cell from that prefill, and scored.

The prefill's cache and attention sums do not depend on the cell, so a cell costs a compression
and a short continuation, not a prefill: a press's whole row of the keep-sink table costs about
one prefill per input. Each cell compresses a copy of the dense cache (:func:`~sinklab.press.branch`),
so the dense cache is scored too (ratio 0) and every cell starts from the same state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

import torch
import torch.nn.functional as F

from ..press import Press, attention_for, branch, compress
from ..press.attention import tallied
from .tasks import ANSWER_TOKENS, Passkey, TextWindow, first_integer, key_ids


@dataclass(frozen=True)
class Cell:
    """One cell of the keep-sink table for a press: the fraction removed and the sinks kept."""

    ratio: float
    keep_sinks: int | str

    @property
    def key(self) -> str:
        return f"{self.ratio:g}/{self.keep_sinks}"


@torch.no_grad()
def prefill(model, context: torch.Tensor, presses: list[Press]):
    """The dense cache of ``context`` and, when any of ``presses`` scores from attention, the
    prefill's attention sums (one pass for all of them)."""
    wants = frozenset().union(*(p.recording for p in presses))
    window_rows = max(p.window_rows for p in presses)
    if not wants:
        return model(context, use_cache=True, logits_to_keep=1).cache, None
    with tallied(model, context.shape[-1], "received" in wants, window_rows) as tally:
        cache = model(context, use_cache=True, logits_to_keep=1).cache
    return cache, tally


def cells_of(press: Press, cells: list[Cell]) -> list[Press]:
    return [replace(press, ratio=cell.ratio, keep_sinks=cell.keep_sinks) for cell in cells]


def compressed(cache, press: Press, tally) -> tuple:
    """A compressed copy of the dense ``cache`` and what the compression did."""
    twin = branch(cache)
    return twin, compress(twin, press, tally)


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
    return {
        "kept_fraction": compression.kept_fraction,
        "bytes_ratio": compression.bytes_after / compression.bytes_before,
        "sinks": compression.sinks,
    }


def score_inputs(model, tokenizer, press: Press, cells: list[Cell], windows, prompts) -> Iterator[tuple[str, Cell, dict]]:
    """(input name, cell, scores) for every input and cell: ``ppl:<text>`` inputs give the
    continuation's mean NLL, ``passkey:<depth>:<key>`` inputs the answer's scores; each with the
    compression's facts."""
    pressed = cells_of(press, cells)
    with attention_for(model, press):
        for window in windows:
            cache, tally = prefill(model, window.context.to(model.device), pressed)
            for cell, cell_press in zip(cells, pressed):
                twin, compression = compressed(cache, cell_press, tally)
                yield (
                    f"ppl:{window.text}",
                    cell,
                    {"nll": continuation_nll(model, twin, window).mean().item(), **facts(compression)},
                )
        for prompt in prompts:
            cache, tally = prefill(model, prompt.context.to(model.device), pressed)
            for cell, cell_press in zip(cells, pressed):
                twin, compression = compressed(cache, cell_press, tally)
                name = f"passkey:{prompt.depth:g}:{prompt.key}"
                yield name, cell, {**passkey_answer(model, tokenizer, twin, prompt), **facts(compression)}
