"""G13 failure containment with real storage failures: SQLite itself refuses a write (a trigger
raising an error, as a full disk or an I/O error would), against a server on real sockets.

- a commit that fails is refused to its publisher and nothing else notices: later messages are
  delivered with no seq gap, and the membership still changes;
- a view that cannot be stored stops `notify serve` (exit 70, fail-stop), and a restart on the
  same data recovers every published message with view versions going on (G1, G10).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import pytest

from notify.server.app import NotifyServer
from notify.storage.sqlite import SqliteLog
from tests.integration.conftest import TIMEOUT, MakeServer, OpenRaw
from tests.integration.test_durability import ServerProcess, _free_port

#: storage refuses any message whose payload says "boom" (the rest of the log works)
FAIL_BOOM = ("CREATE TRIGGER boom BEFORE INSERT ON messages "
             "WHEN CAST(NEW.payload AS TEXT) LIKE '%boom%' "
             "BEGIN SELECT RAISE(ABORT, 'injected: disk I/O error'); END")
#: storage refuses every view install
FAIL_VIEWS = ("CREATE TRIGGER no_views BEFORE INSERT ON installs "
              "BEGIN SELECT RAISE(ABORT, 'injected: disk full'); END")


async def test_G13_a_failed_commit_is_refused_and_the_group_goes_on(
        make_server: MakeServer, open_raw: OpenRaw, tmp_path: Path) -> None:
    store = SqliteLog(tmp_path / "log.db")
    srv: NotifyServer = await make_server(store=store)
    store._db.execute(FAIL_BOOM)
    alice, bob = await open_raw(srv, "alice"), await open_raw(srv, "bob")
    alice.auto_flush = bob.auto_flush = True
    await alice.join("g")
    await asyncio.gather(bob.join("g"), alice.expect("view_install"))
    answers = []
    for i, text in enumerate(["one", "boom", "two"]):
        await alice.send({"type": "publish", "req": f"r{i}", "group": "g", "id": f"p{i}",
                          "view": 2, "payload": text})
        answers.append(await alice.expect(lambda f: f["type"] in ("published", "rejected")))
    assert [(a["type"], a.get("code")) for a in answers] == [
        ("published", None), ("rejected", "storage_failed"), ("published", None)]
    got = [await bob.expect("deliver") for _ in range(2)]
    assert [(f["payload"], f["seq"], f["offset"]) for f in got] == [("one", 1, 1), ("two", 2, 2)]
    carol = await open_raw(srv, "carol")  # the membership is not frozen by the failure
    install, *_ = await asyncio.gather(carol.join("g"), alice.expect("view_install"),
                                       bob.expect("view_install"))
    assert install["view"] == 3
    assert srv.stats.internal_errors == 0 and srv.halt_reason is None


async def test_G13_a_view_that_cannot_be_stored_stops_the_server_and_a_restart_recovers(
        tmp_path: Path, open_raw: OpenRaw) -> None:
    proc = ServerProcess(tmp_path / "data", _free_port(), "--flush-timeout", "1",
                         "--recovery-window", "1")
    proc.start()
    try:
        alice = await open_raw(proc, "alice")
        alice.auto_flush = True
        await alice.join("g")
        for i in range(3):
            await alice.send({"type": "publish", "req": f"r{i}", "group": "g", "id": f"p{i}",
                              "view": 1, "payload": i})
            await alice.expect("published")
        db = sqlite3.connect(tmp_path / "data" / "notify.db")
        db.execute(FAIL_VIEWS)
        db.commit()
        bob = await open_raw(proc, "bob")
        await bob.send({"type": "join", "req": "j", "group": "g"})
        assert proc.proc is not None
        code = await asyncio.to_thread(proc.proc.wait, TIMEOUT)
        assert code == 70  # fail-stop: the view was never installed anywhere
        if proc.proc.stderr is not None:
            proc.proc.stderr.close()
        assert await alice.close_code() == 1006  # dropped with no close frame (no goodbye)
        assert [f for f in alice.seen if f["type"] == "view_install" and f["view"] == 2] == []

        db.execute("DROP TRIGGER no_views")
        db.commit()
        stored = db.execute('SELECT COUNT(*), MAX("offset") FROM messages').fetchone()
        assert stored == (3, 3)  # every published message is in the log
        assert db.execute("SELECT view FROM groups WHERE grp='g'").fetchone() == (1,)
        db.close()
        proc.start()
        carol = await open_raw(proc, "carol")
        carol.auto_flush = True
        install = await carol.join("g")
        # Versions go on from the stored view 1 (nobody ever installed the refused 2), and the
        # log goes on from the last published offset.
        assert install["view"] >= 2 and install["offset"] == 3
    finally:
        proc.stop()


async def test_G13_a_timer_that_dies_stops_the_server_loudly(open_raw: OpenRaw) -> None:
    """Every deadline (suspect, flush, ACK, write) rides on the timer task: if it dies, groups
    would wait forever, so the server fails stop instead."""
    halts: list[str] = []
    srv = NotifyServer(port=0, on_halt=halts.append)
    await srv.start()
    try:
        def broken() -> float | None:
            raise RuntimeError("injected")

        srv.hub.next_deadline = broken  # type: ignore[method-assign]
        await asyncio.wait_for(srv.halted.wait(), TIMEOUT)
        assert halts and "timer task died" in halts[0] and "injected" in halts[0]
    finally:
        await srv.stop()


async def test_G13_a_timer_cancelled_by_anyone_but_stop_stops_the_server() -> None:
    """A cancel is a death too unless the server's own `stop()` made it (notify/supervision.py):
    before, a cancelled timer was taken for a stop and the server ran on without deadlines."""
    halts: list[str] = []
    srv = NotifyServer(port=0, on_halt=halts.append)
    await srv.start()
    try:
        assert srv._timer is not None
        srv._timer.task.cancel()
        await asyncio.wait_for(srv.halted.wait(), TIMEOUT)
        assert halts and "timer task died" in halts[0] and "not by its owner" in halts[0]
    finally:
        await srv.stop()
    assert halts == [halts[0]]  # and stop() reports nothing more


async def test_a_start_that_fails_or_a_stop_cut_short_is_no_timer_death() -> None:
    """The timer ends with its owner: a start whose placement fails stops the timer it began
    (and closes its listener), and a stop cancelled before it reached the timer does not turn
    the timer's end into a death (`LongTask`'s `owner_stopping`)."""
    from notify.runtime.placement import LocalPlacement

    class FailingPlacement(LocalPlacement):
        async def start(self, host: object) -> None:
            raise RuntimeError("injected: the store cannot be read")

    halts: list[str] = []
    srv = NotifyServer(port=0, on_halt=halts.append, placement=FailingPlacement())
    with pytest.raises(RuntimeError, match="injected"):
        await srv.start()
    await asyncio.sleep(0.05)
    assert srv._timer is not None and srv._timer.done() and halts == []

    srv = NotifyServer(port=0, on_halt=halts.append, drain_delay=0.5)
    await srv.start()
    stopping = asyncio.create_task(srv.stop())
    await asyncio.sleep(0.05)  # in its drain delay, before the timer's stop
    stopping.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await stopping
    try:
        assert srv._timer is not None
        srv._timer.task.cancel()  # as the loop's end cancels what is left
        await asyncio.sleep(0.05)
        assert halts == [] and srv.halt_reason is None
    finally:
        await srv.stop()  # the stop, whole this time (the listener closed)


async def test_G13_an_outbox_that_fails_drops_only_its_member_who_resumes(
        make_server: MakeServer, open_raw: OpenRaw) -> None:
    """A sender task that meets a bug drops its own connection (the hub sees a lost member, which
    resumes); the other members are not affected."""
    srv = await make_server(suspect_timeout=5.0)
    a, b = await open_raw(srv, "a"), await open_raw(srv, "b")
    a.auto_flush = b.auto_flush = True
    await a.join("g")
    install, _ = await asyncio.gather(b.join("g"), a.expect("view_install"))
    outbox = srv._outboxes[max(srv._outboxes)]  # b's (the newer connection)
    # where both of the outbox's writers (its task, and the flusher) hand bytes over
    transport = outbox._ws.transport
    real = transport.write

    def failing(*args: object, **kw: object) -> None:
        raise RuntimeError("injected")

    transport.write = failing  # type: ignore[method-assign]
    await a.send({"type": "publish", "req": "r", "group": "g", "id": "p1", "view": 2,
                  "payload": 1})
    assert (await a.expect("deliver"))["payload"] == 1  # a is unaffected
    await a.expect("published")
    transport.write = real  # type: ignore[method-assign]
    assert await b.close_code() == 1006  # dropped, no goodbye
    b2 = await open_raw(srv, "b", resume_session=b.session)
    await b2.send({"type": "join", "req": "rj", "group": "g", "resume": {
        "epoch": install["epoch"], "offset": install["offset"], "view": install["view"]}})
    assert (await b2.recv())["type"] == "view_resume"  # no view change: it resumes
    assert (await b2.expect("deliver"))["payload"] == 1  # and gets what it missed
    assert srv.hub.groups["g"].view.version == 2


async def test_frames_that_arrive_after_the_server_closed_their_connection_are_dropped(
        make_server: MakeServer, open_raw: OpenRaw) -> None:
    """Cluster review S2a: once the server decides to close a connection (its group moved to
    another node, a link gave up), what the client sent meanwhile must not be acted on: in
    cluster mode it would go to the group's new owner ahead of earlier frames still lost on
    the way to the old one, and the client sends its unanswered requests again after it
    resumes, in its own order (per-sender FIFO as sent)."""
    srv = await make_server()
    a = await open_raw(srv, "a")
    await a.join("g")
    conn = max(srv._outboxes)
    srv.close(conn, 4000, "the group moved to another node; reconnect", drain=True)
    await a.send({"type": "publish", "req": "r", "group": "g", "id": "p1", "view": 1,
                  "payload": 1})
    assert await a.close_code() == 4000
    assert srv.hub.groups["g"].topic.head == 0  # neither delivered nor stored
    assert not [f for f in a.seen if f["type"] in ("published", "deliver")]


async def test_a_group_frame_before_hello_is_refused_here_and_never_routed(
        make_server: MakeServer, open_raw: OpenRaw) -> None:
    """Cluster review S14: a socket that has not said hello must not make another node load
    (and fence: a log write) a group; its group frames are the hub's to refuse, not the
    placement's to route."""
    from notify.runtime.placement import LocalPlacement

    routed: list[str] = []

    class Recording(LocalPlacement):
        def route(self, conn: int, group: str, raw: str | bytes) -> bool:
            routed.append(group)
            return False

    srv = await make_server(placement=Recording())
    raw = await open_raw(srv)
    await raw.send({"type": "join", "req": "j", "group": "elsewhere"})
    err = await raw.expect("error")
    assert err["req"] == "j" and routed == []
    assert "elsewhere" not in srv.hub.groups


