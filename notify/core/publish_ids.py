"""One sender's publish ids in one group: a retried id is never delivered twice (DESIGN §3).

Theory of operation. The ids a sender published last (at most the topic's
`idempotency_window`, oldest first) map to the offsets they were accepted at. While the group
is active they sit in an `OrderedDict`: O(1) to look up, add, retract (an append that failed
gives its ids back) and forget the oldest. That costs about 140 bytes an id, 1.4 MB for a
sender's 10,000, in every loaded group, which is most of what a quiet group holds once its
window cooled (`Topic.cool`). So cooling also *freezes* the ids the log holds (offset at most
`durable`): they move into one sorted table, about 50 bytes an id, searched by bisection:

- `_hashes`: each id's `hash()` (64 bits, this process's), sorted; equal hashes are adjacent;
- `_offsets`: the offset of each, in the same order;
- `_text`, `_starts`: the ids' UTF-8 bytes end to end, and where each begins (`_starts` has
  one more entry, the end), so a hash match is confirmed against the exact id: the table
  never takes a new id for a retry.

Every frozen id is older than every id still in the `OrderedDict` (only a prefix of the
accepted messages is durable, and nothing is frozen while newer ids wait), so the window's
bound drops the frozen table whole once the `OrderedDict` alone holds `window` ids: keeping
more than the last `window` ids is never wrong, keeping fewer would be. Frozen ids are never
retracted: only what the log does not hold yet can be.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import OrderedDict
from itertools import accumulate, islice


class SenderIds:
    __slots__ = ("_hashes", "_offsets", "_starts", "_text", "hot")

    def __init__(self) -> None:
        #: the ids not frozen, oldest first
        self.hot: OrderedDict[str, int] = OrderedDict()
        self._hashes = array("q")
        self._offsets = array("q")
        self._starts = array("I", (0,))
        self._text = b""

    def get(self, publish_id: str) -> int | None:
        offset = self.hot.get(publish_id)
        if offset is not None or not self._offsets:
            return offset
        return self._frozen(publish_id)

    def add(self, publish_id: str, offset: int, window: int) -> None:
        hot = self.hot
        hot[publish_id] = offset
        if len(hot) >= window and self._offsets:  # the newest `window` ids are all hot now
            self._drop_frozen()
        if len(hot) > window:
            hot.popitem(last=False)

    def retract(self, publish_id: str) -> None:
        self.hot.pop(publish_id, None)

    def freeze(self, durable: int) -> None:
        """Move the ids at offsets up to `durable` (the log holds them) into the frozen table."""
        hot = self.hot
        moving = [(p, o) for p, o in hot.items() if o <= durable]  # a prefix: offset order
        if not moving:
            return
        # a new dict: a dict emptied by deletes keeps its size
        self.hot = OrderedDict(islice(hot.items(), len(moving), None))
        text, starts = self._text, self._starts
        entries = [(h, o, text[starts[i]:starts[i + 1]])
                   for i, (h, o) in enumerate(zip(self._hashes, self._offsets, strict=True))]
        entries += [(hash(p), o, p.encode()) for p, o in moving]
        entries.sort(key=lambda e: e[0])
        self._hashes = array("q", [e[0] for e in entries])
        self._offsets = array("q", [e[1] for e in entries])
        self._starts = array("I", accumulate((len(e[2]) for e in entries), initial=0))
        self._text = b"".join(e[2] for e in entries)

    def _frozen(self, publish_id: str) -> int | None:
        h, hashes = hash(publish_id), self._hashes
        i = bisect_left(hashes, h)
        if i == len(hashes) or hashes[i] != h:
            return None
        want, text, starts = publish_id.encode(), self._text, self._starts
        while i < len(hashes) and hashes[i] == h:
            if text[starts[i]:starts[i + 1]] == want:
                return self._offsets[i]
            i += 1
        return None

    def _drop_frozen(self) -> None:
        self._hashes, self._offsets = array("q"), array("q")
        self._starts, self._text = array("I", (0,)), b""
