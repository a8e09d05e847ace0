"""Issue 16: a group the server can no longer resume must rejoin and say so, never hang.

Real `notify serve` processes: the memory store killed with SIGKILL and restarted, a SQLite
data directory replaced by an empty one, and a member away past retention. In each case the
server refuses the SDK's resume point (`offset_unavailable`), and the SDK joins afresh within
its backoff: the application gets one `Reset` right before the new view's `ViewInstalled`,
`group.view` is the server's view, and a publish after it is delivered. Publishes queued while
the server was away go out in the new view with their ids (`same_view` ones are refused)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from client_sdk import (
    Backoff,
    ClientOptions,
    ConnectionState,
    GroupEvent,
    Message,
    PublishRejected,
    Reset,
    StateReceived,
    View,
    ViewInstalled,
)
from notify.storage.base import StoredGroup
from notify.storage.memory import MemoryLog
from tests.integration.conftest import TIMEOUT, until
from tests.integration.proxy import FaultyProxy
from tests.integration.test_durability import ServerProcess, _free_port

#: the group must work again within the backoff: reconnect attempts every ≤ 0.1 s
FAST = ClientOptions(backoff=Backoff(base=0.02, cap=0.1), request_timeout=TIMEOUT)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    started: list[ServerProcess] = []

    def make(*extra: str, data: str = "data") -> ServerProcess:
        sp = ServerProcess(tmp_path / data, _free_port(), *extra)
        started.append(sp)
        return sp

    yield make
    for sp in started:
        sp.stop()


def installed(version: int | None = None) -> Callable[[GroupEvent], bool]:
    return lambda e: isinstance(e, ViewInstalled) and (version is None or e.view == version)


def message(payload: Any) -> Callable[[GroupEvent], bool]:
    return lambda e: isinstance(e, Message) and e.payload == payload


def the_reset(events: list[GroupEvent]) -> Reset:
    """Exactly one Reset, immediately before the first install after it."""
    resets = [i for i, e in enumerate(events) if isinstance(e, Reset)]
    assert len(resets) == 1, events
    i = resets[0]
    assert isinstance(events[i + 1], ViewInstalled), events
    assert not any(isinstance(e, Message) for e in events[i:]), events  # no old-stream tail
    reset = events[i]
    assert isinstance(reset, Reset)
    return reset


async def test_issue16_memory_store_killed_and_restarted_rejoins_with_reset(
        processes: Callable[..., ServerProcess], sdk: Any) -> None:
    server = processes("--store", "memory")
    server.start()
    a, b = await sdk(server.url, "a", options=FAST), await sdk(server.url, "b", options=FAST)
    ga, gb = await a.join("g"), await b.join("g")
    await until(ga, installed(2))
    await ga.publish("before")
    await until(gb, message("before"))
    old_epoch = b.protocol.groups["g"].epoch

    server.kill()
    # queued while the server is away: stamped with view 2, a view the new log will not have
    # when b is the first back (view 1); same_view cannot be honoured across a reset
    queued = asyncio.get_running_loop().create_task(gb.publish("queued", publish_id="q-1"))
    strict = asyncio.get_running_loop().create_task(gb.publish("strict", same_view=True))
    await asyncio.sleep(0)  # both are in the SDK's queue now
    server.start()

    evs_b = await until(gb, lambda e: isinstance(e, Reset))
    evs_b += await until(gb, installed())
    reset = the_reset(evs_b)
    assert reset.reason == "offset_unavailable" and reset.old_epoch == old_epoch
    assert reset.new_epoch != old_epoch and reset.old_offset == 1
    result = await asyncio.wait_for(queued, TIMEOUT)
    assert result.id == "q-1"
    with pytest.raises(PublishRejected) as refused:
        await asyncio.wait_for(strict, TIMEOUT)
    assert refused.value.code == "stale_view"
    # a comes back too; both end in one view of the new log, and the group works
    evs_a = await until(ga, lambda e: isinstance(e, ViewInstalled) and len(e.members) == 2)
    the_reset(evs_a)
    assert gb.view is not None
    if len(gb.view.members) < 2:  # b was back first
        evs_b += await until(gb, lambda e: isinstance(e, ViewInstalled) and len(e.members) == 2)
    assert ga.view == gb.view and ga.view is not None and ga.view.version == 2
    await asyncio.wait_for(ga.publish("after"), TIMEOUT)
    got = await until(gb, message("after"))
    assert [e.payload for e in evs_b + got if isinstance(e, Message)][-1] == "after"
    assert a.state is b.state is ConnectionState.CONNECTED


class Replica:
    def __init__(self) -> None:
        self.items: list[Any] = []
        self.restored: list[bytes | None] = []

    def snapshot(self) -> bytes:
        return repr(self.items).encode()

    def restore(self, data: bytes) -> None:
        self.restored.append(data)


async def test_issue16_sqlite_data_dir_replaced_rejoins_with_reset_and_asks_for_state(
        processes: Callable[..., ServerProcess], sdk: Any, tmp_path: Path) -> None:
    server = processes("--shutdown-grace", "0.5")  # SQLite, the default store
    server.start()
    a = await sdk(server.url, "a", options=FAST)
    replica = Replica()
    ga = await a.join("g", state=replica)
    for i in range(3):
        await ga.publish(i)
    await until(ga, message(2))
    old_epoch = a.protocol.groups["g"].epoch

    # a clean stop (4003; off the loop, so the client can answer the closing handshake),
    # then the operator swaps the data directory for an empty one
    await asyncio.to_thread(server.stop)
    shutil.move(server.data_dir, tmp_path / "old-data")
    server.data_dir.mkdir()
    server.start()

    evs = await until(ga, lambda e: isinstance(e, StateReceived))
    reset = the_reset(evs)
    assert (reset.reason, reset.old_epoch, reset.old_offset) == ("offset_unavailable",
                                                                old_epoch, 3)
    assert reset.new_epoch != old_epoch and reset.new_offset == 0
    # the fresh join asked for the state (the group has a StateProvider); nobody has it
    assert isinstance(evs[-1], StateReceived) and evs[-1].reason == "state_unavailable"
    assert ga.view == View(1, (a.member,))
    r = await asyncio.wait_for(ga.publish("after"), TIMEOUT)
    evs = await until(ga, message("after"))
    assert r.offset == 1 and next(e for e in evs if isinstance(e, Message)).offset == 1


async def test_issue16_member_away_past_retention_rejoins_with_reset(
        processes: Callable[..., ServerProcess], sdk: Any) -> None:
    server = processes("--retain-messages", "5")
    server.start()
    proxy = await FaultyProxy(server.port).start()
    try:
        a, b = await sdk(server.url, "a", options=FAST), await sdk(proxy.url, "b", options=FAST)
        ga, gb = await a.join("g"), await b.join("g")
        await until(ga, installed(2))
        await ga.publish("seen")
        await until(gb, message("seen"))
        before = b.protocol.groups["g"].resume_point()

        proxy.block()
        proxy.cut()
        await until(ga, lambda e: isinstance(e, ViewInstalled) and tuple(e.users) == ("a",))
        for i in range(20):  # retention keeps 5: b's next message is gone
            await ga.publish(f"while-away-{i}")
        proxy.unblock()

        evs = await until(gb, lambda e: isinstance(e, Reset))
        evs += await until(gb, installed())
        reset = the_reset(evs)
        assert reset.reason == "offset_unavailable"
        assert reset.old_epoch == reset.new_epoch == before["epoch"]  # same log, with a gap
        assert before["offset"] <= reset.old_offset == 1 and reset.new_offset == 21
        assert reset.lost == 15  # retention keeps 17-21: b had 1, so 2-16 are gone
        assert not any(isinstance(e, Message) and str(e.payload).startswith("while-away")
                       for e in evs)
        evs_a = await until(ga, lambda e: isinstance(e, ViewInstalled) and b.member in e.members)
        assert gb.view == View(evs_a[-1].view, evs_a[-1].members)  # type: ignore[union-attr]
        await asyncio.wait_for(gb.publish("back"), TIMEOUT)
        assert [e.payload for e in await until(ga, message("back"))  # type: ignore[union-attr]
                if isinstance(e, Message)] == ["back"]
        # and b's resume point is in the log again: a short cut now resumes without a reset
        proxy.cut()
        await ga.publish("after-cut")
        evs = await until(gb, message("after-cut"))
        assert not any(isinstance(e, Reset) for e in evs)
    finally:
        await proxy.close()


async def test_issue16_view_and_events_agree_with_the_server_after_a_reset(
        processes: Callable[..., ServerProcess], sdk: Any) -> None:
    """No CONNECTED-but-dead group: after the reset, what `group.view` says is what a fresh
    member sees from the server, every member's event stream shows the same installs, and
    messages flow both ways."""
    server = processes("--store", "memory")
    server.start()
    a, b = await sdk(server.url, "a", options=FAST), await sdk(server.url, "b", options=FAST)
    ga, gb = await a.join("g"), await b.join("g")
    await until(ga, installed(2))
    await until(gb, installed(2))
    server.kill()
    server.start()
    evs_a = await until(ga, lambda e: isinstance(e, ViewInstalled) and len(e.members) == 2)
    evs_b = await until(gb, lambda e: isinstance(e, ViewInstalled) and len(e.members) == 2)
    the_reset(evs_a)
    the_reset(evs_b)
    last_a, last_b = evs_a[-1], evs_b[-1]
    assert isinstance(last_a, ViewInstalled) and isinstance(last_b, ViewInstalled)
    assert ga.view == gb.view == View(last_a.view, last_a.members)
    assert (last_a.view, last_a.members) == (last_b.view, last_b.members)

    c = await sdk(server.url, "c", options=FAST)  # a member the server knows only from the new log
    gc = await c.join("g")
    assert gc.view is not None
    assert gc.view.version == last_a.view + 1  # the server's next view after a's and b's
    assert set(gc.view.users) == {"a", "b", "c"}
    for g in (ga, gb):
        evs = await until(g, installed(gc.view.version))
        assert evs[-1].members == gc.view.members  # type: ignore[union-attr]
        assert g.view == gc.view
    await asyncio.wait_for(gc.publish("from c"), TIMEOUT)
    await asyncio.wait_for(gb.publish("from b"), TIMEOUT)
    for g in (ga, gb, gc):
        evs = await until(g, lambda e: isinstance(e, Message) and e.payload == "from b")
        assert [e.payload for e in evs if isinstance(e, Message)] == ["from c", "from b"]


class _Flaky(MemoryLog):
    """A log that cannot be read for a while (a cluster node taking a group over, a log
    electing a leader): `load_group` fails `failures` times."""

    def __init__(self, failures: int) -> None:
        super().__init__(1000)
        self.failures = failures

    def load_group(self, group: str, recent: int) -> StoredGroup | None:
        if self.failures > 0:
            self.failures -= 1
            raise OSError("the log is not readable right now")
        return super().load_group(group, recent)


async def test_unavailable_is_retried_with_the_same_resume_point_not_reset(
        make_server: Any, sdk: Any) -> None:
    """`unavailable` says "not now": the SDK sends the same resume again after a backoff, and
    the member resumes with nothing lost and no `Reset` (a reset would have thrown away a
    resume point that was still good). The scene is a cluster takeover: the group is dropped
    from memory (its members told to reconnect), and the log cannot be read for a while."""
    store = _Flaky(0)
    srv = await make_server(store=store, suspect_timeout=5.0)
    a = await sdk(srv.url, "a", options=FAST)
    b = await sdk(srv.url, "b", options=FAST)
    ga, gb = await a.join("g"), await b.join("g")
    await until(gb, installed(2))
    await ga.publish("before")
    await until(gb, message("before"))
    store.failures = 3
    srv.driver.drop_groups(["g"], "test: the group moved; reconnect")
    r = await asyncio.wait_for(ga.publish("after"), TIMEOUT)
    evs = await until(gb, message("after"))
    assert not any(isinstance(e, Reset | ViewInstalled) for e in evs), evs
    assert store.failures == 0  # the refusals happened, and were retried through
    assert [e.payload for e in evs if isinstance(e, Message)] == ["after"]
    assert r.offset == 2
