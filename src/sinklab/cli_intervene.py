"""``sinklab intervene``: create, move and remove sinks (Li et al. 2026; StreamingLLM)."""

from __future__ import annotations

import argparse

from . import report
from .cli import command, float_list, int_list
from .cli_scan import add_model_and_input_arguments, input_spec
from .hf import QUERY_CHUNK
from .intervene import InterveneConfig, run_intervene


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "intervene",
        help="create, move or remove sinks with causal edits and compare before/after",
        description=(
            "Apply interventions to a model and report, per layer, the share of attention that later "
            "queries give to position k and to position 0, plus next-token loss and perplexity, before "
            "and after. With --trigger, apply them to trained trigger-lab models instead."
        ),
    )
    add_model_and_input_arguments(p)
    p.add_argument("--mask-self", type=int_list, default=[], metavar="K[,K...]", help="token k attends only to itself")
    p.add_argument("--amplify", type=int, metavar="K", help="mean-centred amplification of token k's attention output over --lam")
    p.add_argument("--scale", type=int, metavar="K", help="plain scaling of token k's attention output over --lam (the control)")
    p.add_argument("--lam", type=float_list, default=[1.0, 2.0, 4.0, 8.0, 16.0], help="strengths for --amplify/--scale (default 1,2,4,8,16)")
    p.add_argument("--suppress-sink", action="store_true", help="score bias -inf on position 0 in every layer")
    p.add_argument("--value-zero", type=int_list, default=[], metavar="POS[,POS...]", help="zero the value vectors at these positions")
    p.add_argument("--drop-first", type=int, metavar="N", help="evict the first N tokens from attention (StreamingLLM ablation)")
    p.add_argument("--layers", type=int_list, default=None, help="act only in these layers (default all)")
    p.add_argument("--heads", type=int_list, default=None, help="act only on these heads (default all)")
    p.add_argument("--trigger", nargs="?", const="", default=None, metavar="LAB_DIR", help="edit one-layer trigger-lab models (from LAB_DIR, or trained now)")
    p.add_argument("--query-chunk", type=int, default=QUERY_CHUNK, help=f"query rows attended at once (default {QUERY_CHUNK})")
    p.add_argument("--out", default=None, help="run directory (default runs/intervene or runs/intervene-trigger)")
    p.set_defaults(command="intervene")


def config(args: argparse.Namespace) -> InterveneConfig:
    return InterveneConfig(
        model=args.model,
        inputs=input_spec(args),
        mask_self=tuple(args.mask_self),
        amplify=args.amplify,
        scale=args.scale,
        lams=tuple(args.lam),
        suppress_sink=args.suppress_sink,
        value_zero=tuple(args.value_zero),
        drop_first=args.drop_first,
        layers=tuple(args.layers) if args.layers is not None else None,
        heads=tuple(args.heads) if args.heads is not None else None,
        query_chunk=args.query_chunk,
        trust_remote_code=args.trust_remote_code,
        out=args.out or ("runs/intervene-trigger" if args.trigger is not None else "runs/intervene"),
    )


@command("intervene")
def intervene_command(args: argparse.Namespace) -> int:
    cfg = config(args)
    if args.trigger is not None:
        from .trigger_lab import run_trigger_interventions

        summary = run_trigger_interventions(cfg, args.trigger or None)
        print(report.trigger_intervention_table(summary["results"]))
    else:
        summary = run_intervene(cfg)
        print(report.intervention_table(summary))
    print(f"\noutputs: {cfg.out}/summary.json and figures: {', '.join(summary.get('figures', [])) or '-'}")
    return 0
