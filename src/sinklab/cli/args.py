"""Argument types and groups shared by several commands; defaults come from the config dataclasses, never typed twice."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..core import configs, html, pipeline
from ..core.attention import EXTRA_NAMES, HEAD_EXTRAS
from ..core.errors import SinklabError, check
from ..core.flags import add_flag, from_args, seed_ranges
from ..core.launchers import LAUNCHERS, LauncherSettings, check_launcher, read_launcher_config
from ..core.runs import SUMMARY, read_run_info
from ..models.hf import MODEL_HELP as MODEL_HELP  # every command's MODEL argument takes its help from here
from ..models.hf import LoadOptions, resolved_config
from ..scan import BOS_CHOICES


def _parsed_list(text: str, convert: Callable[[str], Any], what: str) -> list:
    try:
        return [convert(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}") from None


def argument_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` as an argparse type: its one-line SinklabError becomes argparse's usage error."""

    def converted(text: str) -> Any:
        try:
            return parse(text)
        except SinklabError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return converted


def int_list(text: str) -> list[int]:
    return _parsed_list(text, int, "integers")


def seed_list(text: str) -> list[int]:
    """Comma-separated seeds and inclusive ranges, e.g. ``0-31`` or ``0-7,10``; each seed once."""
    return list(argument_type(seed_ranges)(text))


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


def option(
    p,
    defaults: object,
    name: str,
    help: str,
    type: Optional[Callable] = None,
    flag: Optional[str] = None,
    aliases: Sequence[str] = (),
    **kw,
) -> None:
    """``--name`` (or ``flag``, plus the old spellings ``aliases``) with the default of field ``name``
    of the ``defaults`` dataclass instance."""
    default = getattr(defaults, name)
    kind = type or (default.__class__ if default is not None and not isinstance(default, bool) else None)
    flag = flag or f"--{name.replace('_', '-')}"
    kw.setdefault("metavar", flag.lstrip("-").replace("-", "_").upper())
    p.add_argument(
        flag, *aliases, type=kind, default=default, dest=name, help=f"{help} (default {default}){alias_note(aliases)}", **kw
    )


def alias_note(aliases: Sequence[str]) -> str:
    """What the help of a flag says about its old spellings."""
    return f"; {', '.join(aliases)}: the old spelling, kept as an alias" if aliases else ""


def add_bos_argument(p, default: str = "auto", auto: str = "when the tokenizer has one", effect: str = "", **kw) -> None:
    """``--bos {auto,yes,no}``; ``auto`` says what auto means for this command, ``effect`` what follows."""
    p.add_argument(
        "--bos",
        choices=BOS_CHOICES,
        default=default,
        help=f"put a BOS token first in every sequence: yes, no, or auto ({auto}){effect} (default {default})",
        **kw,
    )


def add_overwrite_argument(p) -> None:
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the sinklab run in --out (removed first). Without it, the same configuration resumes an unfinished run "
        "where the command can (else starts over) and leaves a finished one alone; another configuration is refused",
    )


def add_resume_arguments(p) -> None:
    """``--overwrite`` and ``--resume`` of the commands that resume from checkpoints."""
    either = p.add_mutually_exclusive_group()
    add_overwrite_argument(either)
    either.add_argument(
        "--resume",
        action="store_true",
        help="insist on resuming: the same command continues the run in --out from its last checkpoint anyway; "
        "with --resume, a folder holding no checkpoint is an error instead of a fresh start",
    )


def add_extra_arguments(p) -> None:
    """One switch per per-head extra (from the extras registry)."""
    for name in EXTRA_NAMES:
        p.add_argument(f"--{name.replace('_', '-')}", action="store_true", help=HEAD_EXTRAS[name].help)


def extra_flags(args: argparse.Namespace) -> dict:
    """The per-head extras switched on, as AttentionSpec keyword arguments."""
    return {name: getattr(args, name) for name in EXTRA_NAMES}


#: Argument-group titles of a config's nested groups (see :func:`add_config_arguments`).
GROUP_TITLES = {
    "inputs": "the input (one of --text, --prompt, --corpus, --random-tokens)",
    "settings": "metric thresholds",
    "load": "loading the model",
    "evaluation": "evaluation",
}


def add_config_arguments(p: argparse.ArgumentParser, cls: type, skip: Sequence[str] = (), groups: Optional[dict] = None) -> None:
    """One flag per setting of the config class ``cls`` (:mod:`sinklab.core.configs`), its nested
    groups as argument groups; defaults and help come from the class."""
    made = {} if groups is None else groups
    for leaf in configs.leaves(cls):
        if not leaf.meta["cli"] or leaf.name in skip or any(a.dest == leaf.name for a in p._actions):
            continue
        group = leaf.path[0] if len(leaf.path) > 1 else None
        if group is not None and group not in made:
            made[group] = p.add_argument_group(GROUP_TITLES.get(group, group))
        add_flag(made[group] if group is not None else p, leaf, leaf.default())


def defer_defaults(p: argparse.ArgumentParser, names: Sequence[str]) -> None:
    """Flags read only under another (``--budget`` under ``--during decode``) or refused under one (a
    model run's under ``intervene --trigger``) default to None, so that one given is told from one
    left out (:func:`given_settings`) and refused there even at its default; the help, and
    ``deferred_default`` for the generated reference, keep the config's default."""
    for action in (a for a in p._actions if a.dest in names):
        action.deferred_default = action.default  # type: ignore[attr-defined]
    p.set_defaults(**dict.fromkeys(names))


