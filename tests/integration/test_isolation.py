"""G11 isolation over real sockets: a member that stops reading fills only its own queue, is cut
as a slow consumer (close 4001) and can resume from its offsets; a sender waiting on atomic ACKs
that a stalled member never sends does not hold up other senders' FIFO streams."""

from __future__ import annotations

import asyncio
from typing import Any

from client_sdk import Message, ViewInstalled
from notify.core.config import Limits
from notify.core.errors import CloseCode
from tests.integration.conftest import (
    TIMEOUT,
    Connect,
    OpenRaw,
    events_until,
    messages,
    pending_events,
    small_rcvbuf_socket,
)

PAD = "x" * 4096


async def test_G11_slow_consumer_cut_with_4001_fast_member_unaffected_and_slow_resumes(
        make_server, connect_client: Connect, open_raw: OpenRaw) -> None:
    # A long suspect_timeout keeps the slow member in the view while it is away; a small
    # outbound bound makes the cut come after a few hundred KiB instead of megabytes.
    server = await make_server(suspect_timeout=30.0, flush_timeout=5.0,
                               limits=Limits(max_outbound_frames=500))
    s = await connect_client(server, "s")
    f = await connect_client(server, "f")
    await s.join("g")
    await f.join("g")
    # The slow member: a small socket receive buffer, and a client-side queue of one message,
    # so that when the test stops reading from it TCP backs up to the server at once.
    w = await open_raw(server, "w", sock=small_rcvbuf_socket(server), max_queue=1)
    install = await w.join("g")
    for c in (s, f):
        await events_until(c, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 3)

    # w reads nothing from here on. Publish until the server gives up on it (bounded).
    sent = 0
    while server.stats.slow_consumers == 0 and sent < 20_000:
        await asyncio.wait_for(asyncio.gather(
            *(s.publish("g", {"i": sent + k, "pad": PAD}) for k in range(50))), TIMEOUT)
        sent += 50
    assert server.stats.slow_consumers == 1, f"no slow consumer after {sent} messages"
    for k in range(20):  # and a few more after the cut
        await s.publish("g", {"i": sent + k, "pad": PAD})
    sent += 20

    # The fast member gets every message, in order, while w is still not reading.
    got = await messages(f, "g", sent, timeout=3 * TIMEOUT)
    assert [m.payload["i"] for m in got] == list(range(sent))
    assert [m.seq for m in got] == list(range(1, sent + 1))
    await messages(s, "g", sent, timeout=3 * TIMEOUT)

    # w reads again: what was already on its way, then the close with the slow-consumer code.
    code = await w.close_code(timeout=3 * TIMEOUT)
    assert code == CloseCode.SLOW_CONSUMER
    seqs = [x["seq"] for x in w.seen if x["type"] == "deliver"]
    assert seqs == list(range(1, len(seqs) + 1))  # a prefix of the stream, nothing skipped
    assert len(seqs) < sent

    # It resumes its session from where it is, and gets exactly the rest, once, in order: the
    # newest MiB replayed from memory, what lies before it read from the log, page by page.
    w2 = await open_raw(server, "w", resume_session=w.session)
    await w2.send({"type": "join", "req": "rj", "group": "g", "resume": {
        "epoch": install["epoch"], "offset": install["offset"], "view": install["view"],
        "streams": {"fifo:s": len(seqs)} if seqs else {}}})
    first = await w2.recv()
    assert first["type"] == "view_resume" and first["view"] == 3, first
    done = await w2.expect("catchup_done", timeout=3 * TIMEOUT)
    replayed = [x for x in w2.seen if x["type"] == "deliver"]
    (gap,) = [x for x in w2.seen if x["type"] == "catchup_log"]
    assert gap["after"] == install["offset"] and gap["before"] == replayed[0]["offset"]
    history: list[dict[str, Any]] = []
    after = gap["after"]
    while after < gap["before"] - 1:
        await w2.send({"type": "history", "req": f"h{after}", "group": "g", "after": after,
                       "before": gap["before"]})
        page = await w2.expect("history_page")
        assert page["end"] > after and page["aborted"] == []
        # (the install at `after` comes with the first page: w has it, its SDK would skip it)
        assert all(i["view"] <= install["view"] for i in page["installs"])
        history += page["messages"]
        after = page["end"]
    rest = [x for x in history if x["seq"] > len(seqs)] + replayed
    assert [x["seq"] for x in rest] == list(range(len(seqs) + 1, sent + 1))
    assert [x["payload"]["i"] for x in rest] == list(range(len(seqs), sent))
    assert done["count"] == len(replayed)
    assert [x for x in w2.seen if x["type"] in ("view_install", "view_change", "error")] == []

    # The others never saw a view change, and the group goes on with w in it.
    await s.publish("g", {"i": "after"})
    d = await w2.expect("deliver")
    assert d["payload"] == {"i": "after"} and d["seq"] == sent + 1
    for c in (s, f):
        [m] = await messages(c, "g", 1)
        assert m.payload == {"i": "after"}
        assert pending_events(c, "g") == [] and c.errors == []
    assert server.hub.groups["g"].view.version == 3


