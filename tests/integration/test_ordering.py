"""G3 (per-sender FIFO) and G4 (total order) over real sockets, with concurrent senders."""

from __future__ import annotations

import asyncio

from client_sdk import Connection, Message, ViewInstalled
from tests.integration.conftest import TIMEOUT, Connect, messages


async def _members(server, connect_client: Connect, names: list[str]) -> list[Connection]:
    clients = [await connect_client(server, n) for n in names]
    for c in clients:
        await c.join("g")
    # Drain the join-time view events so each queue holds only what the test sends.
    last = clients[-1].protocol.groups["g"].view
    for c in clients:
        while True:
            e = await c.next_event("g", TIMEOUT)
            if isinstance(e, ViewInstalled) and e.view == last:
                break
    return clients


async def _publish_all(sender: Connection, n: int, order: str) -> None:
    for i in range(n):
        await sender.publish("g", {"from": sender.member, "i": i}, order=order)


async def test_G3_fifo_each_senders_stream_in_send_order(server, connect_client: Connect) -> None:
    n = 150
    senders = await _members(server, connect_client, ["s1", "s2", "s3", "obs"])
    publishers = senders[:3]
    await asyncio.wait_for(
        asyncio.gather(*(_publish_all(s, n, "fifo") for s in publishers)), 3 * TIMEOUT)
    for receiver in senders:  # the senders deliver their own messages too
        got = await messages(receiver, "g", n * len(publishers))
        for s in publishers:
            mine = [m for m in got if m.sender == s.member]
            assert {m.stream for m in mine} == {f"fifo:{s.member}"}
            assert [m.payload["i"] for m in mine] == list(range(n)), (receiver.member, s.member)
            assert [m.seq for m in mine] == list(range(1, n + 1)), (receiver.member, s.member)
            offsets = [m.offset for m in mine]
            assert offsets == sorted(offsets)
        # Nothing twice: the SDK would drop a duplicate silently, so check it counted none.
        assert len({m.offset for m in got}) == len(got)
        assert receiver.protocol.groups["g"].duplicates == 0
        assert receiver.errors == []


async def test_G4_total_order_identical_sequence_at_every_member(
        server, connect_client: Connect) -> None:
    n = 60
    clients = await _members(server, connect_client, ["t1", "t2", "t3", "obs"])
    publishers = clients[:3]
    await asyncio.wait_for(
        asyncio.gather(*(_publish_all(s, n, "total") for s in publishers)), 3 * TIMEOUT)
    sequences: dict[str, list[tuple[int, str, int]]] = {}
    for c in clients:
        got: list[Message] = await messages(c, "g", n * len(publishers))
        assert {m.stream for m in got} == {"total"}
        assert [m.seq for m in got] == list(range(1, n * len(publishers) + 1)), c.member
        sequences[c.member] = [(m.offset, m.sender, m.payload["i"]) for m in got]
        assert c.protocol.groups["g"].duplicates == 0
        assert c.errors == []
    ref = sequences["obs"]
    for member, seq in sequences.items():
        assert seq == ref, f"{member} delivered the total stream in another order"
    # Every publish is in it exactly once, and each sender's in the order it sent them.
    assert sorted((s, i) for _, s, i in ref) == sorted(
        (p.member, i) for p in publishers for i in range(n))
    for p in publishers:
        assert [i for _, s, i in ref if s == p.member] == list(range(n))


async def test_G3_retried_publish_id_is_delivered_once(server, connect_client: Connect) -> None:
    a, b = await _members(server, connect_client, ["a", "b"])
    first = await a.publish("g", "once", publish_id="retry-me")
    again = await a.publish("g", "once", publish_id="retry-me")  # e.g. after a lost reply
    assert again.offset == first.offset
    await a.publish("g", "next")
    for c in (a, b):
        got = await messages(c, "g", 2)
        assert [(m.payload, m.seq) for m in got] == [("once", 1), ("next", 2)]
        assert c.protocol.groups["g"].duplicates == 0 and c.errors == []
