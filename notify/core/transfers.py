"""A group's state transfers and checkpoints (G9), in frames.

The decisions live in `state_transfer` (who donates, when a donor is replaced, what a chunk may
be: `state_transfer.relay`, `state_transfer.uploads`, and the position rule of
`state_transfer.position` that the SDK uses too); this module is where they meet the group: its
view, its connections, its log and the frames they become.

Theory of operation. At an install with a joiner that asked for state, `start` asks a donor for
a snapshot at the view boundary, or, with no donor, serves the group's stored checkpoint
completed by the log up to the boundary, or tells the joiner that no state can be had. The
donor's `state_chunk`s are relayed; a donor lost or stalled is replaced. Members upload
checkpoints chunk by chunk (`checkpoint_chunk`); storage stages them, and the last chunk's
position is checked against the log before storage may make it the group's checkpoint.

What it needs of its group is written down as `TransferHost` (the way `writes.py` and
`atomic.py` take plain arguments): this module does not import `group.py`, so the two form no
cycle (STYLE.md, habit 8).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from notify.core.actions import (
    Action,
    CheckpointStored,
    CommitCheckpoint,
    ConnId,
    Deliver,
    DiscardCheckpoint,
    Error,
    Send,
    ServeCheckpoint,
    StateChunkOut,
    StateRequest,
    StoreCheckpointChunk,
)
from notify.core.checkpoint import Checkpoint
from notify.core.errors import ErrorCode
from notify.core.events import AcceptFrom, CheckpointChunk, Req, ResumePoint, StateChunk
from notify.core.topic import Topic
from notify.core.view import MemberId, View
from state_transfer.position import includes
from state_transfer.relay import Ask, Decision, Forward, Relay, Transfer
from state_transfer.uploads import BadChunk, Uploads

Says = Send | ServeCheckpoint


class Party(Protocol):
    """A member of the view, as transfers see it (the group's `Slot`)."""

    @property
    def conn(self) -> ConnId | None: ...

    @property
    def accept_from(self) -> AcceptFrom: ...


class TransferHost(Protocol):
    """What transfers read of their group (`notify.core.group.Group`), and nothing more."""

    @property
    def name(self) -> str: ...

    @property
    def epoch(self) -> int: ...

    @property
    def view(self) -> View: ...

    @property
    def slots(self) -> Mapping[MemberId, Party]: ...

    @property
    def topic(self) -> Topic: ...

    def log(self, out: list[Action], event: str, now: float, **fields: Any) -> None: ...


class GroupTransfers:
    __slots__ = ("_g", "checkpoint", "relay", "uploads")

    def __init__(self, host: TransferHost, *, max_bytes: int, stall_timeout: float) -> None:
        self._g = host
        self.relay = Relay(max_bytes=max_bytes, stall_timeout=stall_timeout)
        self.uploads = Uploads(max_bytes=max_bytes)
        #: the latest stored checkpoint (its bytes are in storage)
        self.checkpoint: Checkpoint | None = None

    @property
    def idle(self) -> bool:
        return not self.relay and not self.uploads

    def next_deadline(self) -> float | None:
        return self.relay.next_deadline()

    # -- donors ----------------------------------------------------------------------------------

    def _candidates(self, exclude: frozenset[MemberId] = frozenset()) -> Iterator[MemberId]:
        """Members that can give the state, longest-standing first."""
        g = self._g
        return (m for m in g.view.members
                if m not in exclude and g.slots[m].conn is not None)

    def start(self, joiner: MemberId, req: Req, now: float,
              joining: frozenset[MemberId]) -> list[Says]:
        """At the install of the current view: `joiner` asked for state (the members joining
        with it have none to give)."""
        g = self._g
        t = Transfer(f"{g.view.version}.{joiner}.0", joiner, "", g.topic.head, now, req)
        return self._say(self.relay.start(t, self._candidates(joining)))

    def lost(self, member: MemberId, now: float) -> list[Says]:
        """A joiner that goes away needs no state; a donor that goes away is replaced."""
        out: list[Says] = []
        for d in self.relay.lost(member, now, self._candidates()):
            out.extend(self._say(d))
        return out

    def tick(self, now: float) -> list[Says]:
        out: list[Says] = []
        for d in self.relay.stalled(now, self._candidates()):
            out.extend(self._say(d))
        return out

    def _say(self, d: Decision) -> list[Says]:
        g, t = self._g, d.transfer
        if isinstance(d, Ask):
            donor_conn = g.slots[t.donor].conn
            assert donor_conn is not None
            return [Send(donor_conn, StateRequest(g.name, t.id, t.joiner, t.offset))]
        joiner_conn = g.slots[t.joiner].conn if t.joiner in g.slots else None
        if joiner_conn is None:
            return []
        served = self._from_checkpoint(t, joiner_conn)
        if served is not None:
            return served
        return [Send(joiner_conn, Error(
            ErrorCode.STATE_UNAVAILABLE,
            f"no member of {g.name} can give the state, and no usable checkpoint", t.req))]

    def _from_checkpoint(self, t: Transfer, conn: ConnId) -> list[Says] | None:
        """The checkpoint, completed by the log up to the view boundary `t.offset`: the messages
        it lacks, as the member that took it received them (aborted ones never were), then the
        snapshot itself. None if there is no checkpoint or the log no longer holds the gap."""
        g, cp = self._g, self.checkpoint
        if cp is None:
            return None
        rp = cp.position
        if rp.epoch != g.epoch or not g.topic.can_replay(rp.offset, rp.streams,
                                                         external=cp.accept_any):
            return None
        out: list[Says] = []
        for m in g.topic.replay(rp.offset):
            if m.offset > t.offset:
                break
            if not includes(rp.offset, rp.streams, m.offset, m.stream, m.seq) and (
                    m.from_member or cp.accept_any) and (
                    not m.atomic or g.topic.outcome(m.offset) is not False):
                out.append(Send(conn, Deliver.of(m), replay=True))
        out.append(ServeCheckpoint(conn, g.name, t.id, t.offset, cp, t.req))
        return out

    def state_chunk(self, member: MemberId, conn: ConnId, f: StateChunk,
                    now: float) -> list[Action]:
        g = self._g
        r = self.relay.chunk(member, f.transfer, f.index, len(f.data), f.last, now)
        joiner = g.slots.get(r.transfer.joiner) if r.transfer is not None else None
        to_joiner = joiner.conn if joiner is not None else None
        if not isinstance(r, Forward):
            out: list[Action] = [Send(conn, Error(ErrorCode(r.code), f"{r.why} in {g.name}"))]
            if r.transfer is not None and to_joiner is not None:
                out.append(Send(to_joiner, Error(ErrorCode(r.code), r.why, r.transfer.req)))
            return out
        t = r.transfer
        out = []
        if to_joiner is not None:
            out.append(Send(to_joiner, StateChunkOut(
                g.name, t.id, f.index, f.last, f.data, f.sha256, f.streams, t.offset)))
        if r.done:
            g.log(out, "state.transfer", now, member=t.joiner, bytes=t.bytes,
                  duration_ms=round((now - t.started) * 1000, 3), source=t.donor)
        return out

    # -- checkpoints -----------------------------------------------------------------------------

    def checkpoint_chunk(self, member: MemberId, conn: ConnId, f: CheckpointChunk,
                         now: float) -> list[Action]:
        """Take a member's checkpoint in, chunk by chunk, into storage (staged until the last
        chunk checks out; the group's current checkpoint is untouched until then)."""
        g = self._g
        out: list[Action] = []
        slot = g.slots.get(member)
        if slot is None or slot.conn != conn:
            out.append(Send(conn, Error(ErrorCode.NOT_MEMBER,
                                        f"only members of {g.name} send its checkpoint", f.req)))
            return out
        replaced, up = self.uploads.chunk(member, f.req, f.index, len(f.data))
        if replaced is not None:  # a new upload replaces an unfinished one
            out.append(DiscardCheckpoint(g.name, replaced.id))
        if isinstance(up, BadChunk):
            if up.dropped is not None:
                out.append(DiscardCheckpoint(g.name, up.dropped.id))
            out.append(Send(conn, Error(ErrorCode(up.code), up.why, f.req)))
            return out
        out.append(StoreCheckpointChunk(g.name, up.id, f.index, f.data))
        if not f.last:
            return out
        problem = self._check_position(f.position) if f.sha256 else "the last chunk has no sha256"
        if problem is not None:
            self.drop_upload(out, member)
            out.append(Send(conn, Error(ErrorCode.BAD_CHECKPOINT, problem, f.req)))
            return out
        self.uploads.finish(member)
        assert f.position is not None and f.sha256 is not None
        cp = Checkpoint(up.id, member, f.position, slot.accept_from is AcceptFrom.ANY, up.bytes,
                        up.next_index, f.sha256, now)
        out.append(CommitCheckpoint(g.name, cp, conn, f.req))
        return out

    def _check_position(self, rp: ResumePoint | None) -> str | None:
        """A checkpoint's position must name messages this log has had (never a wrong state)."""
        g = self._g
        if rp is None:
            return "the last chunk has no position"
        if rp.epoch != g.epoch:
            return f"log epoch is {g.epoch}, not {rp.epoch}"
        if rp.offset > g.topic.head:
            return f"offset {rp.offset} is past the head {g.topic.head}"
        for stream, seq in rp.streams.items():
            if not 0 <= seq <= g.topic.seq(stream):
                return f"{stream} has no seq {seq}"
        return None

    def committed(self, cp: Checkpoint, conn: ConnId, req: Req, now: float) -> list[Action]:
        """Storage holds `cp` and checked its bytes: it is the group's checkpoint from now on
        (storage commits in the order the core asked, so the last one committed is the latest)."""
        g = self._g
        out: list[Action] = []
        self.checkpoint = cp
        out.append(Send(conn, CheckpointStored(req, g.name, cp.position.offset, cp.bytes)))
        g.log(out, "checkpoint.stored", now, member=cp.member, bytes=cp.bytes,
              offset=cp.position.offset)
        return out

    def drop_upload(self, out: list[Action], member: MemberId) -> None:
        up = self.uploads.drop(member)
        if up is not None:
            out.append(DiscardCheckpoint(self._g.name, up.id))
