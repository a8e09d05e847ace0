"""The bytes and bookkeeping between cluster nodes (notify/cluster/linkwire.py, links.py):
batches decode to what was encoded, an edge batch is applied once per edge incarnation, and an
edge notices a lost owner batch, also the last one of a burst (the owner's beats)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from notify.cluster.links import (
    BEAT_AFTER,
    BEAT_COUNT,
    DownlinkBeats,
    DownlinkGaps,
    Downlinks,
    UplinkDedup,
)
from notify.cluster.linkwire import (
    CLOSE,
    CLOSED,
    DATA,
    FRAME,
    OPEN,
    PIECE,
    LinkError,
    Pieces,
    decode_down,
    decode_up,
    down_entries,
    encode_down,
    encode_up,
    identity_json,
    identity_of,
    up_entries,
)
from notify.core.auth import Grants, Identity


def test_edge_batches_round_trip() -> None:
    entries = [(7, OPEN, b'{"member":"a"}'), (7, FRAME, b'{"type":"join","group":"g"}'),
               (9, FRAME, b""), (2**40, FRAME, "é".encode() * 1000)]
    header, back = decode_up(encode_up({"edge": "n1", "inc": "x", "seq": 3}, entries))
    assert header == {"edge": "n1", "inc": "x", "seq": 3}
    assert back == entries


def test_owner_batches_round_trip() -> None:
    entries = [(DATA, [1, 2, 3], b'{"type":"deliver"}'), (CLOSE, [4], b'{"code":4003}'),
               (DATA, [], b"")]
    header, back = decode_down(encode_down({"node": "n2", "inc": "y", "seq": 1}, entries))
    assert header["node"] == "n2" and back == entries


@pytest.mark.parametrize("payload", [b"", b"no header", b"[1]\n", b'{"a":1}\n\x01\x02'])
def test_a_batch_that_does_not_decode_is_an_error(payload: bytes) -> None:
    with pytest.raises(LinkError):
        decode_up(payload)
    with pytest.raises(LinkError):
        decode_down(payload)


def test_identity_crosses_whole() -> None:
    identity = Identity("alice", Grants.parse({"doc-*": ["join", "publish"], "x": ["*"]}), 99.5)
    assert identity_of(identity_json(identity)) == identity
    assert identity_of(identity_json(None)) is None


def test_an_edge_batch_is_applied_once_per_incarnation() -> None:
    dedup = UplinkDedup()
    assert dedup.fresh("n1", "a", 1) and dedup.fresh("n1", "a", 2)
    assert not dedup.fresh("n1", "a", 2)  # a retry of a batch already applied
    assert not dedup.fresh("n1", "a", 1)
    assert dedup.fresh("n1", "b", 1)  # the edge restarted: a new link
    assert dedup.fresh("n1", "a", 1)  # (the old incarnation's entry was dropped with it)
    dedup.forget("n1")
    assert dedup.fresh("n1", "a", 1)


def test_an_edge_sees_a_lost_owner_batch() -> None:
    gaps = DownlinkGaps()
    assert gaps.check("n2", "i1", 1)  # a link starts at 1 (per incarnation of both ends)
    assert gaps.check("n2", "i1", 2)
    assert not gaps.check("n2", "i1", 4)  # 3 was lost
    assert gaps.check("n2", "i1", 5)
    assert gaps.check("n2", "i2", 1)  # the owner restarted
    assert not gaps.check("n3", "i9", 2)  # the first batch from n3 was lost (sim seed 230)
    assert gaps.check("n3", "i9", 3)


def test_beats_follow_a_burst_at_doubling_intervals_then_stop() -> None:
    beats = DownlinkBeats(after=0.25, count=4)
    assert beats.next_deadline() is None and beats.due(100.0) == []  # idle: nothing
    beats.sent("e1", 1, 0.0)
    beats.sent("e1", 2, 0.1)  # a batch restarts the wait
    assert beats.due(0.3) == [] and beats.next_deadline() == 0.35
    times = []
    now = 0.0
    while beats.next_deadline() is not None:
        now = beats.next_deadline() or now
        assert beats.due(now) == [("e1", 2)]
        times.append(round(now - 0.1, 6))
    assert times == [0.25, 0.75, 1.75, 3.75]
    assert len(beats) == 0 and beats.due(1000.0) == []  # the table empties by itself
    beats.sent("e2", 7, 0.0)
    beats.forget("e2")
    assert len(beats) == 0


def test_an_edge_hears_a_beat_for_what_it_has() -> None:
    gaps = DownlinkGaps()
    assert not gaps.beat("n2", "i1", 3)  # never heard of n2, which sent 3 batches: lost
    assert gaps.check("n2", "i1", 4)
    assert gaps.beat("n2", "i1", 4) and gaps.beat("n2", "i1", 4)
    assert gaps.beat("n2", "i1", 3)  # an old beat: nothing lost
    assert not gaps.beat("n2", "i1", 5)  # 5 never came
    assert gaps.beat("n2", "i1", 5)  # told once
    assert gaps.check("n2", "i1", 6)
    assert not gaps.beat("n2", "i2", 2)  # n2 restarted: its batches 1 and 2 never came


class _Nats:
    """Core NATS as the owner's downlinks see it; `lose` drops the publishes it names."""

    max_payload = 1 << 20

    def __init__(self) -> None:
        self.out: list[tuple[str, bytes]] = []
        self.lose: set[int] = set()
        self.published = 0

    async def publish(self, subject: str, payload: bytes) -> None:
        self.published += 1
        if self.published not in self.lose:
            self.out.append((subject, payload))


