"""Reference pages generated from the code itself, so that they cannot drift from it:

- ``.. sinklab-commands::`` every command and flag, read from the real argument parser
  (``sinklab.cli.build_parser``): usage, description, each option's help, default and choices;
- ``.. sinklab-registry:: NAME`` the entries of one of sinklab's registries (attention variants,
  presses, quantizers, interventions, tuning methods, bench tasks and suites) with their help;
- ``.. sinklab-schemas::`` every JSON schema of a summary or results file, as shipped.

Each directive writes reStructuredText and hands it to the parser, with every string that comes
from the code escaped (help texts hold ``*``, backquotes and underscores)."""

from __future__ import annotations

import argparse
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Callable

from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.util.nodes import nested_parse_with_titles

_SPECIAL = re.compile(r"([\\`*_|<>\[\]])")


def escaped(text: object) -> str:
    """``text`` as reStructuredText shows it literally (one line; markup characters escaped)."""
    return _SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def literal(text: object) -> str:
    """``text`` as inline code (backquotes cannot occur inside it: they are replaced by quotes)."""
    return "``" + str(text).replace("`", "'") + "``"


class Generated(Directive):
    """A directive whose content is reStructuredText made by :meth:`lines`."""

    has_content = False
    allows_titles = True  # False: the content is a list, placed inside a container

    def lines(self) -> list[str]:
        raise NotImplementedError

    def run(self):
        from docutils import nodes

        holder = nodes.section() if self.allows_titles else nodes.container()
        holder.document = self.state.document
        nested_parse_with_titles(self.state, StringList(self.lines(), source=f"<{self.name}>"), holder)
        return holder.children


def _option_lines(action: argparse.Action) -> list[str]:
    """One option of a command as a definition-list item: its flags, then help, choices, default."""
    flags = ", ".join(
        literal(f"{flag} {action.metavar}" if action.metavar and action.nargs != 0 else flag) for flag in action.option_strings
    ) or literal(action.dest)
    parts = [escaped(action.help or "")]
    if action.choices is not None and not isinstance(action.choices, dict):
        parts.append("Choices: " + ", ".join(literal(c) for c in action.choices) + ".")
    default = getattr(action, "deferred_default", action.default)  # cli.args.defer_defaults
    if default not in (None, False, argparse.SUPPRESS) and action.nargs != 0:
        parts.append("Default: " + literal(default) + ".")
    return [flags, "   " + " ".join(p for p in parts if p), ""]


@lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    """The parser the command line runs, built once per documentation build."""
    from sinklab.cli import build_parser

    return build_parser()


def _subcommands() -> argparse._SubParsersAction:
    return next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))


def flag_of(command: str, dest: str) -> str:
    """The flag ``sinklab <command>`` gives the setting ``dest``, read from the parser the command
    line runs (never re-derived from the name)."""
    parser = _subcommands().choices[command]
    return next(a.option_strings[0] for a in parser._actions if a.dest == dest and a.option_strings)


class Commands(Generated):
    """Every ``sinklab`` command, from the parser the command line runs."""

    def lines(self) -> list[str]:
        parser, sub = _parser(), _subcommands()
        helps = {choice.dest: choice.help for choice in sub._choices_actions}
        out = [escaped(parser.description), "", escaped(parser.epilog), ""]
        for name, command in sub.choices.items():
            title = f"sinklab {name}"
            out += [
                f".. _cli-{name}:",
                "",
                title,
                "-" * len(title),
                "",
                escaped(helps.get(name) or command.description or ""),
                "",
            ]
            out += ["::", "", *("   " + line for line in command.format_usage().strip().splitlines()), ""]
            if command.description and command.description != helps.get(name):
                out += [escaped(command.description), ""]
            for action in command._actions:
                if isinstance(action, argparse._HelpAction):
                    continue
                out += _option_lines(action)
        return out


def _registries() -> dict[str, Callable[[], list[tuple[str, str]]]]:
    """Each registry a user extends, as (name, one-line help) pairs read from the code."""
    from sinklab.kvcache.registry import PRESSES, QUANTIZERS

    def first_line(obj) -> str:
        return ((getattr(obj, "__doc__", None) or "").strip().splitlines() or [""])[0]

    def attention():
        from sinklab.core.attention.norms import ATTN_NORMS

        return [(name, first_line(cls)) for name, cls in ATTN_NORMS.items()]

    def extras():
        from sinklab.core.attention.extras import HEAD_EXTRAS

        return [(flag_of("pretrain", name), extra.help) for name, extra in HEAD_EXTRAS.items()]

    def policies(family: dict):
        return lambda: [(name, first_line(cls)) for name, cls in family.items()]

    def interventions():
        from sinklab.intervene.interventions import INTERVENTIONS

        return [(flag_of("intervene", option), cls.help) for option, cls in INTERVENTIONS.items()]

    def tuning_methods():
        from sinklab.tune import TUNINGS

        return [(name, cls.help) for name, cls in TUNINGS.items()]

    def bench_tasks():
        from sinklab.bench.task import TASKS

        return [(name, f"{task.title} (v{task.version}, group {task.group}; {task.paper})") for name, task in TASKS.items()]

    def suites():
        from sinklab.bench.tasks import SUITES

        return [(name, ", ".join(tasks)) for name, tasks in SUITES.items()]

    return {
        "attention": attention,
        "extras": extras,
        "presses": policies(PRESSES),
        "quantizers": policies(QUANTIZERS),
        "interventions": interventions,
        "tuning-methods": tuning_methods,
        "bench-tasks": bench_tasks,
        "suites": suites,
    }


