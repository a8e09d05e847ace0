"""The runtime's `Driver` (notify/runtime/driver.py): the rules every host used to write itself.

Each test injects the fault the rule is for: a write answered after its group left memory and
came back, a log that answers late or never, a connection that closes while its frames wait.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from notify.core import Close, CloseCode, CoreConfig, Hub, Timeouts, Write
from notify.core.events import Hello, Join, Leave
from notify.runtime import Driver, Fetched, Restorable
from notify.storage.memory import MemoryLog
from tests.unit.drive import G, Net, form


class _Host:
    """Ports that hold the log's answers until the test gives them."""

    def __init__(self) -> None:
        self.now = 100.0
        self.fetches: list[tuple[str, Fetched]] = []
        self.frames: dict[int, list[dict[str, Any]]] = {}
        self.log = MemoryLog()

    def push(self, conn: int, data: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        import orjson

        from notify.runtime.frames import unbatch
        self.frames.setdefault(conn, []).extend(unbatch(orjson.loads(data)))

    def close(self, conn: int, code: int, reason: str, *, drain: bool) -> None:
        pass

    def write(self, write: Write, done: Any) -> None:
        self.log.write(write, lambda error: None)
        done(None)

    def fetch(self, group: str, answer: Fetched) -> None:
        self.fetches.append((group, answer))

    def forget(self, group: str) -> None:
        pass

    def answer(self, stored: Restorable | None = None, error: str | None = None) -> None:
        _group, answer = self.fetches.pop(0)
        answer(stored, error)

    def event(self, e: Any) -> None:
        pass

    def checkpoint(self, a: Any) -> None:
        raise AssertionError(a)

    def halt(self, reason: str) -> None:
        raise AssertionError(reason)

    def types(self, conn: int) -> list[str]:
        return [f["type"] for f in self.frames.pop(conn, [])]


def _driver(**timeouts: float) -> tuple[Driver, _Host]:
    host = _Host()
    hub = Hub(CoreConfig(timeouts=Timeouts(**timeouts)), new_token=lambda: "tok", epoch=1)
    driver = Driver(hub, transport=host, store=host, observer=host, clock=lambda: host.now)
    return driver, host


def _hello(driver: Driver, host: _Host, conn: int, member: str) -> None:
    driver.opened(conn)
    driver.frame(conn, Hello(1, member))
    assert host.types(conn) == ["welcome"]


def test_frames_for_a_group_being_loaded_wait_in_order_with_the_close_behind_them() -> None:
    driver, host = _driver()
    _hello(driver, host, 1, "ana")
    driver.frame(1, Join("j1", G))              # not in memory: the log is asked
    driver.frame(1, Join("j2", "other"))        # a later frame of that connection waits too
    driver.closed(1)                            # and so does its close
    assert [g for g, _ in host.fetches] == [G] and host.frames.get(1) is None
    assert driver.hub.session_of(1) is not None
    host.answer()                               # the log never had it: a new group
    assert [g for g, _ in host.fetches] == ["other"]  # the second join's load, in turn
    assert driver.hub.groups[G].view.members == ("ana",)
    host.answer()
    assert "other" in driver.hub.groups
    assert driver.hub.session_of(1) is None     # closed after both joins, not before
    assert driver.loading == 0


def test_a_slow_load_holds_only_its_own_connections_frames() -> None:
    """S3 (head-of-line blocking at a takeover): a load in flight holds the frames of the
    connections that wait for it, and nobody else's. A new owner reloading tens of groups
    serves every loaded group's frames meanwhile, whichever edge link they come over (a routed
    connection is a connection of its own here, `Driver.opened_remote`)."""
    driver, host = _driver()
    _hello(driver, host, 1, "ana")
    _hello(driver, host, 2, "bob")
    driver.frame(2, Join("j0", "loaded"))
    host.answer()                               # bob's group is in memory
    assert "view_install" in host.types(2)
    driver.frame(1, Join("j1", G))              # ana's group is being read, slowly
    driver.frame(2, Join("j2", "loaded2"))      # another group: read at once, not queued
    assert [g for g, _ in host.fetches] == [G, "loaded2"]
    host.fetches.reverse()                      # the second read answers first
    host.answer()
    assert "view_install" in host.types(2) and host.frames.get(1) is None
    driver.frame(2, Leave("l", "loaded"))       # a loaded group's frames go while G is read
    assert host.types(2) == ["view_install"]  # the view without bob, installed at once
    assert "bob" not in driver.hub.groups["loaded"].view.members
    host.answer()
    assert driver.hub.groups[G].view.members == ("ana",) and driver.loading == 0


def test_a_load_that_never_answers_is_refused_at_its_deadline_and_a_late_answer_ignored() -> None:
    driver, host = _driver(write_timeout=5.0)
    _hello(driver, host, 1, "ana")
    driver.frame(1, Join("j1", G))
    assert driver.next_wakeup() == 105.0        # the load's deadline is one of the driver's
    host.now = 105.0
    driver.tick()
    refused = host.frames.pop(1)
    assert [(f["type"], f["code"], f["req"]) for f in refused] == [("error", "unavailable", "j1")]
    assert driver.loading == 0 and driver.next_wakeup() is None
    host.answer()                               # the log, too late: nothing happens
    assert G not in driver.hub.groups and host.frames.get(1) is None
    driver.frame(1, Join("j2", G))              # the connection is not held any more
    host.answer()
    assert "view_install" in host.types(1)


def test_a_group_that_left_memory_comes_back_from_the_log_with_its_versions() -> None:
    driver, host = _driver(idle_group=1.0)
    _hello(driver, host, 1, "ana")
    driver.frame(1, Join("j1", G))
    host.answer()
    driver.frame(1, Leave("l1", G))
    assert driver.hub.groups[G].view.version == 2
    host.now += 2.0
    driver.tick()                               # idle: it leaves memory (G14)
    assert G not in driver.hub.groups
    driver.frame(1, Join("j2", G))
    host.answer(host.log.load_group(G, 100))
    assert driver.stats.groups_loaded == 1
    assert driver.hub.groups[G].view.version == 3  # G1: versions go on


def test_a_write_answered_after_its_group_was_reloaded_is_not_taken_by_the_new_group() -> None:
    net = Net()
    a, _b = form(net, "ana", "bob")
    net.writes_held = True
    net.publish(a, "p1")                        # the old group's write, under way
    assert len(net.writes) == 1
    net.driver.drop_groups([G], "moved")  # it leaves this node (a shard moved)
    old = net.writes.pop()
    c = net.connect("cy")
    net.send(c, Join("j-cy", G))                # back as a new group: its view write is held
    assert len(net.writes) == 1 and net.hub.groups[G].writes.busy
    old[1](None)                                # the old write's answer, for the same ticket
    assert net.hub.groups[G].writes.busy        # not taken: the new group still waits
    assert not net.take(c, "view_install")
    net.finish_writes()
    assert net.take(c, "view_install")


def test_a_close_the_core_asks_for_is_told_to_the_hub_at_once() -> None:
    net = Net()
    a, b = form(net, "ana", "bob")
    net.apply([Close(b, CloseCode.SLOW_CONSUMER, "slow")])
    assert b in net.closed and net.hub.session_of(b) is None
    assert net.hub.session_of(a) is not None


def test_importing_the_replay_loads_no_server_library() -> None:
    """Every Spark executor that replays a group imports spark_analysis.replay: it must not
    pull in the server's sockets, tokens, metrics or SQLite."""
    code = ("import sys, spark_analysis.replay\n"
            "print(sorted(m for m in ('websockets', 'jwt', 'prometheus_client', 'sqlite3',"
            " 'nats', 'notify.server.app') if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=True, env={"NOTIFY_COMPILED": "0",
                                                    "PATH": "/usr/bin:/bin"})
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