@pytest.mark.parametrize("lost", [{3}, {3, 4}], ids=["batch", "batch-and-first-beat"])
async def test_the_lost_tail_of_a_burst_is_noticed_within_the_bound(lost: set[int]) -> None:
    """Cluster review S1: the last batch of a burst is lost and nothing follows. The edge
    notices at the first beat, BEAT_AFTER + one tick after the batch (the clock is the
    test's), and, if that beat is lost too, at the next one."""
    clock = [0.0]
    nc = _Nats()
    nc.lose = lost
    down = Downlinks(nc, "notify", {"node": "own", "inc": "o1"},  # type: ignore[arg-type]
                     clock=lambda: clock[0])
    gaps = DownlinkGaps()
    noticed: list[float] = []

    async def deliver() -> None:
        await asyncio.sleep(0)  # the publish tasks run
        for subject, payload in nc.out:
            assert subject == "notify.out.edge"
            header, _entries = decode_down(payload)
            assert header["to"] == "e1"
            ok = (gaps.beat(header["node"], header["inc"], header["beat"])
                  if "beat" in header else
                  gaps.check(header["node"], header["inc"], header["seq"]))
            if not ok:
                noticed.append(clock[0])
        nc.out.clear()

    for k in range(3):  # a burst of three batches; the third is lost
        down.push("edge", "e1", 1, DATA, f"m{k}".encode())
        down.flush()
        await deliver()
    assert noticed == []
    tick = 0.25  # the node's tick (node.py TICK)
    while clock[0] < 10 and not noticed:  # quiet: only the node's tick runs
        clock[0] += tick
        down.beat(clock[0])
        await deliver()
    bound = BEAT_AFTER + tick if lost == {3} else BEAT_AFTER * 3 + tick
    assert noticed and noticed[0] <= bound, noticed
    while clock[0] < 10:  # then the link stays quiet: the beats stop, nothing more is seen
        clock[0] += tick
        down.beat(clock[0])
        await deliver()
    assert len(noticed) == 1 and down.beats == BEAT_COUNT


async def test_an_uplink_that_gives_up_keeps_the_closes_it_held() -> None:
    """Cluster review S8: giving up drops the frames of a batch the owner never answered
    (their clients resume), but not the `CLOSED` of a connection the edge already closed:
    lost, its member would stay connected at the owner for good, a zombie nobody suspects."""
    import nats.errors

    from notify.cluster.links import Uplink

    class Owner:
        max_payload = 1 << 20

        def __init__(self) -> None:
            self.up = False
            self.got: list[list[tuple[int, int, bytes]]] = []
            self.asked = asyncio.Event()

        async def request(self, subject: str, payload: bytes, timeout: float) -> None:
            self.asked.set()
            if not self.up:
                raise nats.errors.NoRespondersError
            self.got.append(decode_up(payload)[1])

    owner = Owner()
    gave_up: list[str] = []
    up = Uplink(owner, "notify.in.own", {"edge": "e", "inc": "i"},  # type: ignore[arg-type]
                owner="own", on_give_up=gave_up.append, give_up_after=0.2)
    try:
        up.send(1, FRAME, b'{"type":"publish"}')
        up.send(2, CLOSED, b'{"code":1006,"reason":""}')
        deadline = asyncio.get_running_loop().time() + 5
        while not gave_up:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        owner.up = True  # the next batch: the close, kept; not the frame, dropped
        while not owner.got:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        assert owner.got == [[(2, CLOSED, b'{"code":1006,"reason":""}')]]
    finally:
        await up.close()