class Registry(Generated):
    """The entries of one registry as a definition list."""

    required_arguments = 1
    allows_titles = False

    def lines(self) -> list[str]:
        entries = _registries()[self.arguments[0]]()
        return [line for name, text in entries for line in (literal(name), "   " + (escaped(text) or "(no description)"), "")]


class Schemas(Generated):
    """Every JSON schema sinklab ships, one section each."""

    def lines(self) -> list[str]:
        from sinklab.core.schemas import kinds, schema_of

        out = []
        for kind in kinds():
            schema = schema_of(kind)
            title = f"``{kind}``"
            out += [title, "-" * len(title), "", escaped(schema.get("description", "")), "", ".. code-block:: json", ""]
            out += ["   " + line for line in json.dumps(schema, indent=2).splitlines()] + [""]
        return out


MODULES = "reference/modules"  # generated at build time (git-ignored): one page per package's modules


def module_pages(srcdir: Path) -> None:
    """Write ``reference/modules/<package>.md``: every module of each package with its documented
    members, less those its package exports (documented once, on the package's API page), and the
    index page that lists them. Regenerated on every build, so a new module appears by itself."""
    import importlib

    import sinklab

    root = Path(sinklab.__file__).parent
    groups: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
            if len(parts) <= 2:  # sinklab and its packages: their API pages
                continue
        if parts[-1] == "__main__":
            continue
        groups.setdefault(".".join(parts[:2]) if len(parts) > 2 else "sinklab", []).append(".".join(parts))
    out = srcdir / MODULES
    out.mkdir(parents=True, exist_ok=True)
    for group, modules in groups.items():
        exported = set(getattr(importlib.import_module(group), "__all__", ()))
        body = [
            f"# `{group}` modules",
            "",
            f"Every module of `{group}` with its documented members; the names the package exports "
            "are on [its API page](../api.md).",
        ]
        for name in modules:
            body += module_entry(name, exported)
        _write_if_changed(out / f"{group}.md", "\n".join(body) + "\n")
    index = [
        "# Modules",
        "",
        "Every module of the package with its docstring and documented members: what the code's own",
        "cross-references point to. The public API is on [the API pages](../api.md).",
        "",
        "```{toctree}",
        ":maxdepth: 1",
        "",
        *sorted(groups),
        "```",
    ]
    _write_if_changed(out / "index.md", "\n".join(index) + "\n")


def module_entry(name: str, exported: set[str]) -> list[str]:
    """One module's block: its docstring and the members its own source defines, but those its
    package exports (their API page documents them), constants without a doc comment kept as bare
    targets (autodoc skips them, and the code's cross-references name them)."""
    import importlib

    from sphinx.pycode import ModuleAnalyzer

    documented = {attr for _, attr in ModuleAnalyzer.for_module(name).find_attr_docs()}
    defined = [
        (m, constant)
        for m, constant in defined_names(importlib.import_module(name))
        if m not in exported or (constant and m not in documented)
    ]
    members = [m for m, constant in defined if not constant or m in documented]
    options = (
        [f"   :members: {', '.join(members)}", "   :undoc-members:", "   :ignore-module-all:"] if members else ["   :no-members:"]
    )
    # a module named as its package's function (``applied``): the function is the one target of that name
    no_index = ["   :no-index:"] if name.rpartition(".")[2] in exported else []
    bare = [m for m, constant in defined if constant and m not in documented]
    targets = [line for m in bare for line in (f".. py:data:: {name}.{m}", *no_index, "")]
    return ["", "```{eval-rst}", f".. automodule:: {name}", *options, *no_index, "", *targets, "```"]


