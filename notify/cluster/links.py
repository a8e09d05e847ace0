"""The two directions of traffic between nodes, over core NATS (docs/cluster.md, "Routing").

Core NATS is at most once, so each direction says what it does about loss:

- **Edge → owner** (`Uplink`, one per owner an edge talks to): client frames wait in a queue and
  leave as one batch per request, one request in flight at a time (the batch that forms during
  a round trip is the next one: group commit, as the log does). A batch is sent again, with the
  same sequence number, until the owner answers or `give_up_after` passes; the owner applies a
  sequence number once (`UplinkDedup`), so a retry never applies a frame twice. Giving up is
  reported (`on_give_up`): the edge then closes the connections it routed there, and their
  clients resume (their resume points say exactly what they got). The `CLOSED` entries of the
  dropped batches are kept and go with the next one (at most `MAX_KEPT_CLOSED`): a lost one
  would leave its member connected at the owner, a zombie nobody suspects (cluster review S8),
  while the owner ignores one for a connection it does not know. They are kept across one
  give-up only: an owner that answers nothing for two give-ups in a row is gone, and its
  successor does not know those connections. The link's numbering goes on across give-ups,
  and into the uplink that replaces one whose sender died (the owner applies each number once,
  so a link that started again at 1 would be ignored until it passed the old numbers).
- **Owner → edge** (`Downlinks`): frames for clients leave on the next turn of the loop as one
  batch per edge, published without waiting (an owner must never wait for an edge: that is
  what per-member outboxes are for, G11). Each batch carries a per-link sequence number; an
  edge that sees a gap (`DownlinkGaps`) cannot know which frames it missed, so it closes the
  connections that owner serves, and their clients resume. A gap shows when a later batch
  arrives; when none follows (the *tail* of a burst lost, cluster review S1), the link's beats
  show it: once a link has been quiet for `BEAT_AFTER` after a batch, the owner sends the edge
  a beat carrying the last sequence sent (`DownlinkBeats`), repeated at doubling intervals
  `BEAT_COUNT` times in all (a beat lost in the same reset as the batch is covered by the
  next), and then nothing until the next batch: an idle link costs nothing. An edge that has
  not received that sequence has lost frames, and does what a gap does.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any

import nats.errors
import structlog
from nats.aio.client import Client

from notify.cluster.linkwire import (
    CLOSED,
    FRAME,
    MAX_CONNS,
    DownEntry,
    UpEntry,
    down_entries,
    down_size,
    encode_down,
    encode_up,
    up_entries,
    up_size,
)
from notify.errortext import described
from notify.supervision import LongTask

log = structlog.get_logger("notify.cluster")

#: room kept in a NATS message for the batch header
_HEADER_ROOM = 1024
#: bytes of client frames an uplink may queue for its owner (beyond: the edge closes the
#: connection that would pass it)
MAX_UPLINK_BYTES = 64 << 20
#: `CLOSED` entries an uplink keeps across a give-up (one per connection the edge closed)
MAX_KEPT_CLOSED = 10_000

#: a link quiet this long (s) after a batch gets a beat with the last sequence sent ...
BEAT_AFTER = 0.25
#: ... and this many in all, each after twice the previous wait (0.25, 0.75, 1.75, 3.75 s
#: after the batch), then none until the next batch
BEAT_COUNT = 4


#: what a request raises once the node's NATS connection is draining or closed (its stop)
_CLOSING = (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError)


def in_subject(prefix: str, node: str) -> str:
    return f"{prefix}.in.{node}"


def out_subject(prefix: str, node: str) -> str:
    return f"{prefix}.out.{node}"


class Uplink:
    """Edge → one owner: batched, retried, applied once (see the module docstring)."""

    def __init__(self, nc: Client, subject: str, header: dict[str, Any], *,
                 on_give_up: Callable[[str], None], owner: str,
                 request_timeout: float = 2.0, give_up_after: float = 15.0,
                 max_bytes: int = MAX_UPLINK_BYTES,
                 owner_stopping: Callable[[], bool] = lambda: False,
                 after: Uplink | None = None) -> None:
        self._nc, self._subject, self._header = nc, subject, header
        self.owner = owner
        self._on_give_up = on_give_up
        self._owner_stopping = owner_stopping
        self.request_timeout, self.give_up_after = request_timeout, give_up_after
        #: entries to send, and the batch in flight; a new uplink `after` a dead one takes
        #: over the CLOSED entries of both (the connections it closed must not stay open at
        #: the owner, cluster review S8; a batch it may have sent again is applied once)
        self._queue: list[UpEntry] = [] if after is None else \
            [x for x in after._flight + after._queue if x[1] == CLOSED][-MAX_KEPT_CLOSED:]
        self._flight: list[UpEntry] = []
        self._wake = asyncio.Event()
        if self._queue:
            self._wake.set()
        #: the link's numbering, which a new uplink `after` a dead one to the same owner goes
        #: on with: the owner applies each number of this edge incarnation once, and would
        #: ignore a link that started again at 1 (module docstring)
        self._seq: itertools.count[int] = after._seq if after is not None \
            else itertools.count(1)
        self.batches = self.retries = self.give_ups = 0
        #: give-ups since the last answered request (CLOSED entries survive only the first)
        self._failing = 0
        #: bytes queued, and the most that client frames may fill (G14)
        self._bytes = sum(len(data) for _c, _k, data in self._queue)
        self.max_bytes = max_bytes
        self._task = LongTask(self._run(), name=f"uplink-{owner}", on_death=self._died,
                              owner_stopping=owner_stopping)

    def send(self, conn: int, kind: int, data: bytes) -> bool:
        """Queue an entry; False for a client frame over `max_bytes` queued (G14: the edge
        closes its connection, whose client tries again later). Sessions and closes always
        go (they are small, and losing one leaves a zombie at the owner)."""
        if kind == FRAME and self._bytes + len(data) > self.max_bytes:
            return False
        for entry in up_entries(conn, kind, data, self._nc.max_payload - _HEADER_ROOM):
            self._queue.append(entry)
            self._bytes += len(entry[2])
        self._wake.set()
        return True

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def dead(self) -> bool:
        """Its sender ended (a death, reported through `on_give_up`, or `close()`): what is
        sent to it now would queue with nobody to send it."""
        return self._task.done()

    async def close(self) -> None:
        await self._task.stop()

    def _take(self) -> list[UpEntry]:
        """The queue's head, up to what fits in one NATS message."""
        room = self._nc.max_payload - _HEADER_ROOM
        size, n = 0, 0
        for _conn, _kind, data in self._queue:
            if n and size + up_size(data) > room:
                break
            size += up_size(data)
            n += 1
        batch, self._queue = self._queue[:n], self._queue[n:]
        self._bytes -= sum(len(data) for _c, _k, data in batch)
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch = self._flight = self._take()
                payload = encode_up({**self._header, "seq": next(self._seq)}, batch)
                deadline = loop.time() + self.give_up_after
                delay = 0.05
                while True:
                    try:
                        await self._nc.request(self._subject, payload,
                                               timeout=self.request_timeout)
                        self.batches += 1
                        self._failing = 0
                        self._flight = []
                        break
                    except (nats.errors.TimeoutError, nats.errors.NoRespondersError,
                            nats.errors.ConnectionReconnectingError,
                            # reconnecting, with nats-py's buffer for that full
                            nats.errors.OutboundBufferLimitError) as e:
                        if loop.time() + delay >= deadline:
                            self.give_ups += 1
                            self._failing += 1
                            kept = [x for x in batch + self._queue if x[1] == CLOSED] \
                                if self._failing == 1 else []
                            dropped = len(batch) + len(self._queue) - len(kept)
                            self._queue, self._flight = kept[-MAX_KEPT_CLOSED:], []
                            self._bytes = sum(len(data) for _c, _k, data in self._queue)
                            log.warning("uplink_gave_up", owner=self.owner, dropped=dropped,
                                        kept_closed=len(self._queue), error=type(e).__name__)
                            self._on_give_up(self.owner)
                            break
                        self.retries += 1
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, 1.0)

    def _died(self, error: BaseException) -> None:
        if isinstance(error, _CLOSING) and self._owner_stopping():
            # the node's stop closed the connection under an uplink made meanwhile (a frame
            # routed during the stop): that end is the stop's
            log.debug("uplink_ended_by_stop", owner=self.owner, error=described(error))
            return
        # the loop catches what a request can raise; anything else is a bug: say so, and let
        # the edge close what it routed here (its clients resume) instead of queueing forever
        log.error("uplink_died", owner=self.owner, error=described(error))
        self._on_give_up(self.owner)