async def test_an_uplink_keeps_closes_across_one_give_up_only() -> None:
    """An owner that answers nothing for two give-ups in a row is gone (its successor does not
    know those connections): the kept CLOSED entries are dropped then, not sent for ever."""
    import nats.errors

    from notify.cluster.links import Uplink

    class Gone:
        max_payload = 1 << 20

        async def request(self, subject: str, payload: bytes, timeout: float) -> None:
            raise nats.errors.NoRespondersError

    gave_up: list[str] = []
    up = Uplink(Gone(), "notify.in.own", {"edge": "e", "inc": "i"},  # type: ignore[arg-type]
                owner="own", on_give_up=gave_up.append, give_up_after=0.2)
    try:
        up.send(2, CLOSED, b'{"code":1006,"reason":""}')
        deadline = asyncio.get_running_loop().time() + 5
        while len(gave_up) < 2:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        assert len(up) == 0 and len(gave_up) == 2  # nothing left to send, no third give-up
    finally:
        await up.close()


async def test_a_new_incarnation_of_an_edge_is_a_new_link_numbered_from_1() -> None:
    """So that the edge can tell its first batch was lost (cluster simulator seed 230): the
    owner numbers a link per incarnation of the edge, names it (`to`), and drops what waited
    for the old one (its connections are gone)."""
    nc = _Nats()
    down = Downlinks(nc, "notify", {"node": "own", "inc": "o1"})  # type: ignore[arg-type]
    for _k in range(2):
        down.push("edge", "e1", 1, DATA, b"x")
        down.flush()
    down.push("edge", "e1", 1, DATA, b"for the old incarnation")
    down.push("edge", "e2", 7, DATA, b"y")  # the edge restarted
    down.flush()
    await asyncio.sleep(0)
    headers = [decode_down(p)[0] for _s, p in nc.out]
    assert [(h["to"], h["seq"]) for h in headers] == [("e1", 1), ("e1", 2), ("e2", 1)]
    assert decode_down(nc.out[-1][1])[1] == [(DATA, [7], b"y")]


async def test_an_uplink_bounds_the_bytes_of_client_frames_it_queues() -> None:
    """Cluster review S9: an owner that answers slowly must not let an edge queue without
    bound. A client frame over `max_bytes` is refused (the edge closes its connection);
    sessions and closes still go."""
    import nats.errors

    from notify.cluster.links import Uplink

    class Slow:
        max_payload = 1 << 20

        async def request(self, subject: str, payload: bytes, timeout: float) -> None:
            raise nats.errors.TimeoutError

    up = Uplink(Slow(), "notify.in.own", {"edge": "e", "inc": "i"},  # type: ignore[arg-type]
                owner="own", on_give_up=lambda owner: None, max_bytes=10)
    try:
        assert up.send(1, FRAME, b"12345678")
        await asyncio.sleep(0)  # taken into the batch in flight: no longer queued
        assert up.send(1, FRAME, b"12345678") and not up.send(2, FRAME, b"123")
        assert up.send(2, OPEN, b"{}") and up.send(2, CLOSED, b"{}")
    finally:
        await up.close()


class _Owners:
    """What an edge's uplinks ask of NATS, answered at once; what each got is kept."""

    max_payload = 1 << 20

    def __init__(self) -> None:
        self.got: list[list[tuple[int, int, bytes]]] = []
        self.seqs: list[int] = []

    async def request(self, subject: str, payload: bytes, timeout: float) -> None:
        header, entries = decode_up(payload)
        self.got.append(entries)
        self.seqs.append(header["seq"])


async def _until(check: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + 5
    while not check():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.01)


