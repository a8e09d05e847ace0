"""Every example runs as the README shows it, against a real server, and says it succeeded."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import MakeServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(("script", "args", "expect"), [
    ("counter.py", [], "converged: same value, same order"),
    ("todo.py", ["demo"], "caught up: exactly the missed items, once, in order"),
])
async def test_example_runs(make_server: MakeServer, script: str, args: list[str],
                            expect: str) -> None:
    srv = await make_server(suspect_timeout=0.5)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLES / script), *args, "--url", srv.url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = out.decode()
    assert proc.returncode == 0, text
    assert expect in text, text
