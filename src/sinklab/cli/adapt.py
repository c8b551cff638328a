"""``sinklab adapt``: take the sink out of a pretrained model's token stream."""

from __future__ import annotations

import argparse

from ..adapt import ADAPT, FINETUNE, MITIGATIONS, QUANT_SCHEMES, FinetuneConfig, PrefixConfig
from ..adapt import report as adapt_report
from ..core.configs import leaves
from ..core.errors import check
from .args import MODEL_HELP, STARTS_OVER, add_config_arguments, add_resume_arguments, config_from, run_out, written

DEFAULT_OUT, FINETUNE_OUT = "runs/adapt", "runs/adapt-finetune"
#: The settings of fine-tuning alone (not the sink-prefix job's): given without --to, refused.
FINETUNE_ONLY = [x for x in leaves(FinetuneConfig) if x.name not in {y.name for y in leaves(PrefixConfig)} | {"mitigation"}]


def add_parser(sub) -> None:
    schemes = "; ".join(f"{name}: {s.help}" for name, s in QUANT_SCHEMES.items())
    mitigations = "; ".join(f"{name}: {m.help}" for name, m in MITIGATIONS.items())
    p = sub.add_parser(
        "adapt",
        help=(
            "take the sink out of a pretrained model: as a cached prefix (and its quantization payoff), "
            "or fine-tuned into a mitigation"
        ),
        description=(
            "--sink-prefix (the default job): compute the first token's keys and values once (full precision), run the model on "
            "the content with them as its cache prefix, check the logits are unchanged, and measure perplexity on held-out text "
            f"under simulated quantization with BOS in the stream, as the prefix, and absent. Schemes: {schemes}. "
            "--to NAME: fine-tune a mitigation in by distillation from the original, with no BOS in the input. "
            f"Mitigations: {mitigations}."
        ),
    )
    p.add_argument("model", nargs="?", default=None, help=MODEL_HELP)
    job = p.add_mutually_exclusive_group()
    job.add_argument("--sink-prefix", action="store_true", help="the sink-prefix job (the default)")
    job.add_argument(
        "--to", choices=list(MITIGATIONS), metavar="NAME", help=f"fine-tune this mitigation in: {', '.join(MITIGATIONS)}"
    )
    groups: dict = {}
    add_config_arguments(p, PrefixConfig, groups=groups)
    add_config_arguments(p.add_argument_group("fine-tuning (--to)"), FinetuneConfig, groups=groups)
    p.add_argument("--out", default=None, help=f"run directory (default {DEFAULT_OUT}, with --to {FINETUNE_OUT})")
    add_resume_arguments(p)
    p.set_defaults(handler=adapt_command, on_interrupt=STARTS_OVER)


def adapt_command(args: argparse.Namespace) -> int:
    if args.to:
        return _finetune(args)
    check(not args.resume, "--resume applies to fine-tuning (--to); the sink-prefix job starts over")
    given = [x.flag for x in FINETUNE_ONLY if getattr(args, x.name) != x.default()]
    verb = "applies" if len(given) == 1 else "apply"
    check(not given, f"{', '.join(given)} {verb} to fine-tuning (--to NAME); the sink-prefix job trains nothing")
    args.out = args.out or DEFAULT_OUT
    result = run_out(args, ADAPT, config_from(PrefixConfig, args, model=args.model))
    if not result.reused:
        print(adapt_report.ppl_table(result.summary))
        print(adapt_report.headline(result.summary))
        print(f"\noutputs: {written(result)}")
    return 0


def _finetune(args: argparse.Namespace) -> int:
    args.on_interrupt = "checkpoints are saved; run the same command to resume"
    args.out = args.out or FINETUNE_OUT
    result = run_out(args, FINETUNE, config_from(FinetuneConfig, args, model=args.model, mitigation=args.to), resume=args.resume)
    if not result.reused:
        print(adapt_report.ppl_table(result.summary))
        print(adapt_report.before_after_table(result.summary))
        print(f"\noutputs: {written(result)}")
    return 0
