"""``sinklab stream`` and ``sinklab generate``: StreamingLLM-style caches (Xiao et al. 2024)."""

from __future__ import annotations

import argparse

from ..core.configs import leaf
from ..models.hf import LoadOptions
from ..stream import POLICIES, STREAM, StreamConfig, check_generation, generate
from ..stream import report as stream_report
from .args import STARTS_OVER, add_config_arguments, add_overwrite_argument, config_from, run_out, written

DEFAULT_OUT = "runs/stream"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "stream",
        help="token-by-token perplexity over a long stream under each cache policy",
        description=(
            f"Stream a long text through a model with each KV-cache policy ({', '.join(POLICIES)}) "
            "and compare perplexity, speed and memory."
        ),
    )
    p.add_argument("model", nargs="?", default=None, help=leaf(StreamConfig, "model").meta["help"])
    add_config_arguments(p, StreamConfig)
    p.add_argument(
        "--no-bos", dest="bos", action="store_const", const="no", help="the same as --bos no (the old spelling, kept as an alias)"
    )
    p.add_argument("--out", default=DEFAULT_OUT, help=f"run directory (default {DEFAULT_OUT})")
    add_overwrite_argument(p)
    p.set_defaults(handler=stream_command, on_interrupt=STARTS_OVER)

    g = sub.add_parser("generate", help="generate past the context length with a sink cache (constant memory)")
    g.add_argument("model", nargs="?", default=None, help=leaf(StreamConfig, "model").meta["help"])
    g.add_argument("--prompt", default="Once upon a time", help="the prompt")
    g.add_argument("--max-new-tokens", type=int, default=200, help="tokens to generate (default 200)")
    g.add_argument("--sinks", type=int, default=4, help="first tokens kept (default 4)")
    g.add_argument("--window", type=int, default=252, help="recent tokens kept, the current one included (default 252)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 for greedy decoding (default)")
    g.add_argument("--seed", type=int, default=0)
    add_config_arguments(g, LoadOptions)
    g.set_defaults(handler=generate_command, on_interrupt="stopped; nothing is saved by generate")


def stream_command(args: argparse.Namespace) -> int:
    result = run_out(args, STREAM, config_from(StreamConfig, args, model=args.model))
    if result.reused:
        return 0
    summary = result.summary
    print(stream_report.stream_table(summary))
    if summary["one_pass_check"]:
        c = summary["one_pass_check"]
        print(
            f"one-pass scores vs a real {c['policy']} cache, "
            f"token by token over positions {c['positions'][0]}-{c['positions'][1]}: "
            f"max |dNLL| = {c['max_abs_nll_difference']:.2e} (tolerance {c['tolerance']:g})"
        )
    print(f"\noutputs: {written(result)}")
    return 0


def generate_command(args: argparse.Namespace) -> int:
    check_generation(args.max_new_tokens, args.sinks, args.window, args.temperature)
    loaded = config_from(LoadOptions, args).load(args.model)
    result = generate(
        loaded.model, loaded.tokenizer, args.prompt, args.max_new_tokens, args.sinks, args.window, args.temperature, args.seed
    )
    print(result["text"])
    print(
        f"\n[{result['new_tokens']} new tokens after a {result['prompt_tokens']}-token prompt; "
        f"the cache holds {result['cache_tokens']} tokens ({result['cache_bytes'] / 2**20:.1f} MiB) "
        f"whatever the length]"
    )
    return 0