def given_settings(args: argparse.Namespace, cls: type, names: Sequence[str]) -> list[str]:
    """Which of ``names`` (deferred by :func:`defer_defaults`) the user gave; each one left out
    then takes ``cls``'s default."""
    given = [name for name in names if getattr(args, name) is not None]
    for name in names:
        if getattr(args, name) is None:
            setattr(args, name, configs.leaf(cls, name).default())
    return given


def config_from(cls: type, args: argparse.Namespace, launcher: Optional[LauncherSettings] = None, **given: Any) -> Any:
    """The config ``cls`` from parsed flags (``given``: settings the command works out itself). Its
    load options are resolved on this machine (what config.json records and the --out policy
    compares: ``--device auto`` and ``--device cpu`` on a CPU are one configuration), unless the
    jobs run elsewhere (a cluster's nodes resolve them)."""
    cfg = from_args(cls, args, **given)
    loads = isinstance(cfg, LoadOptions) or isinstance(getattr(cfg, "load", None), LoadOptions)
    return resolved_config(cfg) if loads and (launcher is None or launcher.runs_here) else cfg


def run_out(
    args: argparse.Namespace, capability, cfg: Any, subject: Any = None, launcher: Optional[LauncherSettings] = None, **kw
):
    """Run ``capability`` through the one pipeline into ``--out``; on a finished run of the same
    configuration, say where its results are. Returns the result."""
    result = pipeline.run(capability, cfg, subject, out=args.out, overwrite=args.overwrite, launcher=launcher, **kw)
    if result.reused:
        print(
            f"{args.out} holds this run, finished: results in {args.out}/{SUMMARY} and {html.report_path(Path(args.out))} "
            "(--overwrite runs it again)"
        )
    return result


def written(result) -> str:
    """Where a run's outputs are, for the last line a command prints."""
    info = read_run_info(result.out)
    return f"{result.out}/: " + ", ".join(info.get("files", [])) if info.get("files") else f"{result.out}/"


#: The launcher flags: LauncherSettings field -> (flag and its old spellings, type, metavar, the engines it applies to, help).
#: None (not given) keeps the --launcher-config file's value, else the field's default.
SLURM, RAY = ("slurm",), ("ray",)
LAUNCHER_FLAGS = {
    "partition": (("--partition",), str, "NAME", SLURM, "slurm: the partition (default: the cluster's)"),
    "timeout_min": (
        ("--timeout-min", "--time"),
        int,
        "MINUTES",
        SLURM,
        f"slurm: each job's time limit, submitit's timeout_min (default {LauncherSettings().timeout_min})",
    ),
    "gpus_per_job": (
        ("--gpus-per-job",),
        int,
        "N",
        SLURM + RAY,
        "GPUs each job gets: slurm --gpus-per-node, ray num_gpus (default 0; 1 where the jobs train on cuda)",
    ),
    "cpus_per_job": (
        ("--cpus-per-job",),
        int,
        "N",
        SLURM + RAY,
        "CPUs each job gets and its torch threads (default as the local pool: 1 when jobs run side by side)",
    ),
    "array_parallelism": (("--array-parallelism",), int, "N", SLURM, "slurm: jobs of the array running at once (default: all)"),
    "ray_address": (
        ("--ray-address",),
        str,
        "ADDRESS",
        RAY,
        "ray: the cluster to join, HOST:PORT, ray://HOST:PORT or auto (default: start a local Ray)",
    ),
}


def add_launcher_arguments(p) -> None:
    """``--launcher {local,slurm,ray}``, a ``--launcher-config`` file and the engine's settings
    (:class:`~sinklab.core.launchers.LauncherSettings`); flags override the file."""
    g = p.add_argument_group("where the jobs run")
    g.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default=None,
        help="local: this machine's process pool; slurm: a Slurm job array through submitit; ray: a Ray cluster "
        f"(pip install 'sinklab[ray]') (default {LauncherSettings().launcher}). Finished jobs are never rerun, "
        "whichever launcher ran them; a failed job is named with its log and does not lose the others",
    )
    g.add_argument(
        "--launcher-config",
        metavar="FILE",
        help="a JSON (or .toml) object of launcher settings: launcher, partition, timeout_min (old spelling: "
        "time), gpus_per_job, cpus_per_job, array_parallelism, slurm_extra, ray_address, cluster (submitit's: "
        "local runs the slurm path here); flags override it",
    )
    for name, (flags, kind, metavar, _, help) in LAUNCHER_FLAGS.items():
        g.add_argument(*flags, dest=name, type=kind, metavar=metavar, default=None, help=help + alias_note(flags[1:]))
    g.add_argument(
        "--slurm-extra",
        action="append",
        metavar="KEY=VALUE",
        default=None,
        help="slurm: another sbatch option, e.g. account=lab or mem=16G (repeatable)",
    )


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
    given_flags = [
        (flags[0], engines) for name, (flags, *_, engines, _) in LAUNCHER_FLAGS.items() if getattr(args, name) is not None
    ]
    given_flags += [("--slurm-extra", SLURM)] if args.slurm_extra else []
    foreign = [(flag, engines) for flag, engines in given_flags if settings.launcher not in engines]
    check(
        not foreign,
        f"{', '.join(flag for flag, _ in foreign)} do(es) not apply to --launcher {settings.launcher}: "
        + "; ".join(f"{flag} is for --launcher {' or '.join(engines)}" for flag, engines in foreign),
    )
    check_launcher(settings)
    return settings


#: What an interrupted command tells the user (set as ``on_interrupt`` by every command).
STARTS_OVER = "results are written at the end, so nothing was saved; run the command again"
