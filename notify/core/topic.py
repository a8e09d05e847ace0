"""The topic buffer of seed 003 §3.3: one group's messages split into streams.

Theory of operation. Ordering only matters inside a stream: each sender has its own FIFO stream
`fifo:<member>` (G3) and the group has one `total` stream (G4); what a non-member sends goes to
`ext:<sender>`. The topic gives every accepted
message its group-log `offset` (one counter per group) and its `seq` in its stream (one counter
per stream, starting at 1, so a receiver can see a gap). Because the core is single-threaded, the
order in which messages are accepted *is* the total order; the adapter's one worker per stream
keeps it on the way out. The topic also keeps the last `retain` messages for replay to members
that resume (G7) or come back (G8), and remembers the outcome of retained atomic messages so a
replay can carry their confirm/abort. That in-memory window never lets go of an atomic message
whose outcome is undecided (it holds at most `max_pending_atomic` per member): whatever lies
before the window is decided, so a member reading it from the log (`history`) learns every
outcome there (an aborted one is stored with the view that aborted it).
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterable
from typing import Any

from notify.core.actions import Message
from notify.core.events import Order
from notify.core.publish_ids import SenderIds
from notify.core.view import MemberId

TOTAL_STREAM = "total"

#: aborted offsets a topic remembers beyond its window (aborts are rare: a member failed with
#: atomic messages of its view undecided); past that, the oldest are forgotten (G14)
MAX_ABORTS = 100_000


def fifo_stream(member: MemberId) -> str:
    """Interned: every message in the window names its stream, and one string per stream is
    60 bytes less per retained message than one per message."""
    return sys.intern(f"fifo:{member}")


def external_stream(sender: MemberId) -> str:
    """Messages a sender published while not a member have a stream of their own: receivers
    with `accept_from: "members"` skip them whole, so no stream they get has a seq gap (G3)."""
    return sys.intern(f"ext:{sender}")


class Topic:
    __slots__ = ("_aborted", "_bytes", "_last", "_log", "_max_bytes", "_outcomes", "_publish_ids",
                 "_retain", "_retained", "_seqs", "_undecided", "_window", "accepted_at",
                 "durable", "group", "head", "warm")

    def __init__(self, group: str, *, retain: int, idempotency_window: int, head: int = 0,
                 retain_bytes: int = 1 << 62) -> None:
        self.group = group
        #: offset of the last accepted message (0 = none yet)
        self.head = head
        #: offset of the last message the log holds (`stored`): the window keeps every message
        #: after it (an append under way may still be retracted, and the log has none of it)
        self.durable = head
        self._seqs: dict[str, int] = {}
        #: offset of each stream's latest message, where known (not for streams whose every
        #: message was deleted before a restart)
        self._last: dict[str, int] = {}
        self._log: deque[Message] = deque()
        #: payload bytes retained, and their bound
        self._bytes = 0
        self._max_bytes = retain_bytes
        #: retained messages per stream: a stream's retained messages are the last of its
        #: seqs, so its first retained seq is `seq - count + 1` (O(1) resume checks)
        self._retained: dict[str, int] = {}
        self._retain = retain
        self._outcomes: dict[int, bool] = {}
        #: retained atomic messages with no outcome yet: the window keeps them (see above)
        self._undecided: set[int] = set()
        #: the aborted atomic messages, retained or not (oldest first, at most `MAX_ABORTS`):
        #: one that left the window is decided, and committed unless it is here (`decided`)
        self._aborted: dict[int, None] = {}
        self._publish_ids: dict[MemberId, SenderIds] = {}
        self._window = idempotency_window
        #: when the last message was accepted, and whether the window holds more than it must
        #: since it last cooled (the hub cools a quiet group's window: `cool`)
        self.accepted_at = 0.0
        self.warm = False

    # -- accepting -------------------------------------------------------------------------------

    def known_offset(self, sender: MemberId, publish_id: str) -> int | None:
        """The offset a publish id was accepted at, if it is still remembered (idempotency)."""
        ids = self._publish_ids.get(sender)
        return None if ids is None else ids.get(publish_id)

    def accept(
        self,
        *,
        sender: MemberId,
        publish_id: str,
        order: Order,
        view: int,
        atomic: bool,
        payload: Any,
        now: float,
        from_member: bool,
        size: int = 0,
    ) -> Message:
        stream = self.stream_of(order, sender, from_member)
        seq = self._seqs.get(stream, 0) + 1
        self._seqs[stream] = seq
        self.head += 1
        self._last[stream] = self.head
        self.accepted_at = now
        msg = Message(
            self.group, self.head, stream, seq, sender, view, atomic, payload, now, publish_id,
            from_member, size,
        )
        self._keep(msg)
        if atomic:
            self._undecided.add(msg.offset)
        self._ids_of(sender).add(publish_id, msg.offset, self._window)
        return msg

    def _ids_of(self, sender: MemberId) -> SenderIds:
        ids = self._publish_ids.get(sender)
        if ids is None:
            ids = self._publish_ids[sender] = SenderIds()
        return ids

    @staticmethod
    def stream_of(order: Order, sender: MemberId, from_member: bool) -> str:
        if order is Order.TOTAL:
            return TOTAL_STREAM
        return fifo_stream(sender) if from_member else external_stream(sender)

    def last_offset(self, stream: str) -> int | None:
        """Offset of `stream`'s latest message, where known."""
        return self._last.get(stream)

    def retract(self, messages: tuple[Message, ...], last_before: dict[str, int | None]) -> None:
        """Undo the acceptance of `messages`, the latest ones accepted (their append failed):
        their offsets and seqs go to the next messages, their ids may be published again.
        `last_before` is `last_offset()` of their streams before they were accepted."""
        for m in reversed(messages):
            gone = self._log.pop()
            assert gone is m, "only the latest messages can be retracted"
            self._bytes -= m.size
            self._uncount(m.stream)
            if m.seq > 1:
                self._seqs[m.stream] = m.seq - 1
            else:
                self._seqs.pop(m.stream, None)
            ids = self._publish_ids.get(m.sender)
            if ids is not None:
                ids.retract(m.id)
            self._outcomes.pop(m.offset, None)
            self._undecided.discard(m.offset)
            self.head = m.offset - 1
        for stream, last in last_before.items():
            if last is None:
                self._last.pop(stream, None)
            else:
                self._last[stream] = last

    def restore(self, seqs: dict[str, int], recent: list[Message],
                older_ids: Iterable[tuple[MemberId, str, int]] = ()) -> None:
        """Refill from storage after a restart: stream positions, the publish ids of what the
        log keeps before `recent` (sender, id, offset; oldest first), and the retained tail
        of the log in offset order (which brings back its publish ids too): a retry of any id
        the log still holds is known, whatever the window (idempotent retries)."""
        self._seqs.update(seqs)
        for sender, publish_id, offset in older_ids:
            self._ids_of(sender).add(publish_id, offset, self._window)
        for m in recent[-self._retain:]:
            self._keep(m)
            self._last[m.stream] = m.offset
            self._ids_of(m.sender).add(m.id, m.offset, self._window)

    def _keep(self, m: Message) -> None:
        """Retain `m`, dropping the oldest past `retain` messages or `retain_bytes` bytes (the
        newest message always stays, and an undecided atomic one holds what follows it)."""
        log = self._log
        log.append(m)
        self.warm = True
        self._bytes += m.size
        self._retained[m.stream] = self._retained.get(m.stream, 0) + 1
        self._trim()

    def _trim(self) -> None:
        self._trim_to(self._retain, self._max_bytes)

    def cool(self) -> None:
        """Let the window go: the group has been quiet (`Timeouts.quiet_group`), and a member
        that resumes now reads what it lacks from the log (G14: memory holds what is hot). The
        window still keeps what it must (undecided atomic messages, what the log lacks) and
        the newest message; it fills again with the next messages."""
        self._trim_to(1, 0)
        self.warm = False
        for ids in self._publish_ids.values():  # and its publish ids take less room
            ids.freeze(self.durable)

    def _trim_to(self, retain: int, max_bytes: int) -> None:
        log = self._log
        while len(log) > retain or (self._bytes > max_bytes and len(log) > 1):
            if log[0].offset in self._undecided or log[0].offset > self.durable:
                return
            gone = log.popleft()
            self._bytes -= gone.size
            self._outcomes.pop(gone.offset, None)
            self._uncount(gone.stream)

    def stored(self, offset: int) -> None:
        """The log holds every message up to `offset` now: the window may let them go."""
        if offset > self.durable:
            self.durable = offset
            self._trim()

    def _uncount(self, stream: str) -> None:
        n = self._retained[stream] - 1
        if n:
            self._retained[stream] = n
        else:
            del self._retained[stream]

    def forget_ids(self, sender: MemberId) -> None:
        """Stop remembering `sender`'s publish ids (it left long ago, G14)."""
        self._publish_ids.pop(sender, None)

    def remembers(self, sender: MemberId) -> bool:
        return sender in self._publish_ids

    def seq(self, stream: str) -> int:
        """The last seq given in `stream` (0: none)."""
        return self._seqs.get(stream, 0)

    # -- atomic outcomes -------------------------------------------------------------------------

    def record_outcome(self, offset: int, committed: bool) -> None:
        if self._log and offset >= self._log[0].offset:
            self._outcomes[offset] = committed
        if not committed:
            self._aborted[offset] = None
            if len(self._aborted) > MAX_ABORTS:
                del self._aborted[next(iter(self._aborted))]
        if offset in self._undecided:
            self._undecided.discard(offset)
            self._trim()  # what it held may go now

    def outcome(self, offset: int) -> bool | None:
        return self._outcomes.get(offset)

    def decided(self, offset: int) -> bool | None:
        """The outcome of the atomic message at `offset` when it has left the window: every
        one that did is decided (the window keeps the undecided), and committed unless it was
        aborted. None: still in the window (`outcome` says), or not known any more (older
        than the oldest abort remembered)."""
        if offset >= self.first_retained or offset < 1:
            return None
        if offset in self._aborted:
            return False
        if len(self._aborted) >= MAX_ABORTS and offset < next(iter(self._aborted)):
            return None
        return True

    # -- replay ----------------------------------------------------------------------------------

    @property
    def first_retained(self) -> int:
        """Offset of the oldest retained message; `head + 1` when nothing is retained."""
        return self._log[0].offset if self._log else self.head + 1

    def can_replay(self, after: int, streams: dict[str, int], *, external: bool) -> bool:
        """Whether every message a point (`after`, `streams`) lacks is still retained (G8).

        The oldest retained offset alone would refuse a member whose `after` is old but whose
        streams are up to date (a long stable view): what matters is, per stream, whether the
        next message it lacks is in the window. `external`: the point also wants `ext:`
        streams (its member accepts messages from non-members)."""
        if after + 1 >= self.first_retained:
            return True
        unknown = self.first_retained - 1  # a stream with nothing retained ended before this
        for stream, seq in self._seqs.items():
            have = streams.get(stream, 0)
            if have >= seq or self._last.get(stream, unknown) <= after:
                continue  # it has them all, or the stream has nothing after `after`
            if not external and stream.startswith("ext:"):
                continue
            kept = self._retained.get(stream, 0)
            if seq - kept + 1 > have + 1:
                return False  # the next one it lacks was deleted
        return True

    def replay(self, after: int) -> Iterable[Message]:
        """The retained messages after offset `after`, in offset order."""
        if not self._log:
            return
        start = max(after + 1 - self._log[0].offset, 0)
        for i in range(start, len(self._log)):
            yield self._log[i]
