"""Layers that point one way (issue 33, item 3), read from the source: the
imports between innerguard's packages form no cycle, and the policy language
imports none of the layers built on it."""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

# Where each top package's source lives (the install maps engine/ and hooks/
# into innerguard.*); found without importing them, so nothing runs.
ROOTS = {name: Path(importlib.util.find_spec(name).submodule_search_locations[0])
         for name in ("innerguard.engine", "innerguard.hooks")}


def _modules():
    """(module name, source path, is a package) for every module of engine/ and hooks/."""
    for package, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                yield ".".join((package, *parts[:-1])), path, True
            else:
                yield ".".join((package, *parts)), path, False


def _node(module: str) -> str:
    """The layer a module belongs to: a subpackage of engine/ (policy, lint, serve…),
    one of engine/'s own modules (contract, plan, decide, compiler…), hooks/, or hooks/analyzers/."""
    parts = module.split(".")
    if parts[1] == "hooks" and (len(parts) < 3 or parts[2] != "analyzers"):
        return "innerguard.hooks"
    return ".".join(parts[:3])


def _imports(module: str, path: Path, is_package: bool):
    """The innerguard modules ``module`` imports, with the line of each import."""
    package = module if is_package else module.rsplit(".", 1)[0]
    for statement in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(statement, ast.Import):
            names = [alias.name for alias in statement.names]
        elif isinstance(statement, ast.ImportFrom):
            base = statement.module or ""
            if statement.level:
                anchor = package.split(".")[: len(package.split(".")) - (statement.level - 1)]
                base = ".".join(anchor + ([statement.module] if statement.module else []))
            # ``from pkg import name`` may import the submodule pkg.name
            names = [base] + [f"{base}.{alias.name}" for alias in statement.names]
        else:
            continue
        for name in names:
            if name.startswith("innerguard.") and name.count(".") >= 2:
                yield name, statement.lineno


def _graph() -> dict[str, dict[str, list[str]]]:
    """layer -> imported layer -> where (file:line)."""
    graph: dict[str, dict[str, list[str]]] = {}
    for module, path, is_package in _modules():
        for imported, line in _imports(module, path, is_package):
            a, b = _node(module), _node(imported)
            if a != b:
                graph.setdefault(a, {}).setdefault(b, []).append(f"{path.name}:{line}")
    return graph


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one layer (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(layer: str) -> None:
        index[layer] = low[layer] = len(index)
        stack.append(layer)
        for other in graph.get(layer, {}):
            if other not in index:
                visit(other)
                low[layer] = min(low[layer], low[other])
            elif other in stack:
                low[layer] = min(low[layer], index[other])
        if low[layer] == index[layer]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == layer:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for layer in list(graph):
        if layer not in index:
            visit(layer)
    return found


def test_the_packages_import_each_other_without_a_cycle():
    graph = _graph()
    report = [f"{a} -> {b} ({', '.join(graph[a][b][:3])})"
              for cycle in _cycles(graph) for a in cycle for b in graph.get(a, {}) if b in cycle]
    assert not report, "import cycle between packages:\n" + "\n".join(report)


def test_the_policy_language_imports_no_layer_built_on_it():
    built_on = {"innerguard.engine.lint", "innerguard.engine.compiler", "innerguard.engine.decide", "innerguard.engine.serve",
                "innerguard.engine.requests", "innerguard.engine.commands", "innerguard.engine.cli",
                "innerguard.hooks", "innerguard.hooks.analyzers"}
    imported = _graph().get("innerguard.engine.policy", {})
    assert not built_on & set(imported), {layer: imported[layer] for layer in built_on & set(imported)}


def test_a_cycle_would_be_found():
    # The check itself: two layers importing each other are reported.
    assert _cycles({"a": {"b": []}, "b": {"a": []}, "c": {"a": []}}) == [["a", "b"]]


def test_every_import_of_innerguard_is_absolute():
    # One import style, so that a tool reading the source sees every arrow
    # between packages (issue 33, item 1).
    relative = [f"{path.name}:{statement.lineno}" for _module, path, _pkg in _modules()
                for statement in ast.walk(ast.parse(path.read_text())) if isinstance(statement, ast.ImportFrom) and statement.level]
    assert not relative, relative
