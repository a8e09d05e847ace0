"""STYLE.md: the core imports no I/O, no clock and no randomness (time and randomness are
parameters of the core, never read inside it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import notify.core

FORBIDDEN = {"asyncio", "websockets", "sqlite3", "socket", "time", "random"}
CORE = Path(notify.core.__file__).parent
MODULES = sorted(CORE.rglob("*.py"))


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_core_has_modules() -> None:
    assert {p.name for p in MODULES} >= {"hub.py", "group.py", "membership.py", "topic.py",
                                         "atomic.py", "actions.py", "events.py"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_core_module_imports_no_io_clock_or_randomness(path: Path) -> None:
    assert imported(path) & FORBIDDEN == set()


def test_the_check_would_see_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom asyncio import sleep\nfrom . import sibling\n")
    assert imported(bad) & FORBIDDEN == {"time", "asyncio"}
