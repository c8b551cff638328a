"""The command line's side of a config class (:mod:`.configs`): one flag per setting, with its
default, help, parser and old spellings from the field's :func:`~.configs.setting`, and the flags
parsed back into the config."""

from __future__ import annotations

import argparse
import typing
from collections import Counter
from typing import Any, Callable, Optional, Sequence

from .configs import Leaf, base_type, build, leaves, shown_default
from .errors import SinklabError, check


def comma_list(convert: Callable[[str], Any], what: str, choices: Optional[Sequence[str]] = None) -> Callable[[str], tuple]:
    """A parser of comma-separated values (``1,2,4``); with ``choices``, an error listing them."""

    def parse(text: str) -> tuple:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if choices is not None:
            unknown = [t for t in items if t not in choices]
            if unknown or not items:
                raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown) or repr(text)}; choose from: {', '.join(choices)}")
        try:
            return tuple(convert(t) for t in items)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}") from None

    return parse


def _usage_errors(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A setting's own parser for argparse: its one-line SinklabError becomes argparse's usage error."""

    def parsed(text: str) -> Any:
        try:
            return parse(text)
        except SinklabError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parsed


_SCALARS = {int: "integers", float: "numbers", str: "names"}
MAX_SEEDS = 100_000  # a bound on the configs built in memory; the memory estimate checks the rest


def seed_ranges(text: str) -> tuple[int, ...]:
    """Comma-separated seeds and inclusive ranges, e.g. ``0-31`` or ``0-7,10``; each seed once."""
    seeds: list[int] = []
    for part in (t.strip() for t in text.split(",")):
        first, dash, last = part.partition("-")
        check(
            first.isdigit() and (not dash or last.isdigit()),
            f"expected seeds like 0-7,10 (non-negative integers and ranges), got {text!r}",
        )
        low, high = int(first), int(last or first)
        check(high >= low, f"the seed range {part} is empty: write it low-high")
        check(len(seeds) + high - low + 1 <= MAX_SEEDS, f"{text!r} asks for more than {MAX_SEEDS:,} seeds")
        seeds.extend(range(low, high + 1))
    repeated = sorted(seed for seed, count in Counter(seeds).items() if count > 1)
    check(not repeated, f"seed {repeated[0] if repeated else ''} is given more than once in {text!r}")
    return tuple(seeds)


def _parser(x: Leaf) -> Optional[Callable[[str], Any]]:
    if x.meta["parse"] is not None:
        return _usage_errors(x.meta["parse"])
    base, _ = base_type(x.kind)
    if typing.get_origin(base) is tuple:
        item = typing.get_args(base)[0]
        return comma_list(item, _SCALARS.get(item, "values"), x.meta["choices"])
    return base if base in (int, float, str) else None


def add_flag(parser, x: Leaf, default: Any) -> None:
    meta, base = x.meta, base_type(x.kind)[0]
    aliases = meta["aliases"]
    note = f"; {', '.join(aliases)}: {meta['alias_note'] or 'the old spelling, kept as an alias'}" if aliases else ""
    if base is bool and not meta["choices"]:
        if meta["negate"]:
            flag = meta["flag"] or f"--no-{x.name.replace('_', '-')}"
            parser.add_argument(flag, *aliases, dest=x.name, action="store_false", default=default, help=f"{meta['help']}{note}")
        else:
            parser.add_argument(x.flag, *aliases, dest=x.name, action="store_true", default=default, help=f"{meta['help']}{note}")
        return
    shown = meta["shown"] if meta["shown"] is not None else shown_default(default)
    kw = {
        "type": _parser(x),
        "default": default,
        "dest": x.name,
        "metavar": meta["metavar"] or x.flag.lstrip("-").replace("-", "_").upper(),
    }
    if meta["choices"] and typing.get_origin(base) is not tuple:
        if meta["parse"] is None:
            kw["choices"] = list(meta["choices"])
            del kw["metavar"]
        else:  # argparse checks choices after converting; check the text first
            kw["type"], kw["metavar"] = _one_of(meta["choices"], meta["parse"]), "{" + ",".join(meta["choices"]) + "}"
    default_note = f" (default {shown})" if default is not None or meta["shown"] is not None else ""
    parser.add_argument(x.flag, *aliases, help=f"{meta['help']}{default_note}{note}", **kw)


def _one_of(choices: Sequence[str], parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def checked(text: str) -> Any:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(choices)})")
        return parse(text)

    return checked


def from_args(cls: type, args: argparse.Namespace, **given: Any) -> Any:
    """``cls`` from parsed flags (settings the command line did not define keep their defaults;
    ``given`` sets settings the command works out itself)."""
    values = {x.name: getattr(args, x.name) for x in leaves(cls) if x.meta["cli"] and hasattr(args, x.name)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    return build(cls, {**values, **given})
