"""``sinklab pretrain``: a small LM trained with one attention variant (``sinklab compare`` sets runs side by side)."""

from __future__ import annotations

import argparse
import os

from ..core.attention import ATTN_NORMS, AttentionSpec
from ..core.errors import check
from ..core.orthoadam import OPTIMIZERS
from ..core.provenance import THREADS_HELP
from ..core.text import format_table
from ..pretrain import COLUMNS, PRETRAIN, PretrainConfig, run_row
from ..pretrain.config import CORPUS_DEFAULTS, POSITIONS, READ_ONLY_WITH, TWEO_WEIGHT, check_read
from ..pretrain.tokens import TOKENIZERS
from .args import (
    add_bos_argument,
    add_extra_arguments,
    add_resume_arguments,
    alias_note,
    defer_defaults,
    extra_flags,
    given_settings,
    option,
    run_out,
    written,
)

#: PretrainConfig fields that are plain numbers on the command line (those in CORPUS_DEFAULTS have per-corpus defaults).
NUMBERS = (
    "d_model",
    "n_layers",
    "n_heads",
    "seq_len",
    "batch",
    "steps",
    "eval_every",
    "eval_batches",
    "checkpoint_every",
    "seed",
    "lr",
    "min_lr_ratio",
    "weight_decay",
    "grad_clip",
    "adam_beta2",
    "tweo_tau",
    "tweo_p",
)
#: Fields whose flag is not their name: help, the canonical flag, then old spellings kept as aliases.
RENAMED = {
    "seq_len": ("tokens per training sequence", "--tokens", "--seq-len"),
    "min_lr_ratio": ("the cosine schedule's last lr as a share of --lr (1: constant after warm-up)", "--min-lr-ratio"),
    "grad_clip": ("largest global gradient norm (0: no clipping)", "--grad-clip"),
    "adam_beta2": ("the optimizer's second-moment decay", "--adam-beta2"),
    "tweo_tau": ("TWEO's soft threshold tau: activations under it are barely penalised", "--tweo-tau"),
    "tweo_p": ("TWEO's power p of (|A| / tau)", "--tweo-p"),
}


def add_parser(sub) -> None:
    defaults = PretrainConfig()
    p = sub.add_parser(
        "pretrain",
        help="train a small LM with an attention variant (runs under torchrun for DDP)",
        description=(
            "Train a small decoder LM (RMSNorm, RoPE by default, SwiGLU) with one attention variant, then scan it for sinks."
        ),
    )
    p.add_argument(
        "--attn",
        choices=list(ATTN_NORMS),
        default=defaults.attention.attn,
        help=f"attention normalisation (default {defaults.attention.attn})",
    )
    add_extra_arguments(p)
    option(p, defaults, "sink_tokens", "learned sink/register tokens prepended to every sequence")
    option(p, defaults, "corpus", "shakespeare, a text file or folder, hf:NAME, or bb (the Bigram-Backcopy task)")
    add_bos_argument(
        p,
        auto="no for a text corpus; bb sequences always start with BOS",
        effect="; the token is one reserved id; a bare --bos, the old spelling, means --bos yes",
        nargs="?",
        const="yes",
    )
    option(p, defaults, "bb_triggers", "--corpus bb: the k most frequent characters trigger a back-copy")
    p.add_argument(
        "--tokenizer",
        choices=TOKENIZERS,
        default=defaults.tokenizer,
        help="default: the default model's tokenizer; bytes: UTF-8 bytes",
    )
    for name in NUMBERS:
        help, flag, *aliases = RENAMED.get(name, (name.replace("_", " "), f"--{name.replace('_', '-')}"))
        if name in CORPUS_DEFAULTS["text"]:
            per_corpus = ", ".join(f"{kind} {values[name]}" for kind, values in CORPUS_DEFAULTS.items())
            p.add_argument(
                flag,
                *aliases,
                dest=name,
                metavar=flag.lstrip("-").replace("-", "_").upper(),
                type=type(CORPUS_DEFAULTS["text"][name]),
                default=None,
                help=f"{help} (default: {per_corpus}){alias_note(aliases)}",
            )
        else:
            option(p, defaults, name, help, flag=flag, aliases=aliases)
    p.add_argument("--warmup", type=int, default=None, help="linear warm-up steps (default: a tenth of --steps)")
    p.add_argument("--max-seq-len", type=int, default=None, help="the model's maximum positions (default --tokens + sink tokens)")
    p.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default=defaults.device, help="auto (default): the GPU when PyTorch sees one"
    )
    p.add_argument("--untied", action="store_true", help="untie the input embedding and the output layer")
    p.add_argument(
        "--positions",
        choices=POSITIONS,
        default=defaults.positions,
        help="rope (rotary), learned (a vector per absolute position, GPT-2) or none (NoPE) (default %(default)s)",
    )
    p.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        default=defaults.optimizer,
        help="adamw (default) or orthoadam: Adam's moments in a fixed random rotation per parameter (Kaul et al. 2025)",
    )
    p.add_argument(
        "--tweo",
        type=float,
        nargs="?",
        const=TWEO_WEIGHT,
        default=defaults.tweo,
        metavar="WEIGHT",
        help=f"add TWEO's penalty on every block's output to the loss, times WEIGHT (bare: {TWEO_WEIGHT}, Liang et al. 2025)",
    )
    defer_defaults(p, READ_ONLY_WITH)
    p.add_argument("--threads", type=int, default=None, metavar="N", help=THREADS_HELP)
    p.add_argument("--out", default=None, help="run directory (default runs/pretrain-<variant>-seed<seed>)")
    add_resume_arguments(p)
    p.set_defaults(handler=pretrain_command, on_interrupt="checkpoints are saved; run the same command to resume")


def pretrain_command(args: argparse.Namespace) -> int:
    check_read(given_settings(args, PretrainConfig, READ_ONLY_WITH), args.tweo, args.corpus)
    cfg = PretrainConfig(
        attention=AttentionSpec(args.attn, **extra_flags(args)),
        corpus=args.corpus,
        tokenizer=args.tokenizer,
        bos=args.bos == "yes",
        bb_triggers=args.bb_triggers,
        sink_tokens=args.sink_tokens,
        tie_embeddings=not args.untied,
        positions=args.positions,
        max_seq_len=args.max_seq_len,
        warmup=args.warmup,
        device=args.device,
        optimizer=args.optimizer,
        tweo=args.tweo,
        threads=args.threads,
        **{name: getattr(args, name) for name in NUMBERS},
    )
    args.out = args.out or f"runs/pretrain-{'bb-' if cfg.corpus_kind == 'bb' else ''}{cfg.variant}-seed{cfg.seed}"
    check(args.bos != "no" or cfg.corpus_kind != "bb", "--corpus bb sequences always start with BOS; drop --bos no")
    result = run_out(args, PRETRAIN, cfg, resume=args.resume, main_process=os.environ.get("RANK", "0") == "0")
    if result.summary and not result.reused:
        print(format_table([run_row(args.out, result.summary)], COLUMNS))
        print(f"\noutputs: {written(result)}, metrics.jsonl, checkpoints")
    return 0
