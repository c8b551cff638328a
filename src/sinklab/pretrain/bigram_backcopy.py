"""The Bigram-Backcopy task (Guo et al. 2024, "Active-dormant attention heads", arXiv 2410.13835):
a corpus that demands a "sometimes do nothing" head from the first steps, so sinks form at CPU scale.

Vocabulary: the characters of the shipped Shakespeare texts after normalisation (NFKD to ASCII;
letters, space, newline and ``.,;:!?'-`` kept; every other character becomes a space; runs of
spaces and of three or more newlines collapsed), plus one BOS token (the last id).

A sequence is BOS, then a first-order Markov chain over the characters with the corpus's bigram
frequencies as transition probabilities, except after a trigger: the ``k`` most frequent
characters are triggers, and the token right after a trigger copies the token right before the
trigger (back-copy). The first character after BOS is drawn from the unigram frequencies of the
non-triggers, so every trigger has a character before it. The copy head has work only after a
trigger and must do nothing everywhere else: the language-model twin of the Ran-Milo trigger task.

The best achievable loss is exact: at a copy position the next token is certain (loss 0); anywhere
else it is -log P(next | previous) under the chain, whose mean over a sample estimates the entropy.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Optional

import torch

from ..core.corpus import shakespeare_documents
from ..core.errors import check

CORPUS_NAME = "bb"
PUNCTUATION = ".,;:!?'-"
#: The ASCII characters :func:`normalise` turns into spaces, for one ``str.translate`` instead of
#: a test per character (the shipped corpus has five million).
TO_SPACE = {code: " " for code in range(128) if not (chr(code).isalpha() or chr(code) in " \n" + PUNCTUATION)}


def normalise(text: str) -> str:
    """NFKD to ASCII; letters, space, newline and PUNCTUATION kept; anything else a space."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().translate(TO_SPACE)
    text = re.sub(r" {2,}", " ", text)  # not " +": rewriting every single space took most of the time
    return re.sub(r"\n{3,}", "\n\n", text)


@functools.lru_cache(maxsize=1)
def _shakespeare_bigrams() -> tuple[str, torch.Tensor]:
    """(characters, bigram counts (V, V)) of the normalised shipped corpus. The characters in
    code order and their ids come from the ASCII codes as one tensor: every job process of a
    sweep builds this before it trains, and a Python loop over the text took seconds."""
    text = normalise("\n\n".join(d.text for d in shakespeare_documents()))
    codes = torch.frombuffer(bytearray(text.encode("ascii")), dtype=torch.uint8).long()
    present = torch.bincount(codes, minlength=128).nonzero().flatten()
    chars = bytes(present.tolist()).decode("ascii")
    id_of = torch.zeros(128, dtype=torch.long)
    id_of[present] = torch.arange(len(chars))
    ids = id_of[codes]
    counts = torch.zeros(len(chars) * len(chars), dtype=torch.float64)
    counts.index_add_(0, ids[:-1] * len(chars) + ids[1:], torch.ones(len(ids) - 1, dtype=torch.float64))
    return chars, counts.view(len(chars), len(chars))