def test_a_session_past_its_expiry_is_not_resumed_even_before_a_tick_swept_it() -> None:
    """Whether a resume is taken must not depend on how often a host ticks (the replay ticks
    only at deadlines, the server every 50 ms at most)."""
    net = Net(suspect_timeout=3.0, flush_timeout=5.0)
    a, _b = form(net, "ana", "bob")
    session = net.hub.session_of(a)
    assert session is not None
    net.drop(a)
    net.now += 8.0  # exactly its expiry (suspect + flush timeouts), and no tick
    c = net.connect("ana", session.token)
    assert net.hub.session_of(c) is not session  # a new session (it may keep the token)


def test_a_connection_that_never_says_hello_is_a_deadline_of_the_driver() -> None:
    driver, host = _driver(hello_timeout=10.0)
    driver.opened(1)
    assert driver.next_wakeup() == 110.0
    host.now = 110.0
    driver.tick()
    assert driver.stats.closes == {int(CloseCode.HELLO_TIMEOUT): 1}


def test_frames_held_for_a_load_are_bounded_and_the_flooding_connection_goes(
        monkeypatch: Any) -> None:
    """G14: what waits for a load is bounded; the connection that would pass the bound is
    closed (its client resumes and sends again), the others' frames still go."""
    from notify.runtime import driver as driver_module
    monkeypatch.setattr(driver_module, "MAX_HELD", 3)
    driver, host = _driver()
    _hello(driver, host, 1, "ana")
    _hello(driver, host, 2, "bob")
    driver.frame(1, Join("j1", G))
    driver.frame(2, Join("j2", G))
    driver.frame(1, Leave("l1", G))            # three held: the bound
    assert driver.holds(1) and driver.holds(2)
    driver.frame(1, Leave("l2", G))            # one more from ana: ana goes, with its frames
    assert not driver.holds(1) and driver.hub.session_of(1) is None
    assert driver.stats.closes == {int(CloseCode.SHUTDOWN): 1}
    host.answer()
    assert driver.hub.groups[G].view.members == ("bob",) and driver.loading == 0