def defined_names(module) -> list[tuple[str, bool]]:
    """The public names a module's own source defines at its top level (functions, classes and
    constants, documented or not: the code's cross-references name constants too), in source order."""
    import ast
    import inspect

    names: dict[str, bool] = {}  # name -> whether it is a constant (documented with autodata)
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = False
        elif isinstance(node, ast.Assign):
            targets = [e for t in node.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
            names.update({t.id: True for t in targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = True
    return [(n, constant) for n, constant in names.items() if not n.startswith("_")]


def _write_if_changed(path: Path, text: str) -> None:
    """Rewrite a generated page only when it changes, so that Sphinx's incremental build keeps it."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


#: ``|x|`` in a docstring is an absolute value, never a reStructuredText substitution.
_ABSOLUTE = re.compile(r"(?<![`\\|])\|([^|`\n]{1,40})\|(?![`|_])")


def absolute_values(app, what, name, obj, options, lines: list[str]) -> None:
    """Escape ``|x|`` in docstrings (outside inline code) so that it renders as written."""
    for i, line in enumerate(lines):
        parts = line.split("``")
        lines[i] = "``".join(_ABSOLUTE.sub(r"\\|\1\\|", p) if k % 2 == 0 else p for k, p in enumerate(parts))


_RELATIVE = re.compile(r"(:[a-z]+:`)(~?)(\.+)([A-Za-z_][\w.]*)`")


def package_of(what: str, name: str, obj) -> str:
    """The package a docstring's relative names start from, by Python's rule for relative imports:
    the package of the module that defines the object (a function's or class's own module; for a
    module or a constant, the module its documented name lies in)."""
    import sys

    if what in ("function", "class", "method", "exception", "property", "decorator") and hasattr(obj, "__module__"):
        module = getattr(obj, "__module__", None) or ""
        if what == "method" or what == "property":
            module = name.rpartition(".")[0].rpartition(".")[0] if not module.startswith("sinklab") else module
        return module if hasattr(sys.modules.get(module), "__path__") else module.rpartition(".")[0]
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        module = sys.modules.get(".".join(parts[:end]))
        if module is not None:
            return module.__name__ if hasattr(module, "__path__") else module.__name__.rpartition(".")[0]
    return ""


def relative_references(app, what, name, obj, options, lines: list[str]) -> None:
    """Make ``:func:`.x``` and ``:mod:`..y.z``` absolute as Python's relative imports read them from
    the object's module (Sphinx would search every module for a name ending in ``.x``)."""
    package = package_of(what, name, obj)

    def absolute(match: re.Match) -> str:
        role, _, dots, rest = match.groups()
        base = package.split(".")
        base = base[: len(base) - (len(dots) - 1)] if len(dots) > 1 else base
        return f"{role}~{'.'.join([*base, rest])}`"

    lines[:] = [_RELATIVE.sub(absolute, line) for line in lines]


def resolve_within_packages(app, env, node, contnode):
    """Resolve a Python reference the way a reader of the code would: relative to the module it is
    written in and every package above it (``harness.evaluate`` inside ``sinklab.accuracy``), through
    a package that re-exports it (``sinklab.accuracy.harness.evaluate`` is documented as
    ``sinklab.accuracy.evaluate``), or by the documented object whose name ends so and lies nearest
    to that module. A tie, or no such object, stays unresolved, and the nitpicky build fails on it."""
    if node.get("refdomain") != "py":
        return None
    objects = env.get_domain("py").objects
    target = node["reftarget"].lstrip(".~")
    context = written_in(node)
    candidates = [".".join([*context, node["py:class"], target])] if node.get("py:class") else []
    candidates += [".".join([*context[:depth], target]) for depth in range(len(context), -1, -1)]
    pieces = target.split(".")
    candidates += [".".join(pieces[:i] + pieces[i + 1 :]) for i in range(1, len(pieces) - 1)]
    for candidate in candidates:
        if candidate in objects:
            return _reference(app, env, node, contnode, candidate)
    for tail in (target, ".".join(pieces[-2:]), pieces[-1]):
        matches = [name for name in objects if name.endswith("." + tail)]
        nearest = _nearest(matches, context)
        if nearest:
            return _reference(app, env, node, contnode, nearest)
    return None


def written_in(node) -> list[str]:
    """The module a reference was written in, as its parts: the source file of the docstring (a
    docstring's text is in the module that defines it, wherever the object is documented), else
    the module the page documents."""
    source = str(node.source or "")
    match = re.search(r"src/(sinklab/[\w/]+)\.py", source)
    if match:
        parts = match.group(1).split("/")
        return parts[:-1] if parts[-1] == "__init__" else parts
    return (node.get("py:module") or "").split(".") if node.get("py:module") else []


def _nearest(matches: list[str], context: list[str]):
    """The match sharing the longest leading run of names with ``context``; None on a tie."""

    def shared(name: str) -> int:
        n = 0
        for a, b in zip(name.split("."), context):
            if a != b:
                break
            n += 1
        return n

    ranked = sorted(matches, key=shared, reverse=True)
    if len(ranked) == 1 or (ranked and shared(ranked[0]) > shared(ranked[1])):
        return ranked[0]
    return None


def _reference(app, env, node, contnode, fullname: str):
    domain = env.get_domain("py")
    obj = domain.objects[fullname]
    from sphinx.util.nodes import make_refnode

    return make_refnode(app.builder, node["refdoc"], obj.docname, obj.node_id, contnode, fullname)


def setup(app):
    app.add_directive("sinklab-commands", Commands)
    app.add_directive("sinklab-registry", Registry)
    app.add_directive("sinklab-schemas", Schemas)
    app.connect("builder-inited", lambda app: module_pages(Path(app.srcdir)))
    app.connect("autodoc-process-docstring", absolute_values)
    app.connect("autodoc-process-docstring", relative_references)
    app.connect("missing-reference", resolve_within_packages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
