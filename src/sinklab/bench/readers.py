"""Readers several tasks share: a capability's summary entries as a task's metrics."""

from __future__ import annotations

from .task import metric, spread_of


def compressed_cell(cell: dict, name: str, summary: dict) -> dict:
    """A compressed or quantized cache's cell of ``sinklab compress`` as metrics named ``name/...``:
    the perplexity ratios after it on the run's corpus and on its outside text (the names the
    summary says it read), and passkey retrieval."""
    found = {f"{name}/ppl_ratio": metric(cell["ppl_ratio"][summary["corpus"]], better="lower")}
    if summary["outside"] is not None:
        found[f"{name}/ppl_ratio_outside"] = metric(cell["ppl_ratio"][summary["outside"]], better="lower")
    passkey = cell.get("passkey")
    if passkey:
        found[f"{name}/passkey_accuracy"] = metric(
            passkey["accuracy"], n=len(passkey["logprobs"]), over="prompts", better="higher"
        )
        found[f"{name}/key_logprob"] = spread_of(passkey["logprobs"], over="prompts", better="higher")
    return found
