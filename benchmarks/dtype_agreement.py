"""How far a scan in another dtype (or on another device) is from the float32 CPU scan of the same
model on the same tokens: first-token mass per (layer, head), Sink_1^0.3, and the largest massive
activation. Issue 24's bar: a bfloat16 scan within 0.02 first-token mass of float32.

Run: `.venv/bin/python benchmarks/dtype_agreement.py` (CPU, bfloat16) or, on a GPU machine,
`... --device cuda --dtypes float32,bfloat16` (also what `make gpu-check` runs).
"""

from __future__ import annotations

import argparse

import torch
from common import record

import sinklab
from sinklab.models.hf import load_model
from sinklab.scan import largest_massive_activation


def scan(model, tokenizer, tokens: int, batch: int) -> dict:
    return sinklab.scan_model(model, tokenizer, tokens=tokens, batch=batch).summary


def agreement(reference: dict, other: dict) -> dict:
    ref, got = torch.tensor(reference["first_token_mass"]), torch.tensor(other["first_token_mass"])
    gap = (ref - got).abs()
    return {
        "first_token_mass_max_abs_diff": gap.max().item(),
        "first_token_mass_mean_abs_diff": gap.mean().item(),
        "sink_rate": other["sink_rate"]["value"],
        "largest_massive": largest_massive_activation(other),
        "max_abs_first_by_layer_max_rel_diff": max(
            abs(a - b) / max(abs(a), 1e-9) for a, b in zip(reference["max_abs_first"], other["max_abs_first"])
        ),
        "seconds_record": other["seconds"]["record"],
    }


def compare(device: str, dtypes: list[str], tokens: int, batch: int) -> dict:
    """The CPU float32 reference, then each dtype on ``device``: one row."""
    reference_model = load_model(None, device="cpu", dtype="float32")
    reference = scan(reference_model.model, reference_model.tokenizer, tokens, batch)
    del reference_model
    rows = {}
    for dtype in dtypes:
        loaded = load_model(None, device=device, dtype=dtype)
        rows[dtype] = agreement(reference, scan(loaded.model, loaded.tokenizer, tokens, batch))
        del loaded
    return {
        "device": device,
        "tokens": tokens,
        "batch": batch,
        "reference": {
            "sink_rate": reference["sink_rate"]["value"],
            "largest_massive": largest_massive_activation(reference),
            "seconds_record": reference["seconds"]["record"],
        },
        "by_dtype": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtypes", default="bfloat16", help="comma-separated, compared with float32 on the CPU")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    record("dtype_agreement", compare(args.device, args.dtypes.split(","), args.tokens, args.batch))


if __name__ == "__main__":
    main()
