"""`notify serve`'s event loop: uvloop when installed (and asked for), asyncio's otherwise."""

from __future__ import annotations

import asyncio

import pytest

from notify import eventloop


async def _name() -> str:
    return eventloop.loop_name()


def test_asyncio_when_asked() -> None:
    assert eventloop.run(_name(), "asyncio") == "asyncio"


def test_auto_is_uvloop_exactly_when_it_is_installed() -> None:
    want = "uvloop" if eventloop.uvloop_installed() else "asyncio"
    assert eventloop.run(_name(), "auto") == want


def test_uvloop_asked_for_but_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eventloop, "uvloop_installed", lambda: False)
    import sys
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    with pytest.raises(RuntimeError, match="uvloop is not installed"):
        eventloop.loop_factory("uvloop")
    assert eventloop.loop_factory("auto") is asyncio.new_event_loop
