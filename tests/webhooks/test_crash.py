"""At least once across a down receiver and a SIGKILL (issue 31, "What it must show"): the
receiver is down for 10 s while members come and go and messages are published; it comes back
slow, the server is SIGKILLed once some events are delivered, and restarted on the same data
directory: every event arrives, duplicates carry the same `webhook-id` (and are the same
event), every signature verifies, and each group's events keep their order."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from client_sdk import connect
from tests.webhooks.conftest import Receiver, write_config

pytestmark = pytest.mark.timeout(120)


def _what(kind: str, data: dict[str, object]) -> tuple[object, ...]:
    return (data["group"], kind, data.get("member") or data.get("user") or data.get("offset"))


async def test_down_then_sigkill_mid_delivery(serve, receiver: Receiver, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "hooks.toml", receiver.url)
    data = tmp_path / "data"
    s = await serve("--config", str(cfg), api=False, data_dir=data)
    await receiver.down()
    down_at = time.monotonic()
    expected: list[tuple[object, ...]] = []
    async with connect(s.ws, member="ann", instance="a") as ann, \
            connect(s.ws, member="ben", instance="b") as ben:
        chat = await ann.join("chat:1")
        other = await ben.join("room-2")
        await ben.join("chat:1")
        offsets = [(await chat.publish({"n": i})).offset for i in range(5)]
        await other.publish({"not": "sent"})  # room-2's messages are not configured
        await chat.leave()
    expected += [("chat:1", "group.occupied", None), ("chat:1", "member.arrived", "ann#a"),
                 ("chat:1", "user.arrived", "ann"),
                 ("room-2", "group.occupied", None), ("room-2", "member.arrived", "ben#b"),
                 ("room-2", "user.arrived", "ben"),
                 ("chat:1", "member.arrived", "ben#b"), ("chat:1", "user.arrived", "ben"),
                 *(("chat:1", "message", o) for o in offsets),
                 ("chat:1", "member.left", "ann#a"), ("chat:1", "user.left", "ann"),
                 ("chat:1", "member.left", "ben#b"), ("chat:1", "user.left", "ben"),
                 ("chat:1", "group.vacated", None),
                 ("room-2", "member.left", "ben#b"), ("room-2", "user.left", "ben"),
                 ("room-2", "group.vacated", None)]
    await asyncio.sleep(max(0.0, 10.0 - (time.monotonic() - down_at)))  # down for 10 s
    assert not receiver.got
    receiver.delay = 0.3
    await receiver.up()
    await receiver.until(lambda: len(receiver.got) >= 3, timeout=30)
    assert s.proc is not None
    s.proc.send_signal(signal.SIGKILL)  # mid-delivery: most events are still in the outbox
    await asyncio.to_thread(s.proc.wait, 10)
    before_kill = len(receiver.unique())
    assert before_kill < len(expected), "the kill was not mid-delivery"
    receiver.delay = 0.0
    s2 = await serve("--config", str(cfg), api=False, data_dir=data)

    def arrived() -> list[tuple[object, ...]]:
        return [_what(k, d) for k, d in receiver.unique().values()]

    await receiver.until(lambda: sorted(map(str, arrived())) == sorted(map(str, expected)),
                         timeout=40)
    assert not receiver.bad, receiver.bad  # every signature verified
    # in order per group (first arrival of each id)
    for group in ("chat:1", "room-2"):
        assert [x for x in arrived() if x[0] == group] == [x for x in expected if x[0] == group]
    assert s2.proc is not None and s2.proc.poll() is None
