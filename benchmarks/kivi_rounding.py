"""How far float32 rounding moves ``kv_2bit``'s perplexity cells (BENCHMARKS.md 12, issue 39).

``kv_2bit`` judges KIVI 2-bit with and without the first token protected by the perplexity of one
256-token window after a 1,024-token context. The same code gave 1.193 / 1.180 in the installation
that made the published leaderboard files and 1.244 / 1.143 in a later one, whose full caches'
perplexities differ in the sixth digit. This scales every weight of the default model by
``1 + noise * N(0, 1)`` (one fixed seed per draw and parameter), far below what the full cache's
perplexity notices, and records per draw and text the full cache's perplexity and each KIVI cell's
against it: the spread that one window's figure has under rounding-sized differences. Draw -1 is
the model as loaded.

Run: `.venv/bin/python benchmarks/kivi_rounding.py [--draws 10 --noise 1e-6 --context 1024]`
(about 10 minutes on this machine)
"""

from __future__ import annotations

import argparse
import math
import statistics

import torch
from common import record

from sinklab.compress.evaluate import compressed, continuation_nll, prefill
from sinklab.compress.tasks import text_window
from sinklab.kvcache import KIVI
from sinklab.models.hf import load_model

PROTECT = (0, 1)  # kv_2bit's cells


@torch.no_grad()
def perturbed(model, original: dict, draw: int, noise: float) -> None:
    """The loaded weights (``original``), each scaled by 1 + noise * N(0, 1) unless ``draw`` is -1."""
    for index, (name, parameter) in enumerate(model.named_parameters()):
        parameter.copy_(original[name])
        if draw >= 0:
            generator = torch.Generator().manual_seed(draw * 100_003 + index)
            parameter.mul_(1 + noise * torch.randn(parameter.shape, generator=generator))


@torch.no_grad()
def cells(model, tokenizer, text: str, context: int) -> dict:
    """The full cache's perplexity and each KIVI cell's against it, on one window of ``text``."""
    window = text_window(tokenizer, text, context, "auto")
    policies = {p: KIVI(2, p, group_size=32, residual=128) for p in PROTECT}
    cache, tally = prefill(model, window.context.to(model.device), list(policies.values()))
    dense = continuation_nll(model, cache, window).mean().item()
    found = {"dense_ppl": math.exp(dense)}
    for protect, policy in policies.items():
        nll = continuation_nll(model, compressed(cache, policy, tally)[0], window).mean().item()
        found[f"protect{protect}"] = math.exp(nll - dense)
    found["gain"] = found["protect0"] / found["protect1"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--noise", type=float, default=1e-6, help="relative weight noise (float32's step is 6e-8)")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--texts", default="shakespeare,pydoc")
    args = parser.parse_args()
    loaded = load_model()
    model, tokenizer = loaded.model, loaded.tokenizer
    original = {name: p.detach().clone() for name, p in model.named_parameters()}
    texts = args.texts.split(",")
    draws = []
    for draw in range(-1, args.draws):
        perturbed(model, original, draw, args.noise)
        draws.append({"draw": draw, **{text: cells(model, tokenizer, text, args.context) for text in texts}})
        print(draws[-1], flush=True)
    spread = {
        text: {key: [min(values), max(values)] for key in ("dense_ppl", "protect0", "protect1", "gain")
               for values in [[d[text][key] for d in draws]]}
        for text in texts
    }  # fmt: skip
    for text in texts:
        first = draws[0][text]["dense_ppl"]
        spread[text]["dense_ppl_max_relative_change"] = max(abs(d[text]["dense_ppl"] / first - 1) for d in draws)
        spread[text]["gain_stdev"] = statistics.stdev(d[text]["gain"] for d in draws) if len(draws) > 1 else None
    record(
        "kivi_rounding",
        {"context": args.context, "noise": args.noise, "threads": torch.get_num_threads(), "draws": draws, "spread": spread},
    )


if __name__ == "__main__":
    main()
