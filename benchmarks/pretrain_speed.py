"""Training throughput (tokens/s of a full step: forward, backward, gradient clipping and the
pretraining's AdamW update) of every attention variant, and of a minimal plain PyTorch model of
the same shapes built on F.scaled_dot_product_attention.

Target: sinklab's softmax model at least 0.9x the plain one. All models run in this process, in
rounds; the order of the models reverses every round, so neither end of a round is favoured. Each
round gives every model's speed relative to softmax; the row reports the median ratio and its
spread (min-max over rounds), and a difference inside the spread is called a tie.

Run: `.venv/bin/python benchmarks/pretrain_speed.py [--rounds 5]`
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from common import record
from torch import nn

from sinklab.core.attention import ATTN_NORMS, AttentionSpec
from sinklab.models.native import Transformer
from sinklab.pretrain import PretrainConfig
from sinklab.pretrain.train import make_optimizer

VOCAB = 19087  # the compact vocabulary of the default tokenizer on Shakespeare


class PlainBlock(nn.Module):
    """Pre-norm block: RMSNorm, fused QKV, RoPE, SDPA, output projection, RMSNorm, SwiGLU."""

    def __init__(self, d: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.gate, self.up, self.down = (
            nn.Linear(d, hidden, bias=False),
            nn.Linear(d, hidden, bias=False),
            nn.Linear(hidden, d, bias=False),
        )

    def forward(self, x, cos, sin):
        B, T, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(B, T, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, d))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


class PlainLM(nn.Module):
    def __init__(self, cfg: PretrainConfig, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, cfg.d_model)
        self.blocks = nn.ModuleList(PlainBlock(cfg.d_model, cfg.n_heads, hidden) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.d_model)
        head_dim = cfg.d_model // cfg.n_heads
        inv = 1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim)
        angles = torch.arange(cfg.seq_len).float()[:, None] * inv
        self.register_buffer("cos", torch.cat([angles, angles], -1).cos())
        self.register_buffer("sin", torch.cat([angles, angles], -1).sin())

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        return F.linear(self.norm(x), self.embed.weight)


def step_seconds(model: nn.Module, optimizer: torch.optim.Optimizer, batch: torch.Tensor, grad_clip: float) -> float:
    """One training step as ``sinklab pretrain`` takes it."""
    start = time.perf_counter()
    logits = model(batch[:, :-1])
    F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def variants(cfg: PretrainConfig) -> dict[str, nn.Module]:
    models = {"plain sdpa": PlainLM(cfg, cfg.model_config(VOCAB).mlp_hidden)}
    for spec in [AttentionSpec(name) for name in ATTN_NORMS] + AttentionSpec().with_each_extra():
        models[spec.label] = Transformer(PretrainConfig(attention=spec).model_config(VOCAB))
    models["softmax+1sink"] = Transformer(PretrainConfig(sink_tokens=1).model_config(VOCAB))
    return models


def ratio_row(name: str, per_round: list[float]) -> dict:
    """Median and spread of a per-round speed ratio; "tie" when the spread holds 1."""
    low, high = min(per_round), max(per_round)
    verdict = "tie" if low <= 1.0 <= high else ("faster" if low > 1.0 else "slower")
    return {
        "model": name,
        "median": round(statistics.median(per_round), 3),
        "min": round(low, 3),
        "max": round(high, 3),
        "verdict": verdict,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    cfg = PretrainConfig()
    torch.manual_seed(0)
    batch = torch.randint(0, VOCAB, (cfg.batch, cfg.seq_len + 1))
    models = variants(cfg)
    optimizers = {name: make_optimizer(m, cfg) for name, m in models.items()}
    for name, m in models.items():  # warm-up (also creates the optimizer state)
        step_seconds(m, optimizers[name], batch, cfg.grad_clip)
    times: dict[str, list[float]] = {name: [] for name in models}
    for r in range(args.rounds):
        for name in list(models) if r % 2 == 0 else list(models)[::-1]:
            times[name].append(step_seconds(models[name], optimizers[name], batch, cfg.grad_clip))
    tokens = cfg.batch * cfg.seq_len
    tps = {name: tokens / statistics.median(t) for name, t in times.items()}
    versus_softmax = [ratio_row(name, [s / t for s, t in zip(times["softmax"], ts)]) for name, ts in times.items()]
    record(
        "pretrain_speed",
        {
            "config": {k: getattr(cfg, k) for k in ("d_model", "n_layers", "n_heads", "seq_len", "batch")},
            "vocab": VOCAB,
            "threads": torch.get_num_threads(),
            "rounds": args.rounds,
            "step": "forward, backward, clip_grad_norm_, AdamW (make_optimizer)",
            "softmax_vs_plain": ratio_row(
                "softmax vs plain sdpa", [p / s for p, s in zip(times["plain sdpa"], times["softmax"])]
            ),
            "tokens_per_s": {name: round(v) for name, v in tps.items()},
            "vs_softmax": versus_softmax,
        },
    )


if __name__ == "__main__":
    main()
