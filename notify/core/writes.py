"""The write pipeline of one group: durability and the install barrier as core logic (G2, G10).

Theory of operation. A group says nothing that its log does not already hold. Its writes (a
batch of accepted messages, or a view install with the aborts it decided) go to storage one at
a time: while one is under way, every frame the group decides is *held*, and when storage says
the write is done the held frames leave in the order they were decided. So:

- a `deliver` and the `published` that answers it leave only once the message is stored (G10),
  and so does an idempotent retry's answer, a resume's replay and a catch-up (they are decided
  after the message was accepted, so they wait behind its write);
- a `view_install` leaves only once the view is stored, behind every old-view message (they were
  stored first: a group installs only when no write is under way and nothing waits to be
  numbered) and ahead of every new-view one (whose write comes after the view's). That is the
  barrier of DESIGN §4, with nothing to wait on but storage, which has a deadline.

Publishes that arrive while a write is under way wait in the group's intake, not yet numbered,
and become the next batch (group commit). Because nothing after the write under way has an
offset yet, a failed append is undone exactly: its messages are retracted from the topic (their
offsets and seqs are given again to the next ones) and their publishers refused, and every held
frame that speaks of them is dropped or turned into a refusal (`Writes.fail`). A view that cannot
be stored cannot be undone (members may already act on the flush), so the core halts
(fail-stop, G13) and a restart recovers from the log.

`Writes` is the bookkeeping; `Group` decides what to write and when (notify/core/group.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from notify.core.actions import (
    Action,
    Append,
    CatchupDone,
    Deliver,
    Fanout,
    Outcome,
    Published,
    ReadHistory,
    Rejected,
    Send,
    ServeCheckpoint,
    StoreView,
    Write,
)
from notify.core.errors import RejectCode

#: actions that carry what the group says to its members: held while a write is under way
_SAYS = (Send, Fanout, ServeCheckpoint, ReadHistory)


@dataclass(slots=True)
class InFlight:
    write: Write
    since: float


class Writes:
    """One group's write under way and the frames held behind it."""

    __slots__ = ("_held", "_tickets", "in_flight")

    def __init__(self) -> None:
        self.in_flight: InFlight | None = None
        self._held: list[Action] = []
        self._tickets = 0

    @property
    def busy(self) -> bool:
        return self.in_flight is not None

    @property
    def held(self) -> int:
        return len(self._held)

    def holds(self, frame_type: type) -> bool:
        """Whether a frame of that type waits behind the write under way."""
        return any(type(a) is Send and type(a.frame) is frame_type for a in self._held)

    def waiting(self) -> set[int]:
        """The connections that frames held behind the write under way are for."""
        conns: set[int] = set()
        for a in self._held:
            if isinstance(a, Fanout):
                conns.update(a.conns)
                if a.reply is not None:
                    conns.add(a.reply.conn)
            elif isinstance(a, (Send, ServeCheckpoint)):
                conns.add(a.conn)
        return conns

    def next_ticket(self) -> int:
        self._tickets += 1
        return self._tickets

    def route(self, actions: list[Action], *, busy: bool) -> list[Action]:
        """Split what a group call decided into what goes out now and what waits: every frame
        decided while a write was under way (`busy` at the start of the call), or after the
        call started one, is held, in order."""
        if not busy and self.in_flight is None:
            return actions
        out: list[Action] = []
        holding = busy
        for a in actions:
            if isinstance(a, (Append, StoreView)):
                holding = True
                out.append(a)
            elif holding and isinstance(a, _SAYS) and not (isinstance(a, Send) and a.overtakes):
                self._held.append(a)
            else:
                out.append(a)
        return out

    def start(self, write: Write, now: float) -> Write:
        assert self.in_flight is None, "one write per group at a time"
        self.in_flight = InFlight(write, now)
        return write

    def done(self, ticket: int) -> tuple[Write, list[Action]]:
        """The write under way is stored: it, and the frames held behind it, in order."""
        f = self.in_flight
        assert f is not None and f.write.ticket == ticket, (ticket, f)
        self.in_flight = None
        held, self._held = self._held, []
        return f.write, held

    @staticmethod
    def fail(held: list[Action], retracted: set[int], head: int) -> list[Action]:
        """The held frames of a failed append, purged of the retracted messages (offsets):
        their fan-out and any replay of them is dropped, an answer that they were published
        becomes a refusal, and a catch-up no longer counts them."""
        out: list[Action] = []
        for a in held:
            if isinstance(a, Fanout):
                if a.message.offset in retracted:
                    if a.reply is not None and isinstance(a.reply.frame, Published):
                        p = a.reply.frame
                        out.append(Send(a.reply.conn,
                                        Rejected(p.req, p.id, RejectCode.STORAGE_FAILED)))
                    continue
            elif isinstance(a, Send):
                f = a.frame
                if isinstance(f, Deliver | Outcome) and f.offset in retracted:
                    continue  # (an outcome: a trusted sender's atomic to a view of nobody)
                if isinstance(f, Published) and f.offset in retracted:
                    a = Send(a.conn, Rejected(f.req, f.id, RejectCode.STORAGE_FAILED))
                elif isinstance(f, CatchupDone) and f.offset > head:
                    a = replace(a, frame=replace(f, offset=head))
            out.append(a)
        return out

