"""STYLE.md habit 8: no module of notify/core imports another in a cycle, not even under
`TYPE_CHECKING` (a cycle is a seam in the wrong place; transfers.py reads its group through
`TransferHost` instead of importing group.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import notify.core

CORE = Path(notify.core.__file__).parent
PREFIX = "notify.core."


def core_imports(source: str) -> set[str]:
    """The notify.core modules `source` imports, wherever the import stands."""
    deps: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith(PREFIX):
                deps.add(node.module.removeprefix(PREFIX).split(".")[0])
            elif node.module == "notify.core":
                deps.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            deps.update(a.name.removeprefix(PREFIX).split(".")[0] for a in node.names
                        if a.name.startswith(PREFIX))
    return deps


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> None:
        if node in path:
            found.append([*path[path.index(node):], node])
            return
        if node in done:
            return
        path.append(node)
        for dep in sorted(graph.get(node, set())):
            visit(dep)
        path.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)
    return found


def core_graph() -> dict[str, set[str]]:
    modules = {p.stem: p for p in CORE.glob("*.py") if p.stem != "__init__"}
    return {name: core_imports(p.read_text()) & modules.keys() for name, p in modules.items()}


def test_the_core_modules_import_each_other_without_a_cycle() -> None:
    graph = core_graph()
    assert graph["group"] >= {"transfers", "membership", "writes"}
    assert cycles(graph) == []


def test_the_check_would_see_a_cycle_under_type_checking() -> None:
    source = ("from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    from notify.core.group import Group\n")
    graph = {"group": {"transfers"}, "transfers": core_imports(source)}
    assert cycles(graph) == [["group", "transfers", "group"]]