@dataclass
class BigramBackcopy:
    """The task as a data source for ``sinklab pretrain`` (the interface of :class:`~.tokens.TokenData`).

    ``chars`` and ``counts`` (V, V) give the chain; by default the shipped Shakespeare bigrams."""

    triggers: int = 3
    chars: Optional[str] = None
    counts: Optional[torch.Tensor] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.chars is None:
            self.chars, self.counts = _shakespeare_bigrams()
        counts = self.counts.double()
        V = len(self.chars)
        check(
            1 <= self.triggers < V,
            f"--bb-triggers must lie in [1, {V - 1}] (the vocabulary has {V} characters), got {self.triggers}",
        )
        unigram = counts.sum(1)
        self.trigger_ids = unigram.argsort(descending=True)[: self.triggers]
        self.is_trigger = torch.zeros(V + 1, dtype=torch.bool)
        self.is_trigger[self.trigger_ids] = True
        self.transition = (counts / counts.sum(1, keepdim=True).clamp_min(1.0)).float()  # (V, V) rows: P(next | previous)
        start = unigram.clone()
        start[self.trigger_ids] = 0
        self.start = (start / start.sum()).float()
        self.bos = V
        self.vocab_size = V + 1
        self.meta = {
            "corpus": CORPUS_NAME,
            "characters": self.chars,
            "triggers": [self.chars[i] for i in self.trigger_ids.tolist()],
            "bos_id": self.bos,
        }

    # -- generation -------------------------------------------------------------------------

    def batch(self, split: str, batch: int, seq_len: int, generator: torch.Generator) -> torch.Tensor:
        """(batch, seq_len + 1) sequences, BOS first; a pure function of ``generator``'s state
        (training passes a generator seeded by (seed, step), validation a fixed one)."""
        ids = torch.empty(batch, seq_len + 1, dtype=torch.long)
        ids[:, 0] = self.bos
        uniform = torch.rand(batch, seq_len, generator=generator)
        ids[:, 1] = _draw(self.start.expand(batch, -1), uniform[:, 0])
        for t in range(2, seq_len + 1):
            drawn = _draw(self.transition[ids[:, t - 1]], uniform[:, t - 1])
            ids[:, t] = torch.where(self.is_trigger[ids[:, t - 1]], ids[:, t - 2], drawn)
        return ids

    def copy_positions(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, T) True where the token is a back-copy (the previous token is a trigger)."""
        copies = torch.zeros_like(ids, dtype=torch.bool)
        copies[:, 2:] = self.is_trigger[ids[:, 1:-1]]
        return copies

    def optimal_nll(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, T - 1) NLL of each next token under the true process: 0 at copies, -log P(next | prev) elsewhere."""
        prev, nxt = ids[:, :-1], ids[:, 1:]
        p = torch.where(
            prev == self.bos,
            self.start[nxt.clamp_max(self.bos - 1)],
            self.transition[prev.clamp_max(self.bos - 1), nxt.clamp_max(self.bos - 1)],
        )
        nll = -p.clamp_min(1e-30).double().log()
        return torch.where(self.copy_positions(ids)[:, 1:], torch.zeros_like(nll), nll)

    # -- what training and the summary ask of a data source ----------------------------------

    def check_windows(self, seq_len: int) -> None:
        check(seq_len >= 4, f"--tokens must be at least 4 for --corpus {CORPUS_NAME}, got {seq_len}")

    def bits_per_byte(self, loss_nats: float) -> float:
        """One ASCII character per token: nats per token as bits per byte."""
        return loss_nats / math.log(2)

    def unigram_val_loss(self, sequences: int = 64, seq_len: int = 256) -> float:
        """Entropy of the character frequencies of a fixed sample: the loss of a model that ignores context."""
        ids = self.batch("val", sequences, seq_len, torch.Generator().manual_seed(4321))[:, 1:].flatten()
        freq = torch.bincount(ids, minlength=self.vocab_size).double() / ids.numel()
        return float(-(freq * freq.clamp_min(1e-30).log()).sum())

    @torch.no_grad()
    def task_metrics(self, model, batches: list[torch.Tensor]) -> dict:
        """On the validation batches: the exact optimum and the gap to it, copy accuracy at
        post-trigger positions, and per layer and head the mean attention on BOS at query rows whose
        token is not a trigger and at rows whose token is one (layers x heads, like first_token_mass),
        and those two masses for the sink head: the head whose BOS mass differs most between them."""
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        loss = optimum = correct = copies = 0.0
        bos_sums = rows = None
        n_prefix = model.cfg.sink_tokens  # learned sink tokens come before BOS
        for ids in batches:
            logits, weights = model(ids[:, :-1].to(device), need_weights=True)
            targets = ids[:, 1:]
            loss += torch.nn.functional.cross_entropy(logits.float().cpu().transpose(1, 2), targets).item()
            optimum += self.optimal_nll(ids).mean().item()
            is_copy = self.copy_positions(ids)[:, 1:]
            correct += (logits.argmax(-1).cpu() == targets)[is_copy].sum().item()
            copies += is_copy.sum().item()
            trigger_row = self.is_trigger[ids[:, :-1]].float()  # (B, T): the query's own token
            query = torch.ones_like(trigger_row)
            query[:, 0] = 0.0  # BOS itself can only attend to itself
            on_bos = torch.stack([w[:, :, n_prefix:, n_prefix].float().cpu() for w in weights], dim=1)  # (B, L, H, T)
            sums = torch.stack(
                [
                    (on_bos * (query * (1 - trigger_row))[:, None, None]).sum((0, 3)),
                    (on_bos * (query * trigger_row)[:, None, None]).sum((0, 3)),
                ]
            )
            counts = torch.stack([(query * (1 - trigger_row)).sum(), (query * trigger_row).sum()])
            bos_sums, rows = (sums, counts) if bos_sums is None else (bos_sums + sums, rows + counts)
        model.train(was_training)
        n = len(batches)
        bos = bos_sums / rows.clamp_min(1).view(2, 1, 1)
        layer, head = divmod(int((bos[0] - bos[1]).argmax()), bos.shape[-1])  # the copy head: sinks where it has nothing to copy
        return {
            "val_loss_optimum": optimum / n,
            "val_loss_gap": loss / n - optimum / n,
            "copy_accuracy": correct / max(copies, 1),
            "bos_mass_nontrigger": bos[0].tolist(),
            "bos_mass_trigger": bos[1].tolist(),
            "sink_head": {"layer": layer, "head": head},
            "sink_head_bos_mass_nontrigger": bos[0, layer, head].item(),
            "sink_head_bos_mass_trigger": bos[1, layer, head].item(),
        }

    def decode(self, ids: list[int]) -> str:
        return "".join("<bos>" if i == self.bos else self.chars[i] for i in ids)

    def describe(self) -> dict:
        return dict(self.meta)


def _draw(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """One category per row of ``probs`` (B, V) by inverse CDF with the given uniforms (B,)."""
    cdf = probs.cumsum(-1)
    return torch.searchsorted(cdf, (uniform * cdf[:, -1]).unsqueeze(-1)).squeeze(-1).clamp_max(probs.shape[-1] - 1)