async def test_G11_sender_blocked_on_atomic_acks_does_not_delay_other_fifo_senders(
        make_server, connect_client: Connect, open_raw: OpenRaw) -> None:
    # ack_timeout is long: the atomic message stays pending for the whole test.
    server = await make_server(suspect_timeout=0.3, flush_timeout=1.0, ack_timeout=120.0)
    a = await connect_client(server, "a")  # publishes an atomic message
    b = await connect_client(server, "b")  # publishes FIFO messages
    c = await connect_client(server, "c")  # receives
    for x in (a, b, c):
        await x.join("g")
    stalled = await open_raw(server, "stalled")  # gets the atomic message, never ACKs it
    await stalled.join("g")
    for x in (a, b, c):
        await events_until(x, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 4)

    res = await a.publish("g", "atomic", atomic=True)
    d = await stalled.expect("deliver")
    assert d["offset"] == res.offset

    n = 100
    for i in range(n):
        await b.publish("g", i)
    for x in (a, c):  # a is itself waiting on that atomic message's outcome
        got = await messages(x, "g", n)
        assert [(m.sender, m.payload) for m in got] == [("b", i) for i in range(n)]
    got_b = await messages(b, "g", n)
    assert [m.payload for m in got_b] == list(range(n))
    # All of that happened while the atomic message was still waiting for `stalled`.
    assert not a._outcomes[res.id].done()
    assert server.hub.groups["g"].atomics.is_waiting_for("stalled", res.offset)
    for x in (a, b, c):
        assert x.protocol.groups["g"].atomic == {res.offset: None}  # held back, not delivered
        assert pending_events(x, "g") == [] and x.errors == []
    assert isinstance(got[0], Message)


async def test_G14_the_slow_consumer_bound_counts_bytes_too(
        make_server, connect_client: Connect, open_raw: OpenRaw) -> None:
    """A handful of large frames is as heavy as many small ones: the byte bound cuts a member
    that stopped reading long before the frame-count bound would."""
    server = await make_server(suspect_timeout=30.0, limits=Limits(
        max_outbound_frames=1_000_000, max_outbound_bytes=256 * 1024))
    s = await connect_client(server, "s")
    await s.join("g")
    w = await open_raw(server, "w", sock=small_rcvbuf_socket(server), max_queue=1)
    await w.join("g")
    await events_until(s, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 2)
    big = "y" * 60_000
    sent = 0
    while server.stats.slow_consumers == 0 and sent < 400:
        await s.publish("g", {"i": sent, "pad": big})
        sent += 1
    assert server.stats.slow_consumers == 1
    assert sent < 200  # about 256 KiB plus the kernel buffers, far from a million frames
    assert await w.close_code(timeout=3 * TIMEOUT) == CloseCode.SLOW_CONSUMER


async def test_G11_a_slow_consumer_is_suspected_at_once_not_when_its_socket_closes(
        make_server, connect_client: Connect, open_raw: OpenRaw) -> None:
    """The 4001 close frame cannot pass a reader's full buffers until it reads again, but the
    member is SUSPECT from the cut: it is removed after suspect_timeout like any lost member,
    not after the heartbeat gives up on its socket."""
    server = await make_server(suspect_timeout=0.3, flush_timeout=1.0, limits=Limits(
        max_outbound_frames=200))
    s = await connect_client(server, "s")
    await s.join("g")
    w = await open_raw(server, "w", sock=small_rcvbuf_socket(server), max_queue=1)
    await w.join("g")
    await events_until(s, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 2)
    sent = 0
    while server.stats.slow_consumers == 0 and sent < 20_000:
        await asyncio.wait_for(asyncio.gather(
            *(s.publish("g", {"i": sent + k, "pad": PAD}) for k in range(50))), TIMEOUT)
        sent += 50
    assert server.stats.slow_consumers == 1
    removed = await events_until(s, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 3,
                                 timeout=3.0)  # far below the 15 s heartbeat timeout
    assert removed[-1].members == ("s",)
