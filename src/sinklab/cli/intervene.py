"""``sinklab intervene``: create, move and remove sinks (Li et al. 2026; StreamingLLM).

One flag per registered intervention (:data:`sinklab.intervene.INTERVENTIONS`)."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from ..core.runs import FINISHED
from ..intervene import INTERVENTIONS, InterveneConfig, run_intervene, run_trigger_interventions
from ..intervene import report as intervene_report
from .args import (
    STARTS_OVER,
    add_model_and_input_arguments,
    add_overwrite_argument,
    claim_out,
    float_list,
    input_spec,
    int_list,
    load_options,
)

#: How each kind of intervention option is read from the command line.
ARGUMENT_KINDS = {
    "positions": {"type": int_list, "metavar": "K[,K...]"},
    "position": {"type": int, "metavar": "K"},
    "count": {"type": int, "metavar": "N"},
    "switch": {"action": "store_true"},
}


def add_parser(sub) -> None:
    defaults = InterveneConfig()
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
    for option, cls in INTERVENTIONS.items():
        p.add_argument(f"--{option.replace('_', '-')}", dest=option, help=cls.help, **ARGUMENT_KINDS[cls.takes])
    swept = ", ".join(f"--{o.replace('_', '-')}" for o, cls in INTERVENTIONS.items() if cls.sweeps_lam)
    p.add_argument("--lam", type=float_list, default=list(defaults.lams), help=f"strengths for {swept} (default {','.join(f'{x:g}' for x in defaults.lams)})")
    p.add_argument("--layers", type=int_list, default=None, metavar="L[,L...]", help="act only in these layers, indices from 0 (default all)")
    p.add_argument("--heads", type=int_list, default=None, metavar="H[,H...]", help="act only on these heads, indices from 0 (default all)")
    p.add_argument("--trigger", nargs="?", const="", default=None, metavar="LAB_DIR", help="edit one-layer trigger-lab models (from LAB_DIR, or trained now)")
    p.add_argument("--out", default=None, help=f"run directory (default {defaults.out} or {defaults.out}-trigger)")
    add_overwrite_argument(p)
    p.set_defaults(handler=intervene_command, on_interrupt=STARTS_OVER)


def config(args: argparse.Namespace) -> InterveneConfig:
    given = {o: getattr(args, o) for o in INTERVENTIONS if getattr(args, o) not in (None, False, [])}
    default_out = InterveneConfig().out
    return InterveneConfig(
        model=args.model,
        inputs=input_spec(args),
        edits=given,
        lams=tuple(args.lam),
        layers=tuple(args.layers) if args.layers is not None else None,
        heads=tuple(args.heads) if args.heads is not None else None,
        query_chunk=args.query_chunk,
        load=load_options(args),
        out=args.out or (f"{default_out}-trigger" if args.trigger is not None else default_out),
    )


def intervene_command(args: argparse.Namespace) -> int:
    cfg = config(args)
    planned = {**asdict(cfg), "lab_dir": args.trigger or None} if args.trigger is not None else cfg
    if claim_out(args, cfg.out, planned) == FINISHED:
        return 0
    if args.trigger is not None:
        summary = run_trigger_interventions(cfg, args.trigger or None)
        print(intervene_report.trigger_intervention_table(summary["results"]))
    else:
        summary = run_intervene(cfg)
        print(intervene_report.intervention_table(summary))
    print(f"\noutputs: {cfg.out}/summary.json and figures: {', '.join(summary.get('figures', [])) or '-'}")
    return 0
