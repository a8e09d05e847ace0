"""The server's side of state transfer (G9): who gives a joiner its snapshot, and the relay of
the snapshot's chunks. Pure bookkeeping, fed the candidates and the clock; the group in
notify/core/transfers.py turns its answers into frames.

Theory of operation. At an install with a joiner that wants state, the longest-standing member
that has the state (in the view before the install, connected, not itself waiting for a
snapshot) is asked for a snapshot taken right after its own copy of that install: the view
boundary. The donor's chunks are relayed to the joiner in order and counted against the size
limit. A donor that goes away, or sends nothing for `stall_timeout`, is replaced by the next
candidate under a new transfer id (the joiner drops a partial snapshot when chunks of another
transfer arrive); with nobody left, the group falls back to its stored checkpoint, or tells the
joiner that no state can be had. A joiner that goes away needs nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

MemberId = str


@dataclass(slots=True)
class Transfer:
    """A snapshot on its way from `donor` to `joiner`; the server only relays and counts."""

    id: str
    joiner: MemberId
    donor: MemberId
    #: the view boundary: the log offset the snapshot reflects
    offset: int
    started: float
    #: the joiner's join request (errors about its state carry it)
    req: str | int = ""
    attempt: int = 0
    next_index: int = 0
    bytes: int = 0
    #: when the donor last made progress
    progress: float = 0.0

    def again(self, now: float) -> Transfer:
        """The same joiner's transfer, to be asked of another donor."""
        base = self.id.rsplit(".", 1)[0]
        return Transfer(f"{base}.{self.attempt + 1}", self.joiner, "", self.offset, now, self.req,
                        self.attempt + 1)


@dataclass(frozen=True, slots=True)
class Ask:
    """Ask `transfer.donor` for a snapshot."""

    transfer: Transfer


@dataclass(frozen=True, slots=True)
class NoDonor:
    """Nobody can give `transfer.joiner` the state: serve the checkpoint, or say so."""

    transfer: Transfer


Decision = Ask | NoDonor


@dataclass(frozen=True, slots=True)
class Refused:
    """A chunk that is not relayed: `why` for its sender; `transfer` is set when the transfer
    ends with it (over the size limit: the joiner is told too)."""

    why: str
    code: str
    transfer: Transfer | None = None


@dataclass(frozen=True, slots=True)
class Forward:
    """Relay the chunk to the joiner; `done` once it was the last one."""

    transfer: Transfer
    done: bool


class Relay:
    __slots__ = ("_max_bytes", "_stall", "transfers")

    def __init__(self, *, max_bytes: int, stall_timeout: float) -> None:
        self._max_bytes = max_bytes
        self._stall = stall_timeout
        self.transfers: dict[str, Transfer] = {}

    def __len__(self) -> int:
        return len(self.transfers)

    def start(self, t: Transfer, candidates: Iterable[MemberId]) -> Decision:
        """Ask the first of `candidates` (in seniority order, connected, able to give the
        state) that is neither the joiner nor waiting for a snapshot itself."""
        waiting = {x.joiner for x in self.transfers.values()}
        donor = next((m for m in candidates if m != t.joiner and m not in waiting), None)
        if donor is None:
            self.transfers.pop(t.id, None)
            return NoDonor(t)
        t.donor, t.progress = donor, t.started
        self.transfers[t.id] = t
        return Ask(t)

    def lost(self, member: MemberId, now: float,
             candidates: Iterable[MemberId]) -> list[Decision]:
        """`member` went away: its transfers as a joiner end, those as a donor move on."""
        out: list[Decision] = []
        pool = list(candidates)
        for t in list(self.transfers.values()):
            if t.joiner == member:
                del self.transfers[t.id]
            elif t.donor == member:
                out.append(self._replace(t, now, pool))
        return out

    def stalled(self, now: float, candidates: Iterable[MemberId]) -> list[Decision]:
        """Donors that sent nothing for `stall_timeout` (e.g. their application stopped
        reading) are replaced."""
        pool = list(candidates)
        return [self._replace(t, now, pool) for t in list(self.transfers.values())
                if now >= t.progress + self._stall]  # the sum next_deadline gives

    def _replace(self, t: Transfer, now: float, candidates: list[MemberId]) -> Decision:
        del self.transfers[t.id]
        return self.start(t.again(now), (m for m in candidates if m != t.donor))

    def chunk(self, donor: MemberId, transfer: str, index: int, size: int, last: bool,
              now: float) -> Forward | Refused:
        t = self.transfers.get(transfer)
        if t is None or t.donor != donor:
            return Refused(f"no transfer {transfer!r} from you", "unknown_transfer")
        if index != t.next_index:
            return Refused(f"chunk {index} where {t.next_index} was expected", "bad_chunk")
        t.next_index += 1
        t.bytes += size
        t.progress = now
        if t.bytes > self._max_bytes:
            del self.transfers[t.id]
            return Refused(f"snapshot over {self._max_bytes} bytes", "state_too_large", t)
        if last:
            del self.transfers[t.id]
        return Forward(t, last)

    def next_deadline(self) -> float | None:
        if not self.transfers:
            return None
        return min(t.progress for t in self.transfers.values()) + self._stall


__all__ = ["Ask", "Decision", "Forward", "NoDonor", "Refused", "Relay", "Transfer"]
