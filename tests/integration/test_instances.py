"""One user, many tabs and devices (issue 29), through the Python SDK against a real server.

On main before instances, two `connect(url, member="alice")` replaced each other (4002) and
reconnected at once, forever: a third member saw hundreds of view changes in seconds. Now each
client is an instance of its user (`alice#<random>`), presence is by user, and a clash (two
connections given one instance) settles once, with the application told.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import orjson
import pytest

from client_sdk import (
    ConnectionState,
    InstanceReplaced,
    Message,
    Replaced,
    ViewInstalled,
)
from tests.integration.conftest import TIMEOUT, MakeServer, until

pytestmark = pytest.mark.asyncio


class Tab:
    """A user's client in a process of its own (tests/integration/user_tab.py)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[dict[str, Any]] = []

    @classmethod
    async def start(cls, url: str, user: str, n: int) -> Tab:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.integration.user_tab", url, user, "g", str(n),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        tab = cls(proc)
        await tab.wait_for("joined")
        return tab

    async def wait_for(self, event: str, timeout: float = 20.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        async with asyncio.timeout(timeout):
            while True:
                line = await self.proc.stdout.readline()
                assert line, f"the tab ended early: {self.lines}"
                self.lines.append(orjson.loads(line))
                if self.lines[-1]["event"] == event:
                    return self.lines[-1]

    def tell(self, what: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(what.encode() + b"\n")

    def got(self) -> list[tuple[str, Any]]:
        return [(x["sender"], x["payload"]) for x in self.lines if x["event"] == "message"]

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()


async def test_two_processes_of_one_user_are_two_instances_and_settle(
        make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server()
    carol = await sdk(srv.url, "carol")
    gc = await carol.join("g")
    assert gc.view is not None
    start = gc.view.version
    tabs: list[Tab] = []
    try:
        tabs = [await Tab.start(srv.url, "alice", 20) for _ in range(2)]
        evs = await until(gc, lambda e: isinstance(e, ViewInstalled) and
                          len(e.users.get("alice", ())) == 2)
        installs = [e for e in evs if isinstance(e, ViewInstalled) and e.view > start]
        # the user arrived with its first instance; its second is no arrival
        assert [e.users_joined for e in installs] == [("alice",), ()]
        # settled: one view change per instance, and nothing more for a while
        await asyncio.sleep(1.5)
        assert gc.view is not None and gc.view.version == start + 2
        assert set(gc.view.users) == {"carol", "alice"}
        alice1, alice2 = (t.lines[0]["member"] for t in tabs)
        assert alice1 != alice2 and {alice1, alice2} == set(gc.view.users["alice"])

        for i in range(30):
            await gc.publish({"from": "carol", "i": i})
        for t in tabs:
            t.tell("go")
        for t in tabs:
            await t.wait_for("published")
        evs = await until(gc, lambda e: isinstance(e, Message) and e.payload["i"] == 19
                          and e.sender == alice2, timeout=TIMEOUT)
        # each instance's publishes reach the others in its own FIFO order
        for sender, other in ((alice1, tabs[1]), (alice2, tabs[0])):
            await _until_count(other, sender, 20)
            assert [p["i"] for s, p in other.got() if s == sender] == list(range(20))
        # every message once, in order, at each instance: carol's 30 and the other tab's 20
        for t in tabs:
            assert [p["i"] for s, p in t.got() if s == carol.member] == list(range(30))

        # one tab closes: alice is still here through the other
        tabs[0].tell("leave")
        await tabs[0].wait_for("left")
        evs = await until(gc, lambda e: isinstance(e, ViewInstalled) and alice1 in e.left)
        last = evs[-1]
        assert isinstance(last, ViewInstalled)
        assert last.users_left == () and last.users["alice"] == (alice2,)
        assert gc.view is not None and gc.view.version == start + 3
    finally:
        for t in tabs:
            await t.stop()


async def _until_count(tab: Tab, sender: str, n: int) -> None:
    async with asyncio.timeout(TIMEOUT):
        while sum(1 for s, _ in tab.got() if s == sender) < n:
            assert tab.proc.stdout is not None
            line = await tab.proc.stdout.readline()
            assert line, tab.lines
            tab.lines.append(orjson.loads(line))


async def test_a_clash_on_a_named_instance_closes_the_older_once_and_tells_it(
        make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server()
    carol = await sdk(srv.url, "carol")
    gc = await carol.join("g")
    older = await sdk(srv.url, "alice", instance="laptop")
    told: list[InstanceReplaced] = []
    older.on_replaced(told.append)
    await older.join("g")
    await until(gc, lambda e: isinstance(e, ViewInstalled) and older.member in e.members)
    assert gc.view is not None
    before = gc.view.version

    newer = await sdk(srv.url, "alice", instance="laptop")  # the same instance, elsewhere
    gn = await newer.join("g")
    assert gn.view is not None and newer.member == "alice#laptop" in gn.view.members
    async with asyncio.timeout(TIMEOUT):
        while older.state is not ConnectionState.CLOSED:
            await asyncio.sleep(0.01)
    assert isinstance(older.failure, Replaced) and told == [InstanceReplaced("alice#laptop", None)]
    await asyncio.sleep(1.5)  # nothing more happens: the older does not come back
    # the older's removal waited `clash_hold` for the newer's join: one view change for both
    assert gc.view is not None and gc.view.version == before + 1
    assert gc.view.users == {"carol": (carol.member,), "alice": ("alice#laptop",)}
    assert newer.state is ConnectionState.CONNECTED


async def test_a_clash_on_an_instance_the_sdk_picked_takes_a_new_one(
        make_server: MakeServer, sdk: Any) -> None:
    """A copied session (another process given this one's instance): the older, whose instance
    the SDK picked, goes on as a new instance and catches up; the user has two instances."""
    srv = await make_server()
    carol = await sdk(srv.url, "carol")
    gc = await carol.join("g")
    older = await sdk(srv.url, "alice")
    told: list[InstanceReplaced] = []
    older.on_replaced(told.append)
    go = await older.join("g")
    copied = older.instance
    assert copied is not None and older.member == f"alice#{copied}"
    await until(gc, lambda e: isinstance(e, ViewInstalled) and older.member in e.members)
    assert gc.view is not None
    before = gc.view.version

    newer = await sdk(srv.url, "alice", instance=copied)
    await newer.join("g")
    await gc.publish("while-they-settle")
    async with asyncio.timeout(TIMEOUT):
        while not told or older.state is not ConnectionState.CONNECTED:
            await asyncio.sleep(0.01)
    (event,) = told
    assert event.old == f"alice#{copied}" and event.new == older.member != event.old
    evs = await until(go, lambda e: isinstance(e, Message) and e.payload == "while-they-settle")
    assert [e.payload for e in evs if isinstance(e, Message)] == ["while-they-settle"]
    await asyncio.sleep(1.5)
    # the copy replaced the older in one change; the older's new instance joined (its join
    # may land in the same change, if it came within `clash_hold`)
    assert gc.view is not None and gc.view.version <= before + 2
    assert set(gc.view.users["alice"]) == {newer.member, older.member}
    assert older.state is ConnectionState.CONNECTED and newer.state is ConnectionState.CONNECTED


async def test_instances_per_user_are_bounded_with_a_clear_refusal(
        make_server: MakeServer, sdk: Any) -> None:
    from client_sdk import ServerRefused
    from notify.core import Limits

    srv = await make_server(limits=Limits(max_instances_per_user=2))
    await sdk(srv.url, "alice")
    await sdk(srv.url, "alice")
    with pytest.raises(ServerRefused) as refused:
        await sdk(srv.url, "alice")
    assert refused.value.code == "too_many_instances"
    await sdk(srv.url, "bob")  # another user is not affected
