"""Outstanding probe events with a deadline each, settled exactly once (sans-I/O: `now` is a
parameter, so the tests drive time by hand).

Why a ledger: an SLI is a ratio of good events to all events, and a probe event whose answer never
comes (a publish the server never acknowledges, a message the receiver never gets) must still be
counted, as bad, or an outage would make the SLI look *better* (fewer events, none bad). So every
event is opened with its start time and ends in exactly one of three ways:
- `settle()` before its deadline: the caller counts it good (or bad, by the elapsed time);
- `expire()` past its deadline: counted bad, and forgotten;
- `open()` when the ledger is full: the oldest is evicted and counted bad (G14's rule for the
  prober itself: memory is bounded by `bound`, never by how long an outage lasts).

A settle that comes after the event was expired or evicted finds nothing (`None`): it was already
counted, and is never counted twice.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["Ledger", "Settled"]


@dataclass(frozen=True, slots=True)
class Settled:
    """An event settled in time: its `path` (what the caller tagged it with) and `elapsed`."""

    path: str
    elapsed: float


class Ledger:
    def __init__(self, deadline: float, bound: int) -> None:
        assert deadline > 0 and bound > 0
        self.deadline = deadline
        self.bound = bound
        #: key -> (path, opened at); in the order opened, so the oldest is first (`now` only
        #: grows: callers pass a monotonic clock)
        self._open: OrderedDict[int, tuple[str, float]] = OrderedDict()
        self._last = float("-inf")

    def __len__(self) -> int:
        return len(self._open)

    def __contains__(self, key: int) -> bool:
        return key in self._open

    def outstanding(self) -> list[int]:
        """The outstanding events' keys, oldest first (a copy: settle while iterating)."""
        return list(self._open)

    def open(self, key: int, path: str, now: float) -> list[str]:
        """Start event `key`; returns the paths of the events evicted to make room (bad)."""
        assert key not in self._open, f"event {key} opened twice"
        assert now >= self._last, "the ledger's clock went backwards"
        self._last = now
        evicted: list[str] = []
        while len(self._open) >= self.bound:
            evicted.append(self._open.popitem(last=False)[1][0])
        self._open[key] = (path, now)
        return evicted

    def settle(self, key: int, now: float) -> Settled | None:
        """End event `key` now: how long it took, or None if it is not outstanding (already
        counted: expired, evicted, settled, or dropped)."""
        entry = self._open.pop(key, None)
        if entry is None:
            return None
        return Settled(entry[0], max(0.0, now - entry[1]))

    def drop(self, key: int) -> bool:
        """Forget event `key` without counting it (it is not an event of this SLI after all)."""
        return self._open.pop(key, None) is not None

    def expire(self, now: float) -> list[str]:
        """The paths of the events past their deadline at `now`, forgotten (bad)."""
        late: list[str] = []
        while self._open:
            key = next(iter(self._open))
            path, opened = self._open[key]
            if now - opened <= self.deadline:
                break
            del self._open[key]
            late.append(path)
        return late

    def clear(self) -> list[str]:
        """Every outstanding event's path, forgotten (the probe that owned them stopped)."""
        paths = [p for p, _ in self._open.values()]
        self._open.clear()
        return paths