async def test_a_dead_uplink_is_a_give_up_and_the_next_send_gets_a_new_one() -> None:
    """An uplink whose sender died (G13: cancelled here, not by its owner) is reported as a
    give-up (the edge closes what it routed there), and the node's next send to that owner
    goes through a new uplink, not into the dead one's queue, which nobody sends. The new one
    numbers its batches on from the dead one's: the owner applies each number of this edge
    incarnation once, and took a new uplink's batch 1 for one it had (its frames lost)."""
    from notify.cluster.node import ClusterConfig, ClusterNode

    node = ClusterNode(ClusterConfig(servers=[], node_id="edge"))
    owners = _Owners()
    node._nc = owners  # type: ignore[assignment]
    first = node._uplink("own")
    first.send(1, FRAME, b'{"type":"join"}')
    await _until(lambda: owners.seqs == [1], "the first uplink's batch")
    owners.got.clear()
    first._task.task.cancel()
    await _until(lambda: node.stats.link_give_ups == 1, "the death reported as a give-up")
    assert first.dead
    try:
        second = node._uplink("own")
        assert second is not first and not second.dead
        second.send(1, FRAME, b'{"type":"publish"}')
        await _until(lambda: bool(owners.got), "the entry sent by the new uplink")
        assert owners.got == [[(1, FRAME, b'{"type":"publish"}')]]
        assert owners.seqs == [1, 2]
    finally:
        await node.stop()


async def test_an_uplinks_end_once_its_node_is_stopping_is_no_give_up() -> None:
    """An uplink made after `stop()` closed the others (a frame routed meanwhile) ends with
    the loop: that end is the stop's, and closes no connection as a give-up would."""
    from notify.cluster.node import ClusterConfig, ClusterNode

    node = ClusterNode(ClusterConfig(servers=[], node_id="edge"))
    node._nc = _Owners()  # type: ignore[assignment]
    await node.stop()
    late = node._uplink("own")
    try:
        late._task.task.cancel()  # as the loop's end cancels what is left
        await _until(lambda: late.dead, "the late uplink ended")
        await asyncio.sleep(0.01)
        assert node.stats.link_give_ups == 0
    finally:
        await late.close()


# -- entries too large for one NATS message (linkwire: pieces) -----------------------------------


def _joined(pieces: Pieces, node: str, entries: list[tuple[int, bytes]],
            inc: str = "i") -> list[tuple[int, bytes]]:
    """What a receiver makes of (kind, data) entries in order: the whole ones."""
    out = []
    for kind, data in entries:
        if kind == PIECE:
            whole = pieces.join(node, inc, data)
            if whole is not None:
                out.append(whole)
        else:
            pieces.cut(node)
            out.append((kind, data))
    return out


