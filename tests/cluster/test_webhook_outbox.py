"""The webhooks' outbox on JetStream (notify/webhooks/jsoutbox.py) against a real 3-node NATS
cluster: rows and the cursor they advance are stored together or not at all; what one node
stored, another node reads (the rows in order, with their ids, the cursor); a delivered row
leaves for every node; a shard's baseline; the row cap; a message's cursor moves only the
offset of the group's stored cursor."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import pytest

pytest.importorskip("nats", reason="the cluster extra (nats-py) is not installed")

from notify.cluster.shards import shard_of
from notify.core.actions import Append, StoreView, ViewInstall, Write
from notify.core.actions import Message as Accepted
from notify.storage.jetstream import JetStreamLog
from notify.webhooks.config import MEMBERSHIP, WebhookSettings
from notify.webhooks.events import Event, event_id
from notify.webhooks.jsoutbox import JetStreamOutbox
from notify.webhooks.outbox import Cursor
from notify.webhooks.source import Part, Source
from tests.cluster.conftest import NatsCluster
from tests.webhooks.conftest import SECRET

pytestmark = pytest.mark.timeout(90)

_tickets = itertools.count(1)
CAPS = {"hook": (1000, 1 << 20), "small": (3, 1 << 20)}


def event(n: int, group: str = "g:1") -> Event:
    return Event(eid(n, group), "member.arrived", group, 1.0 + n,
                 {"group": group, "view": n, "member": f"m{n}#i"})


def eid(n: int, group: str = "g:1") -> str:
    return event_id(group, n)


@pytest.fixture
def outboxes(nats_cluster: NatsCluster) -> Iterator[tuple[JetStreamOutbox, JetStreamOutbox]]:
    """Two outboxes on one stream: two nodes."""
    a = JetStreamOutbox(nats_cluster.urls, CAPS, stream="T_WEBHOOKS", replicas=3)
    try:
        b = JetStreamOutbox(nats_cluster.urls, CAPS, stream="T_WEBHOOKS", replicas=3)
        try:
            yield a, b
        finally:
            b.close()
    finally:
        a.close()


def test_rows_and_their_cursor_are_shared_by_every_node(
        outboxes: tuple[JetStreamOutbox, JetStreamOutbox]) -> None:
    a, b = outboxes
    c1 = Cursor("g:1", 0, 1, 0, ("m1#i",))
    assert a.add([("hook", event(1))], [c1], {}, 0.0) == ["hook"]
    c2 = Cursor("g:1", 0, 2, 0, ("m1#i", "m2#i"))
    a.add([("hook", event(2)), ("hook", event(1, "g.2 é"))],
          [c2, Cursor("g.2 é", 0, 1, 0, ("m1#i",))], {}, 0.0)
    rows = b.peek("hook", 10)
    assert [(r.id, r.type) for r in rows] == [
        (eid(1), "member.arrived"), (eid(2), "member.arrived"),
        (eid(1, "g.2 é"), "member.arrived")]
    assert rows[0].body == event(1).body()
    assert b.cursors(["g:1", "g.2 é", "none"]) == {
        "g:1": c2, "g.2 é": Cursor("g.2 é", 0, 1, 0, ("m1#i",))}
    assert set(b.cursors()) == {"g:1", "g.2 é"}
    # a delivered row leaves for every node; deleting it twice is no error
    b.delete("hook", rows[0].seq)
    a.delete("hook", rows[0].seq)
    assert [r.id for r in a.peek("hook", 10)] == [eid(2), eid(1, "g.2 é")]
    assert [r.id for r in a.peek("hook", 1)] == [eid(2)]
    # one cursor record per group is kept (rollup)
    info = a._call(a._subject_counts("nwh.c.*"), 5)
    assert sorted(info.values()) == [1, 1]


def test_a_refused_batch_stores_neither_rows_nor_cursor(
        outboxes: tuple[JetStreamOutbox, JetStreamOutbox],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows and the cursor are one atomic batch: a batch JetStream refuses (here, a cursor
    record made to fail its own check) leaves nothing, not the rows alone."""
    a, b = outboxes
    a.add([("hook", event(1))], [Cursor("g:1", 0, 1, 0, ("m1#i",))], {}, 0.0)
    real = a._cursor_record

    def failing(c: Cursor) -> tuple[str, bytes, dict[str, str]]:
        subject, body, headers = real(c)
        return subject, body, {**headers, "Nats-Expected-Last-Subject-Sequence": "999999"}

    monkeypatch.setattr(a, "_cursor_record", failing)
    with pytest.raises(RuntimeError, match="refused"):
        a.add([("hook", event(2)), ("hook", event(3))], [Cursor("g:1", 0, 3, 0, ())], {}, 0.0)
    assert [r.id for r in b.peek("hook", 10)] == [eid(1)]
    assert b.cursors(["g:1"])["g:1"].view == 1


