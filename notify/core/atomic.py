"""Atomic multicast bookkeeping (G5, seed 003 §3.1 "ACK → Confirm").

An atomic message is delivered to every member of its sending view at once but held back by each
receiver until the server says CONFIRM. The server confirms when every member of the sending view
has ACKed (the sender too: it delivers its own copy). If one of them fails first, the message is
aborted at the next view install; the flush that precedes the install makes every survivor ACK
what it holds, so at install time a message is either fully ACKed or missing the ACK of a member
that is leaving.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from notify.core.actions import Message
from notify.core.view import MemberId


@dataclass(slots=True)
class PendingAtomic:
    message: Message
    waiting: set[MemberId]
    since: float


class AtomicTracker:
    __slots__ = ("_by_sender", "_pending")

    def __init__(self) -> None:
        # insertion order = offset order, so the first entry is the oldest
        self._pending: dict[int, PendingAtomic] = {}
        #: unresolved messages per sender (the `max_pending_atomic` limit)
        self._by_sender: dict[MemberId, int] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, offset: object) -> bool:
        return offset in self._pending

    def add(self, message: Message, members: tuple[MemberId, ...], now: float) -> None:
        self._pending[message.offset] = PendingAtomic(message, set(members), now)
        self._by_sender[message.sender] = self._by_sender.get(message.sender, 0) + 1

    def pending_from(self, sender: MemberId) -> int:
        return self._by_sender.get(sender, 0)

    def _done(self, message: Message) -> None:
        left = self._by_sender.pop(message.sender) - 1
        if left:
            self._by_sender[message.sender] = left

    def ack(self, member: MemberId, offsets: Iterable[int]) -> tuple[list[Message], list[int]]:
        """Record `member`'s ACKs. Returns the messages they completed (commit), and the
        offsets among them that are not pending here (resolved already, or unknown).

        One call per ACK frame, not per offset: every member ACKs every atomic message, so
        this loop runs once per delivery (issue 34: a method call and a membership test per
        offset were a third of the server's atomic path)."""
        pending = self._pending
        committed: list[Message] = []
        other: list[int] = []
        for offset in offsets:
            p = pending.get(offset)
            if p is None:
                other.append(offset)
                continue
            waiting = p.waiting
            waiting.discard(member)
            if not waiting:
                del pending[offset]
                self._done(p.message)
                committed.append(p.message)
        return committed, other

    def oldest(self) -> int | None:
        """The offset of the oldest undecided message (a history page stops before it)."""
        return next(iter(self._pending), None)

    def discard(self, offset: int) -> None:
        """Forget a message that was never delivered (its append failed)."""
        p = self._pending.pop(offset, None)
        if p is not None:
            self._done(p.message)

    def is_waiting_for(self, member: MemberId, offset: int) -> bool:
        p = self._pending.get(offset)
        return p is not None and member in p.waiting

    def next_deadline(self, ack_timeout: float,
                      excused: Callable[[MemberId], bool]) -> float | None:
        """When `overdue` will next name a member that is not `excused` (e.g. already on its
        way out): a deadline nobody acts on would make the timer spin until the install."""
        for p in self._pending.values():
            if any(not excused(m) for m in p.waiting):
                return p.since + ack_timeout
        return None

    def overdue(self, now: float, ack_timeout: float) -> set[MemberId]:
        """Members holding up a message for longer than `ack_timeout`: to be suspected."""
        late: set[MemberId] = set()
        for p in self._pending.values():
            # the very sum `next_deadline` gives: in floats, `now - since < ack_timeout` can
            # still hold at that deadline, and a simulated clock then ticks there forever
            if now < p.since + ack_timeout:
                break
            late |= p.waiting
        return late

    def resolve_all(self) -> tuple[list[Message], list[Message]]:
        """At install: commit the fully ACKed, abort the rest. Returns (committed, aborted)."""
        committed = [p.message for p in self._pending.values() if not p.waiting]
        aborted = [p.message for p in self._pending.values() if p.waiting]
        self._pending.clear()
        self._by_sender.clear()
        return committed, aborted