def test_a_timer_death_while_the_server_drains_makes_serve_exit_non_zero(
        tmp_path: Path) -> None:
    """`notify serve` on SIGTERM drains (`--drain-delay`); its timer dies meanwhile. That death
    halts the server (its deadlines are no longer kept), and `serve` must say so with its
    fail-stop exit code, not end as a clean stop (review of c716929: a halt during a stop
    exited 0)."""
    import os
    import signal

    from notify import cli

    def on_ready(server: NotifyServer) -> None:
        heartbeats = server._heartbeats

        class Breaking:  # what the timer calls on every turn, broken once the drain began
            def __getattr__(self, name: str) -> object:
                return getattr(heartbeats, name)

            def tick(self, now: float) -> None:
                if server.draining:
                    raise RuntimeError("injected: the timer breaks while the server drains")
                heartbeats.tick(now)

        server._heartbeats = Breaking()  # type: ignore[assignment]
        asyncio.get_running_loop().call_later(0.2, os.kill, os.getpid(), signal.SIGTERM)

    with pytest.raises(SystemExit) as exited:
        cli.main(["serve", "--port", "0", "--data-dir", str(tmp_path), "--store", "memory",
                  "--drain-delay", "0.5"], on_ready=on_ready)
    assert exited.value.code == cli.EXIT_HALTED
