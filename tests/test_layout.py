"""The folder tree is the architecture: these tests walk the package and fail on an import cycle,
on a layer importing upwards (cli and api -> capabilities -> models -> core), on a capability reaching
into another capability's modules instead of its package API, and on modules grown too long."""

import ast
from pathlib import Path

import pytest

import sinklab

ROOT = Path(sinklab.__file__).parent
CAPABILITIES = {
    *("trigger", "scan", "intervene", "pretrain", "stream", "adapt"),
    *("kvcache", "compress", "accuracy", "tune", "bench"),
}
MAX_LINES = 300


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def modules() -> dict[str, set[str]]:
    """Every sinklab module and the sinklab modules it imports (functions' imports included)."""
    known = {module_name(p) for p in ROOT.rglob("*.py")}
    graph = {}
    for path in ROOT.rglob("*.py"):
        name, is_package = module_name(path), path.name == "__init__.py"
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = resolve(name, is_package, node)
                targets |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
        graph[name] = {t for t in targets if t in known and t != name}
    return graph


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "sinklab"


def test_no_import_cycles():
    graph, state, stack = modules(), {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(nxt) :] + [nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)


ALLOWED = {
    "core": {"core"},
    "models": {"core", "models"},
    **{cap: {"core", "models"} | CAPABILITIES for cap in CAPABILITIES},
    "cli": {"core", "models", "cli"} | CAPABILITIES,
    "api": {"core", "models"} | CAPABILITIES,  # the notebook entry points, beside the CLI
    "editing": {"core", "models"} | CAPABILITIES,  # sinklab.applied: every capability's edits in one block
    "sinklab": {"cli"},
    "__main__": {"cli"},
}


def test_imports_point_down_and_capabilities_meet_only_through_their_package_api():
    problems = []
    for module, targets in modules().items():
        here = layer(module)
        for target in targets:
            there = layer(target)
            if there != "sinklab" and there not in ALLOWED[here]:
                problems.append(f"{module} imports {target} ({here} may not import {there})")
            if here in CAPABILITIES | {"api", "editing"} and there in CAPABILITIES - {here} and target.count(".") > 1:
                problems.append(f"{module} imports {target}: use the package API sinklab.{there}")
            if here == "cli" and module != "sinklab.cli" and target == "sinklab.cli":
                problems.append(f"{module} imports the CLI root back")
    assert not problems, "\n".join(problems)


def test_capability_graph_is_acyclic():
    edges = {cap: set() for cap in CAPABILITIES}
    for module, targets in modules().items():
        if layer(module) in CAPABILITIES:
            edges[layer(module)] |= {layer(t) for t in targets if layer(t) in CAPABILITIES - {layer(module)}}
    for cap, deps in edges.items():
        for dep in deps:
            assert cap not in edges[dep], f"{cap} and {dep} import each other"


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_too_long(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES


def test_nothing_is_defined_and_never_used():
    """A top-level function or class of the package that no code names (in the package,
    benchmarks, examples or tests: a name, an attribute or an import), undecorated (a registry's
    entries are used through it) and not a module dunder, is dead code. Mutation tried:
    core.flags.add_arguments back (it was never called): fails naming it."""
    repo = ROOT.parent.parent
    named = set()
    for folder in (ROOT, repo / "benchmarks", repo / "examples", repo / "tests"):
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Name):
                    named.add(node.id)
                elif isinstance(node, ast.Attribute):
                    named.add(node.attr)
                elif isinstance(node, ast.alias):
                    named.add(node.name.rsplit(".", 1)[-1])
    dead = [
        f"{path.relative_to(ROOT)}:{node.name}"
        for path in ROOT.rglob("*.py")
        for node in ast.parse(path.read_text()).body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef))
        and not node.decorator_list
        and not node.name.startswith("__")
        and node.name not in named
    ]
    assert not dead, dead
