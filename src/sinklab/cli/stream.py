"""``sinklab stream`` and ``sinklab generate``: StreamingLLM-style caches (Xiao et al. 2024)."""

from __future__ import annotations

import argparse

from ..core.runs import FINISHED
from ..stream import POLICIES, StreamConfig, check_generation, generate, run_stream
from ..stream import report as stream_report
from .args import (
    STARTS_OVER,
    add_bos_argument,
    add_load_arguments,
    add_overwrite_argument,
    choice_list,
    claim_out,
    int_list,
    load_options,
    option,
)


def add_parser(sub) -> None:
    defaults = StreamConfig()
    p = sub.add_parser(
        "stream",
        help="token-by-token perplexity over a long stream under each cache policy",
        description=f"Stream a long text through a model with each KV-cache policy ({', '.join(POLICIES)}) and compare perplexity, speed and memory.",
    )
    p.add_argument("model", nargs="?", default=None, help="a RoPE model folder, .gguf file or Hub id (default: SmolLM2-135M-Instruct)")
    option(p, defaults, "corpus", "shakespeare, a text file or folder, or hf:NAME")
    option(p, defaults, "tokens", "length of the stream in tokens, BOS included")
    option(p, defaults, "sinks", "first tokens kept in the cache")
    option(p, defaults, "window", "recent tokens kept, the current one included")
    p.add_argument("--policies", type=choice_list(POLICIES), default=list(defaults.policies), help=f"comma-separated, from {', '.join(POLICIES)}")
    option(p, defaults, "recompute_every", "evaluate the recompute policy on every n-th position")
    option(p, defaults, "chunk", "positions per reported chunk")
    option(p, defaults, "latency_steps", "timed decode steps per chunk")
    p.add_argument("--no-check", action="store_true", help="skip streaming the sink (or window) policy token by token through a real cache to check the one-pass scores")
    p.add_argument("--ablation", type=int_list, default=[], metavar="N[,N...]", help="also run these sink counts at the same total cache size, e.g. 0,1,2,4,8")
    add_bos_argument(p, auto="when the tokenizer has one; yes does the same here")
    p.add_argument("--no-bos", dest="bos", action="store_const", const="no", help="the same as --bos no (the old spelling, kept as an alias)")
    option(p, defaults, "out", "run directory")
    add_load_arguments(p)
    add_overwrite_argument(p)
    p.set_defaults(handler=stream_command, on_interrupt=STARTS_OVER)

    g = sub.add_parser("generate", help="generate past the context length with a sink cache (constant memory)")
    g.add_argument("model", nargs="?", default=None, help="a RoPE model (default: SmolLM2-135M-Instruct)")
    g.add_argument("--prompt", default="Once upon a time", help="the prompt")
    g.add_argument("--max-new-tokens", type=int, default=200, help="tokens to generate (default 200)")
    g.add_argument("--sinks", type=int, default=4, help="first tokens kept (default 4)")
    g.add_argument("--window", type=int, default=252, help="recent tokens kept, the current one included (default 252)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 for greedy decoding (default)")
    g.add_argument("--seed", type=int, default=0)
    add_load_arguments(g)
    g.set_defaults(handler=generate_command, on_interrupt="stopped; nothing is saved by generate")


def stream_command(args: argparse.Namespace) -> int:
    cfg = StreamConfig(
        model=args.model, corpus=args.corpus, tokens=args.tokens, sinks=args.sinks, window=args.window,
        policies=tuple(args.policies), recompute_every=args.recompute_every, chunk=args.chunk,
        latency_steps=args.latency_steps, check=not args.no_check,
        bos=args.bos != "no", ablation=tuple(args.ablation), load=load_options(args), out=args.out,
    )
    if claim_out(args, cfg.out, cfg) == FINISHED:
        return 0
    summary = run_stream(cfg)
    print(stream_report.stream_table(summary))
    if summary["one_pass_check"]:
        c = summary["one_pass_check"]
        print(f"one-pass scores vs a real {c['policy']} cache, token by token over positions {c['positions'][0]}-{c['positions'][1]}: "
              f"max |dNLL| = {c['max_abs_nll_difference']:.2e} (tolerance {c['tolerance']:g})")
    print(f"\noutputs: {args.out}/summary.json and figures: {', '.join(summary['figures'])}")
    return 0


def generate_command(args: argparse.Namespace) -> int:
    check_generation(args.max_new_tokens, args.sinks, args.window, args.temperature)
    loaded = load_options(args).load(args.model)
    result = generate(loaded.model, loaded.tokenizer, args.prompt, args.max_new_tokens, args.sinks, args.window, args.temperature, args.seed)
    print(result["text"])
    print(
        f"\n[{result['new_tokens']} new tokens after a {result['prompt_tokens']}-token prompt; "
        f"the cache holds {result['cache_tokens']} tokens ({result['cache_bytes'] / 2**20:.1f} MiB) "
        f"whatever the length]"
    )
    return 0
