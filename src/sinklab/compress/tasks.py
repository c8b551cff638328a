"""What a compressed cache is judged by, built offline: a context and what follows it.

* ``ppl``: ``C`` tokens of a text (the default corpus, and the outside-corpus text ``adapt``
  uses), then the next :data:`CONTINUATION` tokens teacher-forced through the compressed cache;
  their perplexity against the full cache's.
* while decoding (``--during decode``): the ``ppl`` text's next ``--decode-tokens`` tokens, and
  :data:`PASSKEY_FILLER` more filler tokens between the passkey prompt and its question, are fed
  through the cache a decoding press holds to its budget (:mod:`.evaluate`).
* ``passkey``: the Landmark-attention retrieval prompt (Mohtashami and Jaggi 2023; its
  ``run_test.py`` strings): a task description, repeated filler sentences with "The pass key is
  NNNNN. Remember it. NNNNN is the pass key." at a fixed depth, then the question "What is the
  pass key? The pass key is". The context (everything before the question) is compressed; the
  question and the answer are not. Departures: fixed depths (10, 50, 90 % of the filler) instead
  of random ones, 5-digit keys (the original draws 1 to 50,000), and lengths counted in tokens.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Optional

import torch

from ..core.corpus import load_corpus, spaced_windows
from ..core.errors import check
from ..stream import stream_tokens

CONTINUATION = 256
MIN_CONTEXT = 128  # the shortest context: room for the passkey template and SnapKV's window
#: The judges of a compressed context (``--task``): its perplexity, and passkey retrieval.
JUDGES = ("ppl", "passkey")
DEPTHS = (0.1, 0.5, 0.9)

TASK_DESCRIPTION = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
    "I will quiz you about the important information there."
)
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
QUESTION = "What is the pass key? The pass key is"
ANSWER_TOKENS = 8  # greedy tokens read for the answer's first integer
#: Filler tokens fed after a passkey prompt, before its question, when the cache is pressed while decoding.
PASSKEY_FILLER = 1024


@dataclass(frozen=True)
class TextWindow:
    """A ``ppl`` input: ``ids`` (1, C + scored + 1): the context, then what is scored (``scored``
    tokens predicted, :data:`CONTINUATION` after a prefill press)."""

    text: str
    ids: torch.Tensor
    scored: int = CONTINUATION

    @property
    def context(self) -> torch.Tensor:
        return self.ids[:, : -self.scored - 1]

    @property
    def continuation(self) -> torch.Tensor:
        return self.ids[:, -self.scored - 1 :]


@dataclass(frozen=True)
class Passkey:
    """A ``passkey`` input: the ``context`` ids (1, about C), the ``question`` ids (1, Q), the
    ``key`` and where it sits (``depth``, a fraction of the filler); ``after``: (1, F) filler ids
    fed between the context and the question (none after a prefill press)."""

    context: torch.Tensor
    question: torch.Tensor
    key: int
    depth: float
    after: Optional[torch.Tensor] = None


def positions_read(contexts, decode_tokens: int = 0) -> int:
    """The positions a run at ``contexts`` feeds the model: the longest context, then the first
    :data:`CONTINUATION` tokens of the text after it, or ``decode_tokens`` of them (and, for the
    passkey, :data:`PASSKEY_FILLER` filler tokens, the question and :data:`ANSWER_TOKENS`) while
    decoding (the last token of a text is only a target, never fed). A passkey prompt after a
    prefill press reads fewer: about the context (give or take a filler sentence), the question and
    :data:`ANSWER_TOKENS`, shorter than that even in bytes."""
    if decode_tokens:
        return max(contexts) + max(decode_tokens, PASSKEY_FILLER + 32)  # 32: the question and the answer, with room
    return max(contexts) + CONTINUATION


def text_window(tokenizer, corpus: str, length: int, bos: str, scored: int = CONTINUATION) -> TextWindow:
    """The first ``length`` tokens of ``corpus`` (after BOS unless ``bos`` is no) and the
    ``scored + 1`` tokens after them."""
    return TextWindow(corpus, stream_tokens(tokenizer, corpus, length + scored + 1, bos)[None], scored)


def calibration_windows(tokenizer, corpus: str, skip: int, length: int, count: int) -> torch.Tensor:
    """(count, length) windows of the corpus for static scales, evenly spaced over the documents
    after those the ``ppl`` windows read (the first ``skip`` tokens in name order, whole documents
    left out), so the scales never saw the text they are judged on."""
    ids: list[int] = []
    read = 0
    for doc in sorted(load_corpus(corpus), key=lambda d: d.name):
        tokens = _ids(tokenizer, doc.text)
        if read < skip:  # a document the ppl windows read from
            read += len(tokens)
            continue
        ids += tokens
        if len(ids) >= 8 * length * count:  # plenty to spread the windows over
            break
    check(
        len(ids) >= length * count,
        f"{corpus!r} has too few tokens after its first {skip} to calibrate {count} windows of {length}",
    )
    return spaced_windows(torch.tensor(ids), length, count)


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def passkey_prompts(tokenizer, length: int, keys_per_depth: int, seed: int, bos: str, after: int = 0) -> list[Passkey]:
    """``keys_per_depth`` prompts at each depth of :data:`DEPTHS`, their contexts ``length``
    tokens long give or take one filler sentence; keys drawn from ``seed``; ``after`` filler tokens
    (whole sentences, cut to that length) to feed before each question."""
    lead = [tokenizer.bos_token_id] if bos != "no" and tokenizer.bos_token_id is not None else []
    head = lead + _ids(tokenizer, TASK_DESCRIPTION + "\n")
    filler = _ids(tokenizer, " " + FILLER)
    question = torch.tensor([_ids(tokenizer, "\n" + QUESTION)])
    draw = random.Random(seed)
    prompts = []
    for depth in DEPTHS:
        for _ in range(keys_per_depth):
            key = draw.randint(10000, 99999)
            needle = _ids(tokenizer, f"\nThe pass key is {key}. Remember it. {key} is the pass key.\n")
            repeats = max(2, (length - len(head) - len(needle)) // len(filler))
            before = round(repeats * depth)
            ids = head + filler * before + needle + filler * (repeats - before)
            more = torch.tensor([(filler * (after // len(filler) + 1))[:after]]) if after else None
            prompts.append(Passkey(torch.tensor([ids]), question, key, depth, more))
    shortest = prompts[0].context.shape[-1]
    check(
        shortest <= length + len(filler),
        f"--context {length} is too short for the passkey task: its shortest prompt (the template and two filler "
        f"sentences) is {shortest} tokens with this tokenizer; give a longer --context, or --task ppl",
    )
    return prompts


def first_integer(text: str) -> Optional[int]:
    """The answer a model gave: the first integer in its text (None: it gave none)."""
    found = re.search(r"\d+", text)
    return int(found.group()) if found else None


def key_ids(tokenizer, key: int) -> torch.Tensor:
    """The true answer's tokens after the question, as the model would write them (" NNNNN")."""
    return torch.tensor([_ids(tokenizer, f" {key}")])
