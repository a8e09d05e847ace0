"""The earliest deadline among many groups, without asking each of them on every timer turn.

The hub used to keep the set of groups that had a deadline and, on every turn of the host's
timer, ask each of them for it twice (once to tick the due ones, once for the next wake-up). A
group stays armed for ten minutes after a member leaves (its departed ids), so a busy server
holds thousands of armed groups, and each turn cost time in proportion to all of them, with
every other frame waiting behind it (issue 34: 3,000 armed groups, 1.16 ms per wake-up asked).

A group's deadline is a pure function of its state, and its state changes only in a call the
hub makes to it. So the hub `touch`es a group at every call (before it: a call that raises may
have changed it all the same), and a touched group is asked again only when the hub next needs
the earliest deadline (`settle`): a turn costs the groups touched since the last one, plus a
heap operation per deadline that moved.

The heap is lazy: a deadline that moved leaves its old entry behind, and an entry counts only
while it matches `_due` (the group's deadline as last asked). Stale entries leave when they reach
the top, and the heap is rebuilt from `_due` when they outnumber the live ones, so its size stays
in proportion to the groups that have a deadline.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

#: stale entries tolerated beyond the live ones before the heap is rebuilt from `_due`
SLACK = 64


class Deadlines:
    __slots__ = ("_due", "_heap", "_touched")

    def __init__(self) -> None:
        #: the groups that have a deadline -> that deadline, as last asked
        self._due: dict[str, float] = {}
        #: (deadline, group), some of them stale: see the module's docstring
        self._heap: list[tuple[float, str]] = []
        #: groups called since the last `settle`: their deadline may have moved either way
        self._touched: set[str] = set()

    def __len__(self) -> int:
        """How many groups have a deadline (as of the last `settle`)."""
        return len(self._due)

    def touch(self, group: str) -> None:
        """`group`'s state may have changed: ask its deadline again at the next `settle`."""
        self._touched.add(group)

    def forget(self, group: str) -> None:
        """`group` left memory: it has no deadline here any more."""
        self._touched.discard(group)
        self._due.pop(group, None)

    def settle(self, deadline_of: Callable[[str], float | None]) -> None:
        """Ask every touched group its deadline (None: it has none, or is gone)."""
        due, heap = self._due, self._heap
        if self._touched:
            for group in self._touched:
                d = deadline_of(group)
                if d is None:
                    due.pop(group, None)
                elif due.get(group) != d:
                    due[group] = d
                    heapq.heappush(heap, (d, group))
            self._touched.clear()
        if len(heap) > 2 * len(due) + SLACK:
            self._heap = heap = [(d, group) for group, d in due.items()]
            heapq.heapify(heap)
        while heap and due.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)

    def earliest(self) -> float | None:
        """The earliest deadline, as of the last `settle`."""
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[str]:
        """The groups whose deadline is `now` or earlier, in name order (the order the hub
        ticks them in, the same on every host and in every replay). Each is touched, so
        asked again at the next `settle`: after its tick, or, if a tick before it raised
        and it was never ticked, to be found due again."""
        due, heap = self._due, self._heap
        names: list[str] = []
        while heap and heap[0][0] <= now:
            d, group = heapq.heappop(heap)
            if due.get(group) == d:
                del due[group]
                names.append(group)
        self._touched.update(names)
        while heap and due.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        names.sort()
        return names
