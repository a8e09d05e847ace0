"""The layers hold and no module imports itself round a cycle (STYLE.md habit 8).

The layers are import-linter contracts in pyproject.toml (core < runtime < the edge codec and
storage < the server and the cluster < the CLI; the replay and the SDK know no server); the
cycle check builds the import graph of every package of ours with grimp (the graph
import-linter itself uses), imports under `TYPE_CHECKING` included: a cycle that only the type
checker sees is still a seam in the wrong place.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("notify", "client_sdk", "state_transfer", "spark_analysis", "notify_chaos")


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(root: str) -> None:  # iterative: no recursion limit on a deep graph
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(
                        graph.find_modules_directly_imported_by(child)))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        component.append(m)
                        if m == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return out


def test_no_module_of_ours_is_in_an_import_cycle() -> None:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=False, cache_dir=None)
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle_hidden_under_type_checking(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 ) -> None:
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyc import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from cyc import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("cyc", exclude_type_checking_imports=False, cache_dir=None)
    assert cycles(graph) == [["cyc.a", "cyc.b"]]


def test_the_layers_are_kept() -> None:
    """`lint-imports` with pyproject.toml's contracts (what `./dev lint` runs)."""
    r = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command;"
                        " lint_imports_command()", "--no-cache"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout
