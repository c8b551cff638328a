"""``sinklab sweep``: every attention variant pretrained under one budget, several seeds, compared."""

from __future__ import annotations

import argparse

from ..core.text import format_table
from ..pretrain import COLUMNS
from ..pretrain.sweep import DEFAULT_OUTS, PLANS, SWEEP, SweepConfig, parse_setting
from .args import (
    add_config_arguments,
    add_launcher_arguments,
    add_overwrite_argument,
    argument_type,
    config_from,
    launcher_settings,
    run_out,
    written,
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="every attention variant pretrained under one budget, several seeds, compared seed by seed with softmax",
        description=(
            "Train every variant (one sinklab pretrain run each, in OUT/<variant>-seed<seed>) and compare them. "
            "Finished runs are kept and half-finished ones resumed, whichever launcher ran them; "
            "a run of another configuration is refused (or trained again with --rerun-stale); "
            "more seeds or variants into the same --out train only the new runs. "
            + "; ".join(
                f"{corpus}: {len(SweepConfig(corpus=corpus).runs()) // len(plan[0])} variants x {len(plan[0])} seeds"
                for corpus, plan in PLANS.items()
            )
            + "."
        ),
    )
    add_config_arguments(p, SweepConfig)
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        type=argument_type(parse_setting),
        default=[],
        metavar="KEY=VALUE",
        help="a training setting of every run, e.g. --set lr=3e-3 --set positions=learned (repeatable)",
    )
    add_launcher_arguments(p)
    p.add_argument(
        "--out", default=None, help=f"the sweep's directory (default {', '.join(f'{c}: {o}' for c, o in DEFAULT_OUTS.items())})"
    )
    add_overwrite_argument(p)
    p.set_defaults(handler=sweep_command, on_interrupt="finished runs and checkpoints are saved; run the same command to resume")


def sweep_command(args: argparse.Namespace) -> int:
    cfg = config_from(SweepConfig, args, settings=dict(args.settings))
    args.out = args.out or DEFAULT_OUTS[cfg.corpus]
    result = run_out(args, SWEEP, cfg, launcher=launcher_settings(args))
    if result.reused:
        return 0
    print(
        format_table(
            result.summary["by_variant"],
            [("variant", "variant", "s"), ("seeds", "seeds", "d")]
            + [(h, k, f) for h, k, f in COLUMNS if k not in ("run", "variant", "seed", "threads")],
        )
    )
    for entry in result.summary["paired"]:
        print(
            f"{entry['variant']} - {entry['baseline']}, seeds {entry['seeds']}: "
            + "; ".join(
                f"{k} {v['mean']:+.3f} (sd {v['sd']:.3f}, p {v['p_sign_flip']:.3f})"
                for k, v in entry.items()
                if isinstance(v, dict)
            )
        )
    print(f"\noutputs: {written(result)}")
    return 0
