"""The package's layers as docs/architecture.md draws them: lower layers never import higher ones, no import
cycles between modules or packages, no imports inside functions, and no command module importing another."""

from __future__ import annotations

import ast
from pathlib import Path

import triton_backend_gen

PACKAGE = Path(triton_backend_gen.__file__).parent
# Rank of each top-level module or package: an import may go to the same rank or a lower one.
RANKS = {
    "versions": 0,
    "errors": 0,
    "signals": 0,
    "project": 0,
    "signature": 0,
    "frameworks": 0,
    "__init__": 0,
    "findings": 0,
    "lazy": 0,
    "scaffold": 1,
    "model_config": 1,
    "docker_engine": 2,
    "discovery": 2,
    "toolchain": 3,
    "runtime": 3,
    "smoke": 4,
    "perf": 4,
    "tune": 4,
    "deploy": 4,
    "commands": 5,
    "pytest_plugin": 5,
    "testing": 5,
    "cli": 6,
    "__main__": 6,
}


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts) or "__init__"
        found[name] = path
    return found


def imports_of(path: Path, name: str) -> tuple[set[str], list[int]]:
    """(the package's modules that ``path`` imports outside TYPE_CHECKING blocks, lines of imports in
    functions)."""
    tree = ast.parse(path.read_text())
    type_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("triton_backend_gen"):
            base = node.module.removeprefix("triton_backend_gen").lstrip(".")
            for alias in node.names:
                candidate = f"{base}.{alias.name}".lstrip(".")
                targets.add(candidate if candidate in modules() else base or "__init__")
        elif isinstance(node, ast.Import):
            targets |= {
                a.name.removeprefix("triton_backend_gen.")
                for a in node.names
                if a.name.startswith("triton_backend_gen.")
            }
    in_functions = [
        node.lineno
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(fn)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    ]
    return targets - {name}, in_functions


def top(name: str) -> str:
    return name.split(".")[0]


GRAPH = {name: imports_of(path, name) for name, path in modules().items()}


def test_every_module_has_a_rank():
    assert {top(name) for name in GRAPH} <= set(RANKS)


def test_lower_layers_never_import_higher_ones():
    upward = [
        f"{name} -> {target}"
        for name, (targets, _) in GRAPH.items()
        for target in targets
        if RANKS[top(target)] > RANKS[top(name)]
    ]
    assert upward == []


def test_toolchain_and_runtime_are_siblings_that_never_import_each_other():
    crossing = [
        f"{name} -> {target}"
        for name, (targets, _) in GRAPH.items()
        for target in targets
        if {top(name), top(target)} == {"toolchain", "runtime"}
    ]
    assert crossing == []


def test_no_import_cycles_between_modules_or_packages():
    def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
        found, index, low, stack, on_stack = [], {}, {}, [], set()

        def visit(node: str) -> None:
            index[node] = low[node] = len(index)
            stack.append(node)
            on_stack.add(node)
            for successor in edges.get(node, ()):
                if successor not in index:
                    visit(successor)
                    low[node] = min(low[node], low[successor])
                elif successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

        for node in list(edges):
            if node not in index:
                visit(node)
        return found

    module_edges = {name: {t for t in targets if t in GRAPH} for name, (targets, _) in GRAPH.items()}
    assert cycles(module_edges) == []
    package_edges: dict[str, set[str]] = {}
    for name, targets in module_edges.items():
        package_edges.setdefault(top(name), set()).update(top(t) for t in targets if top(t) != top(name))
    assert cycles(package_edges) == []


def test_no_imports_inside_functions():
    inside = {name: lines for name, (_, lines) in GRAPH.items() if lines}
    assert inside == {}


def test_the_rank_table_is_not_vacuous():
    # A graph read wrongly (no edges) would pass every test above.
    edges = sum(len(targets) for targets, _ in GRAPH.values())
    assert (
        edges > 50
        and "project" in GRAPH["commands.test"][0]
        and "runtime" in {top(t) for t in GRAPH["commands.test"][0]}
    )


def test_no_command_imports_another_command():
    leaning = [
        f"{name} -> {target}"
        for name, (targets, _) in GRAPH.items()
        if name.startswith("commands.")
        for target in targets
        if target.startswith("commands.") and top(target) == "commands"
    ]
    assert leaning == []
