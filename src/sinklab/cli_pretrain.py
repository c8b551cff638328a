"""``sinklab pretrain`` and ``sinklab compare``: mitigation variants under one budget."""

from __future__ import annotations

import argparse

from . import compare, report
from .attention import ATTN_NORMS
from .cli import command
from .lmdata import TOKENIZERS
from .pretrain import PretrainConfig, train_lm


def add_parsers(sub) -> None:
    defaults = PretrainConfig()
    p = sub.add_parser(
        "pretrain",
        help="train a small LM with an attention variant (runs under torchrun for DDP)",
        description="Train a small decoder LM (RMSNorm, RoPE, SwiGLU) with one attention variant, then scan it for sinks.",
    )
    p.add_argument("--attn", choices=list(ATTN_NORMS), default=defaults.attn, help="attention normalisation (default softmax)")
    p.add_argument("--gate", action="store_true", help="head-wise sigmoid output gate (Qiu et al. 2025)")
    p.add_argument("--head-norm", action="store_true", help="head-wise RMSNorm of the attention output (Li et al. 2026)")
    p.add_argument("--sink-tokens", type=int, default=0, help="learned sink/register tokens prepended to every sequence")
    p.add_argument("--corpus", default=defaults.corpus, help="shakespeare (default), a text file or folder, or hf:NAME")
    p.add_argument("--tokenizer", choices=TOKENIZERS, default=defaults.tokenizer, help="default: the default model's tokenizer; bytes: UTF-8 bytes")
    for name in ("d_model", "n_layers", "n_heads", "seq_len", "batch", "steps", "warmup", "eval_every", "eval_batches", "checkpoint_every", "seed"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name), help=f"(default {getattr(defaults, name)})")
    p.add_argument("--max-seq-len", type=int, default=None, help="the model's maximum positions (default seq-len + sink tokens)")
    p.add_argument("--lr", type=float, default=defaults.lr, help=f"peak learning rate (default {defaults.lr})")
    p.add_argument("--weight-decay", type=float, default=defaults.weight_decay, help=f"(default {defaults.weight_decay})")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=defaults.device, help="auto (default): the GPU when PyTorch sees one")
    p.add_argument("--untied", action="store_true", help="untie the input embedding and the output layer")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--out", default=None, help="run directory (default runs/pretrain-<variant>-seed<seed>)")
    p.set_defaults(command="pretrain")

    c = sub.add_parser("compare", help="compare pretraining runs: a table and loss / sink plots")
    c.add_argument("runs", nargs="+", help="run directories of sinklab pretrain")
    c.add_argument("--target", type=float, default=None, help="validation loss for 'steps to target' (default: the worst final loss)")
    c.add_argument("--out", default="runs/compare", help="where the plots and compare.json go (default runs/compare)")
    c.set_defaults(command="compare")


@command("pretrain")
def pretrain_command(args: argparse.Namespace) -> int:
    cfg = PretrainConfig(
        corpus=args.corpus, tokenizer=args.tokenizer, attn=args.attn, gate=args.gate, head_norm=args.head_norm,
        sink_tokens=args.sink_tokens, d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads,
        tie_embeddings=not args.untied, seq_len=args.seq_len, max_seq_len=args.max_seq_len, batch=args.batch,
        steps=args.steps, lr=args.lr, warmup=args.warmup, weight_decay=args.weight_decay, eval_every=args.eval_every,
        eval_batches=args.eval_batches, checkpoint_every=args.checkpoint_every, seed=args.seed, device=args.device, out=args.out or "",
    )
    if not args.out:
        cfg.out = f"runs/pretrain-{cfg.variant}-seed{cfg.seed}"
    summary = train_lm(cfg, resume=args.resume)
    if summary is not None:
        print(report.format_table([compare.run_row(cfg.out, summary)], compare.COLUMNS))
        print(f"\noutputs: {cfg.out}/summary.json, metrics.jsonl, checkpoints")
    return 0


@command("compare")
def compare_command(args: argparse.Namespace) -> int:
    result = compare.compare_runs(args.runs, args.target, args.out)
    print(report.format_table(result["rows"], compare.COLUMNS))
    print(f"\noutputs: {args.out}/compare.json and figures: {', '.join(result['figures'])}")
    return 0
