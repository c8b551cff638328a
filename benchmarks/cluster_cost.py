"""What a paper-scale mitigation sweep would cost on a cluster, from measured per-step costs.

The sweep: ``--variants`` x ``--seeds`` independent runs (default 9 x 8 = 72 jobs, one Slurm array)
of a ~100M-parameter sinklab model (d 768, 12 layers, 12 heads, 1,024-token windows, the default
model's 49,152-token vocabulary), each trained on ``--tokens-per-run`` tokens (default: 20 per
parameter, the compute-optimal ratio of Hoffmann et al. 2022). Training costs ~6 FLOPs per
parameter per token (attention scores add about 6 x layers x T x d per token, counted too).

Measured here: the full training step (forward, backward, clipping, AdamW) of that model on this
machine's CPU, a few steps after a warm-up step. Read from results: the H200 throughput of the
small text-sweep model (``results/pretrain_sweep.jsonl``), whose achieved FLOP rate is a floor for
what a GPU sustains (a 3M-parameter model uses a GPU poorly). Assumed, and labelled so: 40 % of an
H100's dense bf16 peak (989 TFLOP/s), a common figure for well-tuned training of this size.

Run: `.venv/bin/python benchmarks/cluster_cost.py [--steps 3] [--batch 2] [--variants 9] [--seeds 8]`
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from common import RESULTS, record

from sinklab.models.native import Transformer
from sinklab.pretrain import PretrainConfig
from sinklab.pretrain.train import lm_loss, make_optimizer

VOCAB = 49152  # the default model's tokenizer
TEXT_SWEEP_VOCAB = 19087  # the compact vocabulary of the text sweep the H200 row measured
H100_BF16_PEAK = 989e12  # dense, FLOP/s
ASSUMED_MFU = 0.40


def flops_per_token(cfg: PretrainConfig, params: int) -> float:
    """6 N for the weights plus 6 L T d for the attention scores and their weighted sums (causal: half of 12 L T d)."""
    return 6 * params + 6 * cfg.n_layers * cfg.seq_len * cfg.d_model


def computing_params(model: Transformer) -> int:
    """Parameters a token's forward multiplies by: all but the input embedding, plus the tied output layer."""
    return (
        sum(p.numel() for name, p in model.named_parameters() if "embed" not in name) + model.cfg.vocab_size * model.cfg.d_model
    )


def cpu_step(cfg: PretrainConfig, steps: int) -> tuple[float, int]:
    """Seconds per training step (median after one warm-up step) and :func:`computing_params`."""
    model = Transformer(cfg.model_config(VOCAB))
    params = computing_params(model)
    opt = make_optimizer(model, cfg)
    batch = torch.randint(0, VOCAB, (cfg.batch, cfg.seq_len + 1))
    times = []
    for _ in range(steps + 1):
        clock = time.perf_counter()
        loss = lm_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        times.append(time.perf_counter() - clock)
    return sorted(times[1:])[len(times[1:]) // 2], params


def h200_small_model_rate() -> dict:
    """Achieved FLOP/s of the text sweep's softmax runs on the lent H200 (the row's tokens/s and model)."""
    rows = (json.loads(line) for line in (RESULTS / "pretrain_sweep.jsonl").open())
    row = next(r for r in rows if r["machine"].get("gpu") == "NVIDIA H200")
    softmax = next(v for v in row["by_variant"] if v["variant"] == "softmax")
    cfg = PretrainConfig(corpus="shakespeare")
    params = computing_params(Transformer(cfg.model_config(TEXT_SWEEP_VOCAB)))
    return {
        "git": row["git"],
        "tokens_per_s": softmax["tokens_per_s"],
        "params": params,
        "flops_per_s": softmax["tokens_per_s"] * flops_per_token(cfg, params),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="timed CPU steps (after one warm-up step)")
    parser.add_argument("--batch", type=int, default=2, help="sequences per CPU step")
    parser.add_argument("--variants", type=int, default=9)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--tokens-per-run", type=float, default=None, help="default: 20 per parameter")
    args = parser.parse_args()
    cfg = PretrainConfig(corpus="shakespeare", d_model=768, n_layers=12, n_heads=12, seq_len=1024, batch=args.batch)
    seconds, params = cpu_step(cfg, args.steps)
    per_token = flops_per_token(cfg, params)
    tokens = args.tokens_per_run or 20 * params
    jobs = args.variants * args.seeds
    total_flops = jobs * tokens * per_token
    cpu_rate = cfg.batch * cfg.seq_len * per_token / seconds
    gpu = h200_small_model_rate()
    rates = {
        "this CPU (measured, 2 cores)": cpu_rate,
        "H200 at the small model's measured rate (floor)": gpu["flops_per_s"],
        f"H100 at an assumed {ASSUMED_MFU:.0%} of bf16 peak": ASSUMED_MFU * H100_BF16_PEAK,
    }
    hours = {name: total_flops / rate / 3600 for name, rate in rates.items()}
    print(f"{jobs} jobs x {tokens:.3g} tokens of a {params / 1e6:.0f}M-parameter model: {total_flops:.3g} FLOPs in all")
    print(f"CPU step ({cfg.batch} x {cfg.seq_len} tokens): {seconds:.2f} s = {cfg.batch * cfg.seq_len / seconds:.0f} tokens/s")
    for name, h in hours.items():
        print(f"  {name}: {rates[name] / 1e12:.3g} TFLOP/s -> {h:,.0f} device-hours in all, {h / jobs:,.1f} per job")
    record(
        "cluster_cost",
        {
            "model": {"d_model": 768, "n_layers": 12, "n_heads": 12, "seq_len": 1024, "vocab": VOCAB, "params": params},
            "jobs": jobs,
            "tokens_per_run": tokens,
            "flops_per_token": per_token,
            "total_flops": total_flops,
            "cpu_step_seconds": seconds,
            "cpu_batch": cfg.batch,
            "h200_small_model": gpu,
            "rates_flops_per_s": rates,
            "device_hours": hours,
        },
    )


if __name__ == "__main__":
    main()