class UplinkDedup:
    """Owner side: apply each edge batch once. Keyed by the edge's incarnation, so an edge that
    restarts (sequence numbers from 1 again) is a new link; forgotten with the edge."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], int] = {}

    def fresh(self, edge: str, inc: str, seq: int) -> bool:
        key = (edge, inc)
        last = self._last.get(key)
        if last is None:  # a new incarnation of that edge: the old one's link is over
            self.forget(edge)
        elif seq <= last:
            return False
        self._last[key] = seq
        return True

    def forget(self, edge: str) -> None:
        for key in [k for k in self._last if k[0] == edge]:
            del self._last[key]


class DownlinkBeats:
    """Owner side, sans-I/O: when to tell an edge the last sequence sent on its link (see the
    module docstring). Fed `now`; reads no clock. An entry lives from a batch to its last beat
    (or `forget`): at most one per edge, and none for an idle link."""

    def __init__(self, *, after: float = BEAT_AFTER, count: int = BEAT_COUNT) -> None:
        if after <= 0 or count < 1:
            raise ValueError("after and count must be positive")
        self.after, self.count = after, count
        #: edge -> (last sequence sent, when its next beat is due, beats sent since that batch)
        self._due: dict[str, tuple[int, float, int]] = {}

    def sent(self, edge: str, seq: int, now: float) -> None:
        """Batch `seq` left for `edge`: its beats start again from now."""
        self._due[edge] = (seq, now + self.after, 0)

    def due(self, now: float) -> list[tuple[str, int]]:
        """The beats to send now: (edge, last sequence sent to it)."""
        out: list[tuple[str, int]] = []
        for edge, (seq, at, sent) in list(self._due.items()):
            if at > now:
                continue
            out.append((edge, seq))
            sent += 1
            if sent >= self.count:
                del self._due[edge]
            else:
                self._due[edge] = (seq, now + self.after * 2 ** sent, sent)
        return out

    def next_deadline(self) -> float | None:
        return min((at for _seq, at, _sent in self._due.values()), default=None)

    def __len__(self) -> int:
        return len(self._due)

    def forget(self, edge: str) -> None:
        self._due.pop(edge, None)


class Downlinks:
    """Owner → edges: one batch per edge per loop turn, fire and forget, numbered per link;
    beats after a burst (`beat`, called by the node's tick) say where each link stands."""

    def __init__(self, nc: Client, prefix: str, header: dict[str, Any], *,
                 beats: DownlinkBeats | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._nc, self._prefix, self._header = nc, prefix, header
        self._pending: dict[str, list[DownEntry]] = {}
        self._seq: dict[str, itertools.count[int]] = {}
        #: the incarnation of each edge its link is numbered for (a new one starts at 1)
        self._to: dict[str, str] = {}
        self._beats = beats if beats is not None else DownlinkBeats()
        self._clock = clock
        self._scheduled = False
        self.batches = self.failures = self.beats = 0

    def push(self, edge: str, inc: str, conn: int, kind: int, data: bytes) -> None:
        """A frame for connection `conn` of incarnation `inc` of `edge`."""
        if self._to.get(edge) != inc:
            # A new incarnation of the edge (or the first): a new link, numbered from 1, so
            # that the edge can tell its very first batch was lost. What waits for the old
            # one is for connections that are gone with it.
            self._to[edge] = inc
            self._pending.pop(edge, None)
            self._seq[edge] = itertools.count(1)
            self._beats.forget(edge)
        entries = self._pending.setdefault(edge, [])
        if entries and entries[-1][0] == kind and entries[-1][2] is data:
            entries[-1][1].append(conn)  # the same frame for another member on that edge
        else:
            entries.append((kind, [conn], data))
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, {}
        room = self._nc.max_payload - _HEADER_ROOM
        for edge, entries in pending.items():
            batch: list[DownEntry] = []
            size, i = 0, 0
            while i < len(entries):
                entry = entries[i]
                s = down_size(entry[1], entry[2])
                if s > room or len(entry[1]) > MAX_CONNS:  # in parts (linkwire), packed as any
                    entries[i:i + 1] = down_entries(entry, room)
                    continue
                if batch and size + s > room:
                    self._publish(edge, batch)
                    batch, size = [], 0
                batch.append(entry)
                size += s
                i += 1
            if batch:
                self._publish(edge, batch)

    def _publish(self, edge: str, entries: list[DownEntry]) -> None:
        seq = next(self._seq[edge])
        self._send(edge, encode_down({**self._header, "to": self._to[edge], "seq": seq},
                                     entries))
        self._beats.sent(edge, seq, self._clock())
        self.batches += 1

    def beat(self, now: float) -> None:
        """Send the beats due (the node's tick calls this)."""
        for edge, last in self._beats.due(now):
            self._send(edge, encode_down({**self._header, "to": self._to[edge], "beat": last},
                                         []))
            self.beats += 1

    def _send(self, edge: str, payload: bytes) -> None:
        task = asyncio.get_running_loop().create_task(
            self._nc.publish(out_subject(self._prefix, edge), payload))
        task.add_done_callback(self._published)

    def _published(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        # the edge sees the gap in the sequence (or at the next beat) and has the clients resume
        self.failures += 1
        log.warning("downlink_publish_failed", error=repr(task.exception()))

    def forget(self, edge: str) -> None:
        self._pending.pop(edge, None)
        self._seq.pop(edge, None)
        self._to.pop(edge, None)
        self._beats.forget(edge)


class DownlinkGaps:
    """Edge side: is this owner batch the next one on its link? A link is one incarnation of
    the owner sending to one incarnation of this edge (the owner numbers it from 1 when either
    is new, and names the edge incarnation it is for: `to`), so a batch from an owner not
    heard from yet must be number 1: a later one means the first ones were lost (cluster
    simulator seed 230: the first batch to a fresh edge, lost, went unnoticed)."""

    def __init__(self) -> None:
        self._next: dict[str, tuple[str, int]] = {}

    def check(self, owner: str, inc: str, seq: int) -> bool:
        """True if in order; False if batches were lost before this one (it is accepted, and
        the link goes on from it)."""
        known = self._next.get(owner)
        self._next[owner] = (inc, seq + 1)
        if known is None or known[0] != inc:
            return seq == 1
        return known[1] == seq

    def beat(self, owner: str, inc: str, last: int) -> bool:
        """The owner says `last` is the last batch it sent on this link: True if this edge has
        it; False if batches were lost (the link then goes on from `last`).

        Every batch a link counts was sent to this incarnation of the edge: an owner never
        heard from that has sent some means they were lost."""
        known = self._next.get(owner)
        if known is not None and known[0] == inc and known[1] > last:
            return True
        self._next[owner] = (inc, last + 1)
        return False

    def forget(self, owner: str) -> None:
        self._next.pop(owner, None)
