"""``sinklab trigger``: the trigger-conditional lab (Ran-Milo 2026)."""

from __future__ import annotations

import argparse
from dataclasses import replace

from . import report, trigger_lab
from .attention import ATTN_NORMS
from .cli import attn_list, command, float_list, int_list
from .trigger import TriggerConfig

MODES = ("paper", "variants", "cap_sweep", "construct", "quick")


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "trigger",
        help="the trigger-conditional task: softmax must sink, ReLU need not (Ran-Milo 2026)",
        description=(
            "Train attention-only models on the trigger-conditional task and measure where the "
            "'do nothing' mass goes. Without a mode flag, trains the grid given by --layers, "
            f"--heads, --attn and --seeds. Attention normalisations: {', '.join(ATTN_NORMS)}."
        ),
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--paper", action="store_true", help="the paper's grid: 1x1, 2x2, 4x4, each with softmax and relu")
    mode.add_argument("--quick", action="store_true", help="the fast reproduction used by `make demo` (1x1 and 2x2, softmax and relu)")
    mode.add_argument("--variants", action="store_true", help="every normalisation, plain / gated / head-normed, on 1x1 and 2x2")
    mode.add_argument("--cap-sweep", type=float_list, metavar="CAPS", help="cap the BOS mass of one-layer softmax at each level, e.g. 0.5,0.75,0.9,0.99,1")
    mode.add_argument("--construct", action="store_true", help="check the hand-built exact ReLU solution on 10,000 sequences")
    p.add_argument("--layers", type=int, default=1, help="layers (default 1)")
    p.add_argument("--heads", type=int, default=1, help="heads per layer (default 1)")
    p.add_argument("--attn", type=attn_list, default=["softmax", "relu"], help="comma-separated normalisations (default softmax,relu)")
    p.add_argument("--gate", action="store_true", help="head-wise sigmoid output gate (Qiu et al. 2025)")
    p.add_argument("--head-norm", action="store_true", help="head-wise RMSNorm of the attention output (Li et al. 2026)")
    p.add_argument("--seeds", type=int_list, default=[0], help="comma-separated seeds (default 0)")
    p.add_argument("--n", type=int, default=16, help="token dimension n (default 16)")
    p.add_argument("--length", type=int, default=16, help="sequence length L (default 16)")
    p.add_argument("--eval-trigger", type=int, default=7, help="0-indexed trigger position for evaluation (default 7)")
    p.add_argument("--eval-sequences", type=int, default=1000, help="evaluation sequences (default 1000)")
    p.add_argument("--max-steps", type=int, default=50_000, help="step budget per model (default 50000)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default 1e-3 for one layer, 1e-4 otherwise)")
    p.add_argument("--batch", type=int, default=128, help="batch size (default 128)")
    p.add_argument("--sink-threshold", type=float, default=0.5, help="BOS mass at which a head counts as sinking (default 0.5)")
    p.add_argument("--scale-scores", action="store_true", help="ablation: scale scores by 1/sqrt(d)")
    p.add_argument("--bias", action="store_true", help="ablation: biases in the projections")
    p.add_argument("--rope", action="store_true", help="ablation: rotary position embeddings")
    p.add_argument("--mlp", action="store_true", help="ablation: a SwiGLU MLP after attention")
    p.add_argument("--workers", type=int, default=None, help="parallel training processes (default: one per core)")
    p.add_argument("--out", default=None, help="run directory (default runs/trigger-<mode>)")
    p.set_defaults(command="trigger")


def base_config(args: argparse.Namespace) -> TriggerConfig:
    return TriggerConfig(
        layers=args.layers,
        heads=args.heads,
        attn=args.attn[0],
        gate=args.gate,
        head_norm=args.head_norm,
        n=args.n,
        length=args.length,
        eval_trigger=args.eval_trigger,
        eval_sequences=args.eval_sequences,
        lr=args.lr,
        batch=args.batch,
        max_steps=args.max_steps,
        sink_threshold=args.sink_threshold,
        scale_scores=args.scale_scores,
        bias=args.bias,
        rope=args.rope,
        mlp=args.mlp,
    )


@command("trigger")
def trigger_command(args: argparse.Namespace) -> int:
    mode = next((m for m in MODES if getattr(args, m)), "grid")
    base = base_config(args)
    out = args.out or f"runs/trigger-{mode.replace('_', '-')}"
    if mode == "construct":
        result = trigger_lab.construction_report(base.task, out)
        print(report.format_table([result], [(k, k, ".3g") for k in result]))
        print(f"outputs: {out}")
        return 0 if result["max_abs_error"] <= 1e-6 and result["non_trigger_rows_exactly_zero"] else 1
    if mode == "cap_sweep":
        summary = trigger_lab.run_cap_sweep(args.cap_sweep, args.seeds, base, out, args.workers)
        print(report.format_table(summary["cap_tradeoff"], trigger_lab.CAP_COLUMNS))
    elif mode == "variants":
        summary = trigger_lab.run_variants(args.seeds, base, out, args.workers)
        print(report.format_table(summary["variant_table"], trigger_lab.VARIANT_COLUMNS))
    else:
        configs = {
            "paper": lambda: trigger_lab.paper_configs(args.seeds, base),
            "quick": lambda: trigger_lab.paper_configs(args.seeds, base, shapes=trigger_lab.QUICK_SHAPES),
            "grid": lambda: [replace(base, attn=a, seed=s) for a in args.attn for s in args.seeds],
        }[mode]()
        summary = trigger_lab.run_lab(configs, out, workers=args.workers)
        print(report.trigger_table(summary["runs"]))
    print(f"\noutputs: {out}/summary.json and figures: {', '.join(summary['figures'])}")
    return 0
