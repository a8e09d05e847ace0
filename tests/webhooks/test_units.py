"""The webhooks' pure parts and the crash window, without a server: the view diff
(notify/webhooks/events.py), the backoff (backoff.py), the outbox's caps (outbox.py), and the
catch-up from the log of writes stored just before a crash (source.py)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from notify.core.actions import Append, Message, StoreView, ViewInstall
from notify.server.app import NotifyServer
from notify.storage.memory import MemoryLog
from notify.webhooks import service
from notify.webhooks.backoff import delay
from notify.webhooks.config import WebhookSettings, parse_flag
from notify.webhooks.events import event_id, previous_members, view_events
from notify.webhooks.outbox import Outbox
from notify.webhooks.source import Source
from tests.webhooks.conftest import SECRET

EVERYTHING = ["member.arrived", "member.left", "user.arrived", "user.left", "group.occupied",
              "group.vacated", "message"]


def install(view: int, members: tuple[str, ...], joined: tuple[str, ...] = (),
            left: tuple[str, ...] = (), offset: int = 0) -> ViewInstall:
    return ViewInstall("g", view, members, joined, left, 7, offset)


def kinds(events: list) -> list[tuple[str, str | None]]:  # type: ignore[type-arg]
    return [(e.type, e.data.get("member") or e.data.get("user")) for e in events]


# -- the view diff -------------------------------------------------------------------------------

def test_first_arrival_occupies() -> None:
    assert kinds(view_events(install(1, ("u#1",), joined=("u#1",)), 0.0)) == [
        ("group.occupied", None), ("member.arrived", "u#1"), ("user.arrived", "u")]


def test_second_instance_is_no_user_event() -> None:
    i = install(2, ("u#1", "u#2"), joined=("u#2",))
    assert previous_members(i) == ("u#1",)
    assert kinds(view_events(i, 0.0)) == [("member.arrived", "u#2")]


def test_last_instance_out_leaves_the_user_and_vacates() -> None:
    assert kinds(view_events(install(3, ("v",), left=("u#1",)), 0.0)) == [
        ("member.left", "u#1"), ("user.left", "u")]
    assert kinds(view_events(install(4, (), left=("v",)), 0.0)) == [
        ("member.left", "v"), ("user.left", "v"), ("group.vacated", None)]


def test_a_new_incarnation_leaves_and_arrives() -> None:
    i = install(5, ("u#1",), joined=("u#1",), left=("u#1",))
    assert previous_members(i) == ("u#1",)
    assert kinds(view_events(i, 0.0)) == [("member.left", "u#1"), ("member.arrived", "u#1")]


def test_a_gap_is_a_set_diff_and_says_so() -> None:
    events = view_events(install(9, ("b#1", "c")), 0.0, previous=("a", "b#2"))
    assert kinds(events) == [("member.left", "a"), ("member.left", "b#2"), ("user.left", "a"),
                             ("member.arrived", "b#1"), ("member.arrived", "c"),
                             ("user.arrived", "c")]
    assert all(e.data["collapsed"] for e in events)


def test_ids_are_stable_and_distinct() -> None:
    a = view_events(install(1, ("u",), joined=("u",)), 1.0)
    b = view_events(install(1, ("u",), joined=("u",)), 2.0)  # derived again, later
    assert [e.id for e in a] == [e.id for e in b]
    assert len({e.id for e in a}) == len(a)
    assert event_id("g", 7, 1, "x", "") != event_id("g", 8, 1, "x", "")


# -- the backoff ---------------------------------------------------------------------------------

def test_backoff_doubles_to_its_cap() -> None:
    no_jitter = [delay(n, 0.5, 10.0, rand=lambda: 0.0) for n in range(1, 8)]
    assert no_jitter == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert delay(10_000, 0.5, 10.0, rand=lambda: 0.0) == 10.0  # no overflow
    assert delay(3, 0.5, 10.0, jitter=0.2, rand=lambda: 0.999) == pytest.approx(1.6, rel=1e-3)
    with pytest.raises(ValueError):
        delay(0, 0.5, 10.0)


# -- config --------------------------------------------------------------------------------------

def test_flag_splits_at_the_secret() -> None:
    assert parse_flag(f"http://h/x?a=b={SECRET}") == {"url": "http://h/x?a=b", "secret": SECRET}
    with pytest.raises(ValueError):
        parse_flag("http://h/x=notasecret")
    with pytest.raises(ValueError):
        WebhookSettings(url="http://h", secret="whsec_c2hvcnQ=")  # type: ignore[arg-type]


# -- the outbox's caps ---------------------------------------------------------------------------

def test_backlog_cap_drops_the_oldest() -> None:
    box = Outbox(":memory:", {"e": (3, 1 << 30)})
    events = [view_events(install(v, ("u",), joined=("u",)), 0.0)[0] for v in range(1, 6)]
    box.add([("e", e) for e in events], [], {}, 0.0)
    rows = box.peek("e", 10)
    assert [r.id for r in rows] == [e.id for e in events[2:]]
    assert box.count["e"] == 3 and box.dropped["e"] == 2
    assert box.dropped_through["e"] == rows[0].seq - 1
    box.delete("e", rows[0].seq)
    assert box.count["e"] == 2


# -- the crash window: stored in the log, not yet in the outbox ----------------------------------

def test_catch_up_derives_what_a_crash_left_out() -> None:
    store = MemoryLog()
    seq = itertools.count(1)

    def view(v: int, members: tuple[str, ...], joined: tuple[str, ...] = (),
             left: tuple[str, ...] = (), offset: int = 0) -> None:
        store.write(StoreView(next(seq), ViewInstall("chat:1", v, members, joined, left, 7,
                                                     offset)), lambda e: None)

    def messages(*offsets: int) -> None:
        store.write(Append("chat:1", next(seq), tuple(
            Message("chat:1", o, "a", o, "a", 1, False, {"n": o}, float(o), f"p{o}")
            for o in offsets)), lambda e: None)

    hook = WebhookSettings(url="http://h", secret=SECRET, events=EVERYTHING,  # type: ignore[arg-type]
                           groups=["chat:*"])
    source = Source([hook])
    box = Outbox(":memory:", {hook.key: (100, 1 << 30)})
    assert source.catch_up(store, box, 0.0, lambda _: None) == 0  # the baseline: empty log
    # live: view 1 and message 1 reached the outbox ...
    view(1, ("a",), joined=("a",))
    messages(1)
    for w in (StoreView(0, ViewInstall("chat:1", 1, ("a",), ("a",), (), 7, 0)),
              Append("chat:1", 0, (Message("chat:1", 1, "a", 1, "a", 1, False, {"n": 1}, 1.0,
                                           "p1"),))):
        b = source.of_write(w, 0.0)
        assert b is not None
        box.add(b.rows, list(b.cursors.values()), b.offsets, 0.0)
    live = [r.id for r in box.peek(hook.key, 100)]
    # ... then messages 2-3 and views 2-3 were stored, and the process died before the outbox
    messages(2, 3)
    view(2, ("a", "b"), joined=("b",), offset=3)
    view(3, ("b",), left=("a",), offset=3)
    got: list[list[str]] = []
    assert source.catch_up(store, box, 5.0, got.append) == 2 + 2 + 2
    rows = box.peek(hook.key, 100)
    assert [r.id for r in rows[:len(live)]] == live
    assert [r.type for r in rows[len(live):]] == [
        "message", "message", "member.arrived", "user.arrived", "member.left", "user.left"]
    # and a second start finds nothing more to derive
    assert source.catch_up(store, box, 6.0, got.append) == 0


# -- falling behind: the outbox does not keep up --------------------------------------------------

@pytest.mark.parametrize("read_back_fails", [False, True])
async def test_an_overflow_delays_events_and_loses_none(monkeypatch: pytest.MonkeyPatch,
                                                        read_back_fails: bool) -> None:
    """More events than `MAX_PENDING` arrive in one turn of the loop: the service sets the rest
    aside, and once the outbox has what it held, reads them back from the log. Every event of
    every stored write ends up in the outbox, once (without the read-back, most are lost).
    `read_back_fails`: the first read-back raises (the writer dies and is restarted), after
    the hook took a write again: the next read-back still derives what was set aside."""
    monkeypatch.setattr(service, "MAX_PENDING", 4)
    monkeypatch.setattr(service, "RESTART_DELAY", 0.05)
    server = NotifyServer()
    hook = WebhookSettings(url="http://127.0.0.1:9", secret=SECRET, events=EVERYTHING,  # type: ignore[arg-type]
                           groups=["*"], backoff=60.0, backoff_max=60.0)
    hooks = service.Webhooks(server, [hook], ":memory:")
    await hooks.start()
    if read_back_fails:
        real_catch_up = hooks.source.catch_up
        late = StoreView(11, ViewInstall("g", 11, ("m11",), ("m11",), ("m10",), 7, 0))

        def catch_up(*args: object) -> int:  # (in the writer's thread)
            monkeypatch.setattr(hooks.source, "catch_up", real_catch_up)
            asyncio.run_coroutine_threadsafe(store_late(), loop).result()
            raise OSError("the read-back fails once")

        async def store_late() -> None:  # a write stored while the read-back runs
            server.store.write(late, lambda e: None)
            hooks._stored(late)

        loop = asyncio.get_running_loop()
        monkeypatch.setattr(hooks.source, "catch_up", catch_up)
    try:
        writes = [StoreView(v, ViewInstall("g", v, (f"m{v}",), (f"m{v}",),
                                           (f"m{v - 1}",) if v > 1 else (), 7, 0))
                  for v in range(1, 11)]
        expected: set[str] = set()
        for w in writes:  # one turn of the loop: the writer cannot run in between
            server.store.write(w, lambda e: None)
            hooks._stored(w)
            batch = Source([hook]).of_write(w, 0.0)
            assert batch is not None
            expected |= {e.id for _, e in batch.rows}
        assert hooks.overflowed  # it fell behind
        if read_back_fails:
            batch = Source([hook]).of_write(late, 0.0)
            assert batch is not None
            expected |= {e.id for _, e in batch.rows}

        async def all_in() -> None:
            while True:
                assert hooks.outbox is not None
                got = {r.id for r in await asyncio.to_thread(hooks.outbox.peek, hook.key, 1000)}
                if got >= expected:
                    return
                await asyncio.sleep(0.05)

        await asyncio.wait_for(all_in(), 10)
        assert hooks.outbox is not None
        assert hooks.outbox.count[hook.key] == len(expected)  # none twice
        assert not hooks._behind
    finally:
        await hooks.stop()
