"""``sinklab intervene``: create, move and remove sinks (Li et al. 2026; StreamingLLM).

One flag per registered intervention (:data:`sinklab.intervene.INTERVENTIONS`); the command line
translates them, with ``--lam``, ``--layers`` and ``--heads``, into the intervention values the
configuration holds (:func:`sinklab.intervene.interventions_for`)."""

from __future__ import annotations

import argparse

from ..core import configs
from ..core.errors import SinklabError, check
from ..intervene import (
    ACCURACY_SETTINGS,
    DEFAULT_LAMS,
    INTERVENE,
    INTERVENTIONS,
    TRIGGER_EDITS,
    InterveneConfig,
    TriggerEditConfig,
    check_accuracy_read,
    interventions_for,
)
from ..intervene import report as intervene_report
from .args import (
    MODEL_HELP,
    STARTS_OVER,
    add_config_arguments,
    add_overwrite_argument,
    config_from,
    defer_defaults,
    float_list,
    given_settings,
    int_list,
    run_out,
    written,
)

DEFAULT_OUT = "runs/intervene"

#: Every setting of a model's run: ``--trigger`` reads none of them, so each is deferred
#: (:func:`defer_defaults`) and refused there when given, even at its default value.
MODEL_RUN_SETTINGS = tuple(leaf.name for leaf in configs.leaves(InterveneConfig) if leaf.meta["cli"])

#: How each kind of intervention option is read from the command line.
ARGUMENT_KINDS = {
    "positions": {"type": int_list, "metavar": "K[,K...]"},
    "position": {"type": int, "metavar": "K"},
    "count": {"type": int, "metavar": "N"},
    "switch": {"action": "store_true"},
}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "intervene",
        help="create, move or remove sinks with causal edits and compare before/after",
        description=(
            "Apply interventions to a model and report, per layer, the share of attention that later "
            "queries give to position k and to position 0, plus next-token loss and perplexity, before "
            "and after. With --trigger, apply them to trained trigger-lab models instead."
        ),
    )
    p.add_argument("model", nargs="?", default=None, help=MODEL_HELP)
    add_config_arguments(p, InterveneConfig)
    defer_defaults(p, MODEL_RUN_SETTINGS)
    edits = p.add_argument_group("interventions (one run each)")
    for option, cls in INTERVENTIONS.items():
        edits.add_argument(f"--{option.replace('_', '-')}", dest=option, help=cls.help, **ARGUMENT_KINDS[cls.takes])
    swept = ", ".join(f"--{o.replace('_', '-')}" for o, cls in INTERVENTIONS.items() if cls.sweeps_lam)
    edits.add_argument(
        "--lam",
        type=float_list,
        default=list(DEFAULT_LAMS),
        help=f"strengths for {swept} (default {','.join(f'{x:g}' for x in DEFAULT_LAMS)})",
    )
    edits.add_argument(
        "--layers", type=int_list, default=None, metavar="L[,L...]", help="act only in these layers, indices from 0 (default all)"
    )
    edits.add_argument(
        "--heads", type=int_list, default=None, metavar="H[,H...]", help="act only on these heads, indices from 0 (default all)"
    )
    p.add_argument(
        "--trigger",
        nargs="?",
        const="",
        default=None,
        metavar="LAB_DIR",
        help="edit one-layer trigger-lab models (from LAB_DIR, or trained now)",
    )
    p.add_argument("--out", default=None, help=f"run directory (default {DEFAULT_OUT} or {DEFAULT_OUT}-trigger)")
    add_overwrite_argument(p)
    p.set_defaults(handler=intervene_command, on_interrupt=STARTS_OVER)


def asked_interventions(args: argparse.Namespace, default: dict) -> tuple:
    """The intervention values the options ask for (``default`` options when none is given)."""
    given = {o: getattr(args, o) for o in INTERVENTIONS if getattr(args, o) not in (None, False, [])}
    return tuple(interventions_for(given or default, args.lam, args.layers, args.heads))


def check_trigger_reads(args: argparse.Namespace) -> None:
    """With ``--trigger`` the trigger-lab models are edited: a model, or a setting of a model's run
    given at any value, would be ignored: refused."""
    check(args.model is None, "--trigger edits the trigger-lab models: a MODEL is not read; leave it out")
    given = given_settings(args, InterveneConfig, MODEL_RUN_SETTINGS)
    if given:
        flag = configs.leaf(InterveneConfig, given[0]).flag
        raise SinklabError(f"--trigger edits the trigger-lab models: {flag} is not read; leave it out")


def intervene_command(args: argparse.Namespace) -> int:
    if args.trigger is not None:
        check_trigger_reads(args)
        args.out = args.out or f"{DEFAULT_OUT}-trigger"
        cfg = TriggerEditConfig(interventions=asked_interventions(args, {"suppress_sink": True}), lab_dir=args.trigger or None)
        result = run_out(args, TRIGGER_EDITS, cfg)
        if not result.reused:
            print(intervene_report.trigger_intervention_table(result.summary["results"]))
    else:
        args.out = args.out or DEFAULT_OUT
        given = given_settings(args, InterveneConfig, MODEL_RUN_SETTINGS)
        check_accuracy_read([name for name in given if name in ACCURACY_SETTINGS], args.accuracy)
        result = run_out(
            args, INTERVENE, config_from(InterveneConfig, args, model=args.model, interventions=asked_interventions(args, {}))
        )
        if not result.reused:
            print(intervene_report.intervention_table(result.summary))
            if result.summary.get("accuracy"):
                print("\n" + intervene_report.accuracy_table(result.summary))
    if not result.reused:
        print(f"\noutputs: {written(result)}")
    return 0