def test_a_split_write_stores_the_rows_before_their_cursor(
        outboxes: tuple[JetStreamOutbox, JetStreamOutbox],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """More records than one batch: the rows go first, the cursor in the last batch, so a
    failure between them leaves rows without their cursor (sent again), never the reverse."""
    a, b = outboxes
    a.max_batch = 4
    batches: list[list[str]] = []
    sent: list[list[tuple[str, bytes, dict[str, str]]]] = []
    real = a._batch

    async def recorded(records: list[tuple[str, bytes, dict[str, str]]]) -> None:
        subjects = [s for s, _, _ in records]
        if not sent or records != sent[-1]:  # (not a resend: no responders)
            batches.append(subjects)
            sent.append(records)
        if any(s.startswith("nwh.c.") for s in subjects):
            raise RuntimeError("refused (injected)")
        await real(records)

    monkeypatch.setattr(a, "_batch", recorded)
    with pytest.raises(RuntimeError):
        a.add([("hook", event(n)) for n in range(1, 10)], [Cursor("g:1", 0, 9, 0, ())], {}, 0.0)
    assert [len(x) for x in batches] == [4, 4, 2]
    assert batches[-1] == ["nwh.e.hook", "nwh.c.g_3A1"]  # the cursor after every row
    assert len(b.peek("hook", 20)) == 8
    assert b.cursors(["g:1"]) == {}


def test_baseline_per_shard(outboxes: tuple[JetStreamOutbox, JetStreamOutbox]) -> None:
    a, b = outboxes
    assert not a.baselined(7)
    a.set_baseline([Cursor("g:1", 0, 4, 10, ("x#1",))], 7)
    assert b.baselined(7) and not b.baselined(8)
    assert b.cursors(["g:1"])["g:1"] == Cursor("g:1", 0, 4, 10, ("x#1",))


def test_a_message_cursor_moves_the_stored_cursors_offset_only(
        outboxes: tuple[JetStreamOutbox, JetStreamOutbox]) -> None:
    a, b = outboxes
    a.add([], [Cursor("g:1", 2, 5, 7, ("x#1",))], {}, 0.0)
    b.add([("hook", event(1))], [], {"g:1": 12, "fresh": 3}, 0.0)  # b never read it
    assert a.cursors(["g:1", "fresh"]) == {"g:1": Cursor("g:1", 2, 5, 12, ("x#1",)),
                                           "fresh": Cursor("fresh", 0, 0, 3, ())}
    b.add([], [], {"g:1": 9}, 0.0)  # never backwards
    assert a.cursors(["g:1"])["g:1"].offset == 12


def test_the_row_cap_drops_the_oldest(outboxes: tuple[JetStreamOutbox, JetStreamOutbox]) -> None:
    a, b = outboxes
    a.add([("small", event(n)) for n in range(1, 6)], [], {}, 0.0)
    assert [r.id for r in b.peek("small", 10)] == [eid(n) for n in (3, 4, 5)]
    assert a.dropped["small"] == 2 and a.count["small"] == 3
    assert a.dropped_through["small"] == b.peek("small", 1)[0].seq - 1
    assert b.forget_except({"hook"}) == {"small": 3}
    assert a.peek("small", 10) == []


async def test_a_new_owner_derives_what_the_dead_one_stored_and_never_wrote(
        nats_cluster: NatsCluster) -> None:
    """The takeover path, with the real log and outbox on JetStream: owner A derives the events
    of its first writes into the outbox (its hook), then stores more writes and dies before
    their events are written. B's catch-up of the shard (`Source.catch_up` for a `Part`)
    derives exactly those, after A's rows, with the ids A would have given them, and leaves the
    cursor at the head; a group of a shard B did not acquire gets nothing from B (a node that
    does not own a group never derives its events)."""
    hook = WebhookSettings.model_validate({"url": "http://127.0.0.1:9/hook", "secret": SECRET,
                                           "events": [*MEMBERSHIP, "message"]})
    key = hook.key
    g = "chat:1"
    other = next(f"chat:{i}" for i in range(2, 1000) if shard_of(f"chat:{i}") != shard_of(g))
    both = Part(shard_of, frozenset({shard_of(g), shard_of(other)}))

    def writes(group: str) -> tuple[list[Write], list[Write]]:
        """(what A's hook wrote to the outbox, what A stored and died before writing)."""
        m = [Accepted(group, o, "fifo:a#1", o, "a#1", 1, False, {"n": o}, 1000.0 + o, f"p{o}")
             for o in (1, 2)]
        return ([StoreView(next(_tickets), ViewInstall(group, 1, ("a#1",), ("a#1",), (), 5, 0),
                           ()),
                 Append(group, next(_tickets), (m[0],))],
                [StoreView(next(_tickets), ViewInstall(group, 2, ("a#1", "b#2"), ("b#2",), (),
                                                       5, 1), ()),
                 Append(group, next(_tickets), (m[1],)),
                 StoreView(next(_tickets), ViewInstall(group, 3, ("b#2",), (), ("a#1",), 5, 2),
                           ())])

    def ids(source: Source, ws: list[Write]) -> list[str]:
        out: list[str] = []
        for w in ws:
            b = source.of_write(w, 0.0)
            out += [e.id for _, e in b.rows] if b is not None else []
        return out

    log_a = await asyncio.to_thread(JetStreamLog, nats_cluster.urls, stream="WT")
    log_b = await asyncio.to_thread(JetStreamLog, nats_cluster.urls, stream="WT")
    box_a = await asyncio.to_thread(JetStreamOutbox, nats_cluster.urls, {}, stream="WT_WEBHOOKS")
    box_b = await asyncio.to_thread(JetStreamOutbox, nats_cluster.urls, {}, stream="WT_WEBHOOKS")
    try:
        a, b = Source([hook]), Source([hook])
        assert await asyncio.to_thread(a.catch_up, log_a, box_a, 0.0, _none, both) == 0
        assert box_a.baselined(shard_of(g)) and box_a.baselined(shard_of(other))
        live, lost = {}, {}
        for group in (g, other):
            live[group], lost[group] = writes(group)
            for w in live[group]:  # stored, then hooked: written to the outbox
                assert await asyncio.wait_for(_write(log_a, w), 10) is None
                batch = a.of_write(w, 0.0)
                assert batch is not None
                await asyncio.to_thread(box_a.add, batch.rows, list(batch.cursors.values()),
                                        batch.offsets, 0.0)
            for w in lost[group]:  # stored; A dies before its writer takes them
                assert await asyncio.wait_for(_write(log_a, w), 10) is None
        written = ids(a, live[g]) + ids(a, live[other])
        assert [r.id for r in await asyncio.to_thread(box_b.peek, key, 100)] == written

        mine = Part(shard_of, frozenset({shard_of(g)}))  # B acquires g's shard only
        derived = await asyncio.to_thread(b.catch_up, log_b, box_b, 0.0, _none, mine)
        missing = ids(a, lost[g])
        assert derived == len(missing) > 0
        assert [r.id for r in await asyncio.to_thread(box_b.peek, key, 100)] == \
            written + missing
        assert box_b.cursors([g])[g] == Cursor(g, 5, 3, 2, ("b#2",))
        # caught up: once more derives nothing
        assert await asyncio.to_thread(b.catch_up, log_b, box_b, 0.0, _none, mine) == 0
    finally:
        for box in (box_a, box_b):
            await asyncio.to_thread(box.close)
        for log in (log_a, log_b):
            await log.close()


def _none(_: list[str]) -> None:
    pass


def _write(log: JetStreamLog, w: Write) -> asyncio.Future[str | None]:
    fut: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
    log.write(w, fut.set_result)
    return fut
