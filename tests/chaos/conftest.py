"""Helpers of the `notify-chaos run` end-to-end tests (test_e2e.py, test_probe.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["alive", "assert_all_stopped"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too (reaped by nobody yet)
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def assert_all_stopped(out: Path) -> None:
    """Every process the run started (`run.json`'s `pids`) is gone."""
    pids = json.loads((out / "run.json").read_text())["pids"]
    assert pids
    assert [p for p in pids if alive(p)] == []
