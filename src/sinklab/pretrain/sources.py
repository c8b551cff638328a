"""Where pretraining data comes from: a text corpus tokenised once (:mod:`.tokens`), optionally
with a fixed first token in every window, or the synthetic Bigram-Backcopy task
(:mod:`.bigram_backcopy`). Both offer what training needs: ``vocab_size``, ``batch(split, batch,
seq_len, generator)``, ``check_windows``, ``bits_per_byte``, ``unigram_val_loss``, ``decode``,
``describe`` and ``task_metrics`` (the task's own figures on the validation batches)."""

from __future__ import annotations

from typing import Union

from ..core.corpus import check_corpus
from ..core.errors import check
from .bigram_backcopy import CORPUS_NAME, BigramBackcopy
from .tokens import TokenData, load_token_data

DataSource = Union[TokenData, BigramBackcopy]


def load_source(corpus: str, tokenizer: str, bos: bool, triggers: int) -> DataSource:
    """The data of a pretraining run; clear errors for options that do not fit the corpus."""
    if corpus == CORPUS_NAME:
        return _bigram_backcopy(tokenizer, bos, triggers)
    data = load_token_data(corpus, tokenizer)
    return data.with_bos() if bos else data


def check_source(corpus: str, tokenizer: str, bos: bool, triggers: int, seq_len: int) -> None:
    """The refusals of :func:`load_source` and of its windows that need no tokenised text, before a
    run directory is claimed: the Bigram-Backcopy task is built (in a second; its vocabulary bounds
    the trigger count); a text corpus's file or folder must exist."""
    if corpus == CORPUS_NAME:
        _bigram_backcopy(tokenizer, bos, triggers).check_windows(seq_len)
    else:
        check_corpus(corpus)


def _bigram_backcopy(tokenizer: str, bos: bool, triggers: int) -> BigramBackcopy:
    check(tokenizer == "default", f"--corpus {CORPUS_NAME} has its own character vocabulary; drop --tokenizer {tokenizer}")
    check(not bos, f"--corpus {CORPUS_NAME} sequences always start with BOS; drop --bos")
    return BigramBackcopy(triggers)
