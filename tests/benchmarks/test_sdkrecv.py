"""`bench.sdkrecv` in its smallest form: every mode hands the application every message it was
fed, once (the figure it prints is per message taken, so a mode that dropped or doubled some
would print a wrong one; the iterator's application takes until the feed ends, so a doubled
message would count twice). Times nothing (STYLE.md: benchmarks measure, tests do not)."""

from __future__ import annotations

import pytest

from bench.sdkrecv import run


@pytest.mark.parametrize("mode", [{}, {"handler": True}, {"iterator": True},
                                  {"atomic": True}, {"iterator": True, "atomic": True}],
                         ids=["next_event", "handler", "iterator", "atomic", "iterator-atomic"])
async def test_every_message_is_taken_once(mode: dict[str, bool]) -> None:
    _cpu, taken = await run(1_000, 16, **mode)
    assert taken == 1_000
