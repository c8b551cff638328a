"""``sinklab trigger``: the trigger-conditional lab (Ran-Milo 2026)."""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch

from ..core.attention import ATTN_NORMS, AttentionSpec
from ..core.errors import check
from ..core.provenance import THREADS_HELP
from ..core.text import format_table
from ..trigger import (
    CAP_COLUMNS,
    CONSTRUCT,
    LAB,
    PAPER_ATTNS,
    QUICK_SHAPES,
    VARIANT_COLUMNS,
    VARIANT_SEEDS,
    ConstructConfig,
    LabConfig,
    TriggerConfig,
    cap_configs,
    paper_configs,
    variant_configs,
)
from ..trigger import report as trigger_report
from .args import (
    add_extra_arguments,
    add_launcher_arguments,
    add_overwrite_argument,
    choice_list,
    extra_flags,
    float_list,
    launcher_settings,
    option,
    run_out,
    seed_list,
    written,
)

MODES = ("paper", "variants", "cap_sweep", "construct", "quick")


def add_parser(sub) -> None:
    defaults = TriggerConfig()
    p = sub.add_parser(
        "trigger",
        help="the trigger-conditional task: softmax must sink, ReLU need not (Ran-Milo 2026)",
        description=(
            "Train attention-only models on the trigger-conditional task and measure where the "
            "'do nothing' mass goes. Without a mode flag, trains the grid given by --n-layers, "
            f"--n-heads, --attn and --seeds. Attention normalisations: {', '.join(ATTN_NORMS)}."
        ),
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--paper", action="store_true", help="the paper's grid: 1x1, 2x2, 4x4, each with softmax and relu")
    mode.add_argument(
        "--quick", action="store_true", help="the fast reproduction used by `make demo` (1x1 and 2x2, softmax and relu)"
    )
    mode.add_argument(
        "--variants", action="store_true", help="every normalisation, plain and with each per-head extra, on 1x1 and 2x2"
    )
    mode.add_argument(
        "--cap-sweep",
        type=float_list,
        metavar="CAPS",
        help="cap the BOS mass of one-layer softmax at each level, e.g. 0.5,0.75,0.9,0.99,1",
    )
    mode.add_argument("--construct", action="store_true", help="check the hand-built exact ReLU solution on 10,000 sequences")
    option(p, defaults, "layers", "number of layers", flag="--n-layers", aliases=("--layers",))
    option(p, defaults, "heads", "number of heads per layer", flag="--n-heads", aliases=("--heads",))
    p.add_argument(
        "--attn",
        type=choice_list(ATTN_NORMS),
        default=list(PAPER_ATTNS),
        help=f"comma-separated normalisations (default {','.join(PAPER_ATTNS)})",
    )
    add_extra_arguments(p)
    p.add_argument(
        "--seeds",
        type=seed_list,
        default=None,
        help=(
            "seeds and ranges, e.g. 0-31 or 0-7,10 "
            f"(default {defaults.seed}; --variants: {VARIANT_SEEDS[0]}-{VARIANT_SEEDS[-1]}); "
            "with --ensemble (the default on a GPU) the seeds of a configuration train as one batched ensemble"
        ),
    )
    option(p, defaults, "n", "token dimension n")
    option(p, defaults, "length", "sequence length L")
    option(p, defaults, "eval_trigger", "0-indexed trigger position for evaluation")
    option(p, defaults, "eval_sequences", "evaluation sequences")
    option(p, defaults, "max_steps", "step budget per model")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default 1e-3 for one layer, 1e-4 otherwise)")
    option(p, defaults, "batch", "batch size")
    option(p, defaults, "sink_threshold", "BOS mass at which a head counts as sinking")
    for name, help in (
        ("scale_scores", "scale scores by 1/sqrt(d)"),
        ("bias", "biases in the projections"),
        ("rope", "rotary position embeddings"),
        ("mlp", "a SwiGLU MLP after attention"),
    ):
        p.add_argument(f"--{name.replace('_', '-')}", action="store_true", help=f"ablation: {help}")
    p.add_argument("--workers", type=int, default=None, help="parallel training processes (default: one per core)")
    p.add_argument("--threads", type=int, default=None, metavar="N", help=THREADS_HELP)
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where models train (cuda: one process, the seeds of a configuration as one ensemble)",
    )
    p.add_argument(
        "--ensemble",
        action="store_true",
        help="train the seeds of a configuration as one batched ensemble on the CPU too (the default on a GPU; "
        "on a 2-core CPU independent models measured faster, BENCHMARKS.md 1)",
    )
    add_launcher_arguments(p)
    p.add_argument("--out", default=None, help="run directory (default runs/trigger-<mode>)")
    add_overwrite_argument(p)
    p.set_defaults(handler=trigger_command, on_interrupt="finished models are saved; run the same command to resume")


def base_config(args: argparse.Namespace) -> TriggerConfig:
    names = (
        "layers",
        "heads",
        "n",
        "length",
        "eval_trigger",
        "eval_sequences",
        "lr",
        "batch",
        "max_steps",
        "sink_threshold",
        "scale_scores",
        "bias",
        "rope",
        "mlp",
    )
    return TriggerConfig(attention=AttentionSpec(args.attn[0], **extra_flags(args)), **{n: getattr(args, n) for n in names})


def trigger_command(args: argparse.Namespace) -> int:
    mode = next((m for m in MODES if getattr(args, m)), "grid")
    base = base_config(args)
    seeds = args.seeds or (list(VARIANT_SEEDS) if mode == "variants" else [TriggerConfig().seed])
    launcher = launcher_settings(args)
    check(
        args.device == "cpu" or not launcher.runs_here or torch.cuda.is_available(),
        "--device cuda: no CUDA device is available here",
    )
    args.out = args.out or f"runs/trigger-{mode.replace('_', '-')}"
    if mode == "construct":
        check(
            launcher.launcher == "local",
            f"--construct checks one hand-built model here; it has no jobs for --launcher {launcher.launcher}",
        )
        result = run_out(args, CONSTRUCT, ConstructConfig(base.task))
        if not result.reused:
            built = result.summary["relu_construction"]
            print(format_table([built], [(k, k, ".3g") for k in built]))
            print(f"outputs: {written(result)}")
        return 0
    configs = {
        "paper": lambda: paper_configs(seeds, base),
        "quick": lambda: paper_configs(seeds, base, shapes=QUICK_SHAPES),
        "grid": lambda: [replace(base, attention=replace(base.attention, attn=a), seed=s) for a in args.attn for s in seeds],
        "cap_sweep": lambda: cap_configs(args.cap_sweep, seeds, base),
        "variants": lambda: variant_configs(seeds, base),
    }[mode]()
    analysis = mode if mode in ("cap_sweep", "variants") else "grid"
    cfg = LabConfig(tuple(configs), analysis, args.workers, args.device, True if args.ensemble else None, args.threads)
    result = run_out(args, LAB, cfg, launcher=launcher)
    if result.reused:
        return 0
    summary = result.summary
    if analysis == "cap_sweep":
        print(format_table(summary["cap_tradeoff"], CAP_COLUMNS))
    elif analysis == "variants":
        print(format_table(summary["variant_table"], VARIANT_COLUMNS))
    elif trigger_report.several_seeds(summary["across_seeds"]):
        print(format_table(trigger_report.seed_rows(summary["across_seeds"]), trigger_report.SEED_COLUMNS))
    else:
        print(trigger_report.trigger_table(summary["runs"]))
    print(f"\noutputs: {written(result)}")
    return 0