@pytest.mark.parametrize("size", [1, 99, 100, 101, 1000, 4321])
def test_an_edge_entry_too_large_crosses_in_pieces_and_is_joined(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    entries = up_entries(5, FRAME, data, room=113)
    if size + 13 <= 113:
        assert entries == [(5, FRAME, data)]
    else:
        assert {k for _c, k, _d in entries} == {PIECE} and len(entries) > 1
    for _conn, _kind, piece in entries:  # each fits, and decodes as sent
        assert len(encode_up({}, [(5, PIECE, piece)])) - len(encode_up({}, [])) <= 113
    back = decode_up(encode_up({"seq": 1}, entries))[1]
    pieces = Pieces()
    assert _joined(pieces, "e", [(k, d) for _c, k, d in back]) == [(FRAME, data)]
    assert not pieces and pieces.dropped == 0


def test_an_owner_entry_is_split_by_conns_then_in_pieces_each_fitting() -> None:
    conns = list(range(70_000))  # more than a 16-bit count
    room = 1 << 20
    parts = down_entries((DATA, conns, b"d" * 10), room)
    assert [c for _k, cs, _d in parts for c in cs] == conns
    assert all(len(cs) <= 0xFFFF and k == DATA for k, cs, _d in parts)
    big = b"p" * 3000
    parts = down_entries((DATA, [1, 2], big), room=1000)
    assert [k for k, _c, _d in parts] == [PIECE] * len(parts) and len(parts) == 4
    assert [cs for _k, cs, _d in parts] == [[], [], [], [1, 2]]  # conns on the last piece
    assert all(len(encode_down({}, [p])) - len(encode_down({}, [])) <= 1000 for p in parts)
    pieces = Pieces()
    assert _joined(pieces, "o", [(k, d) for k, _c, d in parts]) == [(DATA, big)]


def test_a_lost_piece_drops_its_entry_and_nothing_else() -> None:
    first = up_entries(1, FRAME, b"a" * 500, room=113)
    second = up_entries(1, FRAME, b"b" * 500, room=113)
    pieces = Pieces()
    # a piece in the middle lost: the entry is dropped; the next, whole, still joins
    got = _joined(pieces, "e", [(k, d) for _c, k, d in first[:2] + first[3:] + second])
    assert got == [(FRAME, b"b" * 500)] and pieces.dropped == 1
    # its last pieces lost, then a whole entry: the pieces are cut, the entry goes through
    got = _joined(pieces, "e", [(k, d) for _c, k, d in first[:-1]] + [(FRAME, b"small")])
    assert got == [(FRAME, b"small")] and pieces.dropped == 2 and not pieces
    # its first piece lost: the rest cannot join (of two pieces, or of more)
    pair = up_entries(1, FRAME, b"c" * 150, room=113)
    assert len(pair) == 2
    got = _joined(pieces, "e", [(k, d) for _c, k, d in pair[1:]])
    got += _joined(pieces, "e", [(k, d) for _c, k, d in first[1:]])
    assert got == [] and not pieces and pieces.dropped == 4
    # pieces of a node's earlier incarnation do not join with the new one's
    got = _joined(pieces, "e", [(k, d) for _c, k, d in first[:2]], inc="old")
    got += _joined(pieces, "e", [(k, d) for _c, k, d in first[2:]], inc="new")
    assert got == [] and not pieces


def test_a_truncated_piece_is_a_link_error() -> None:
    with pytest.raises(LinkError):
        Pieces().join("e", "i", b"\x01")


async def test_an_uplink_sends_a_frame_larger_than_a_nats_message_in_pieces() -> None:
    from notify.cluster.links import Uplink

    class Small(_Owners):
        max_payload = 4096

    owner = Small()
    up = Uplink(owner, "notify.in.own", {"edge": "e", "inc": "i"},  # type: ignore[arg-type]
                owner="own", on_give_up=lambda owner: None)
    try:
        frame = b'{"type":"publish","payload":"' + b"x" * 20_000 + b'"}'
        up.send(3, FRAME, frame)
        await _until(lambda: sum(len(b) for b in owner.got) >= 6, "every piece sent")
        assert all(len(encode_up({"edge": "e", "inc": "i", "seq": 99}, batch)) <= 4096
                   for batch in owner.got)
        pieces = Pieces()
        got = _joined(pieces, "e", [(k, d) for batch in owner.got for _c, k, d in batch])
        assert got == [(FRAME, frame)]
    finally:
        await up.close()


async def test_an_uplink_asks_again_while_nats_reconnects_with_its_buffer_full() -> None:
    """nats-py refuses a publish while it reconnects and its pending buffer is full
    (OutboundBufferLimitError): that is a request to ask again, as a reconnecting connection
    is, not the uplink's death (which closed every connection routed to that owner)."""
    import nats.errors

    from notify.cluster.links import Uplink

    class Reconnecting(_Owners):
        def __init__(self) -> None:
            super().__init__()
            self.refused = 0

        async def request(self, subject: str, payload: bytes, timeout: float) -> None:
            if self.refused < 2:
                self.refused += 1
                raise nats.errors.OutboundBufferLimitError
            await super().request(subject, payload, timeout)

    owner = Reconnecting()
    gave_up: list[str] = []
    up = Uplink(owner, "notify.in.own", {"edge": "e", "inc": "i"},  # type: ignore[arg-type]
                owner="own", on_give_up=gave_up.append)
    try:
        up.send(1, FRAME, b'{"type":"publish"}')
        await _until(lambda: bool(owner.got), "the batch, asked again")
        assert owner.got == [[(1, FRAME, b'{"type":"publish"}')]] and owner.seqs == [1]
        assert owner.refused == 2 and up.retries == 2 and not gave_up and not up.dead
    finally:
        await up.close()


async def test_an_uplink_whose_connection_the_stop_closed_ends_quietly() -> None:
    """An uplink made during the node's stop (a frame routed meanwhile) meets the connection
    the stop closed: that end is the stop's. No give-up (which closes connections), no
    `uplink_died` error (which says: a bug). The control: the same end while the node runs
    is both."""
    import nats.errors
    from structlog.testing import capture_logs

    from notify.cluster.node import ClusterConfig, ClusterNode

    class Closed(_Owners):
        async def request(self, subject: str, payload: bytes, timeout: float) -> None:
            raise nats.errors.ConnectionClosedError

    async def late_uplink(stopped: bool) -> tuple[ClusterNode, list[str], BaseException]:
        node = ClusterNode(ClusterConfig(servers=[], node_id="edge"))
        node._nc = Closed()  # type: ignore[assignment]
        node._server = SimpleNamespace(draining=False)  # type: ignore[assignment]
        if stopped:
            await node.stop()
        with capture_logs() as logs:
            late = node._uplink("own")
            late.send(1, CLOSED, b'{"code":1001,"reason":""}')
            await _until(lambda: late.dead, "the uplink ended")
            await asyncio.sleep(0.01)
        error = late._task.task.exception()
        assert error is not None
        if not stopped:
            await node.stop()
        return node, [e["event"] for e in logs if e["log_level"] == "error"], error

    node, errors, error = await late_uplink(stopped=False)
    assert node.stats.link_give_ups == 1 and errors == ["uplink_died"]
    node, errors, error = await late_uplink(stopped=True)
    assert isinstance(error, nats.errors.ConnectionClosedError)
    assert node.stats.link_give_ups == 0 and errors == []


def test_a_gap_drops_the_entry_in_pieces_once() -> None:
    """An owner batch lost in the middle of an entry's pieces: the entry is dropped and
    counted once, though the rest of its pieces still come; the next entry joins."""
    entry = up_entries(1, FRAME, b"a" * 500, room=113)
    assert len(entry) >= 6
    after = up_entries(1, FRAME, b"b" * 300, room=113)
    pieces = Pieces()
    got = _joined(pieces, "o", [(k, d) for _c, k, d in entry[:2]])
    pieces.lost("o")  # the batch with the third piece went
    got += _joined(pieces, "o", [(k, d) for _c, k, d in entry[3:] + after])
    assert got == [(FRAME, b"b" * 300)] and pieces.dropped == 1 and not pieces


async def test_the_closes_a_dead_uplink_held_go_with_the_next() -> None:
    """Cluster review S8 again: an uplink whose sender died held the CLOSED entries of
    connections the edge had closed; lost, their members would stay connected at the owner.
    The uplink that replaces it sends them first, and a close after the death goes there too
    (not into the dead one's queue, which nobody sends)."""
    from notify.cluster.node import ClusterConfig, ClusterNode
    from notify.cluster.routing import ClosedAt

    class Held(_Owners):
        def __init__(self) -> None:
            super().__init__()
            self.answer = asyncio.Event()

        async def request(self, subject: str, payload: bytes, timeout: float) -> None:
            await self.answer.wait()
            await super().request(subject, payload, timeout)

    node = ClusterNode(ClusterConfig(servers=[], node_id="edge"))
    owner = Held()
    node._nc = owner  # type: ignore[assignment]
    node._server = SimpleNamespace(draining=False)  # type: ignore[assignment]
    first = node._uplink("own")
    first.send(1, FRAME, b'{"type":"join"}')
    first.send(4, CLOSED, b'{"code":1006,"reason":"c"}')
    await asyncio.sleep(0)  # that batch in flight; what follows waits in the queue
    first.send(2, FRAME, b'{"type":"publish"}')
    first.send(3, CLOSED, b'{"code":1006,"reason":"a"}')
    first._task.task.cancel()
    await _until(lambda: node.stats.link_give_ups == 1, "the death reported as a give-up")
    try:
        node._apply([ClosedAt("own", 1, 1001, "b")])
        owner.answer.set()
        await _until(lambda: bool(owner.got), "the new uplink's batch")
        assert owner.got == [[(4, CLOSED, b'{"code":1006,"reason":"c"}'),
                              (3, CLOSED, b'{"code":1006,"reason":"a"}'),
                              (1, CLOSED, b'{"code":1001,"reason":"b"}')]]
        assert owner.seqs == [2]  # (batch 1 went with the dead one, unanswered)
    finally:
        await node.stop()


def test_a_node_that_goes_takes_its_entries_in_pieces_with_it() -> None:
    """The node's `Pieces` tables (G14: what removes their entries): a partial entry held from
    a node that died is dropped with it, in both directions."""
    from notify.cluster.node import ClusterConfig, ClusterNode

    node = ClusterNode(ClusterConfig(servers=[], node_id="me"))
    node._server = SimpleNamespace(draining=False)  # type: ignore[assignment]
    first = up_entries(1, FRAME, b"a" * 500, room=113)[0][2]
    for pieces in (node._pieces_up, node._pieces_down):
        assert pieces.join("gone", "i", first) is None and pieces
    node._node_down("gone")
    assert not node._pieces_up and not node._pieces_down
    assert node._pieces_up.dropped == node._pieces_down.dropped == 1
