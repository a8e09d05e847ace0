"""Catch-up from the log, client side (G8, issue 30): reading what a `catchup_log` left out.

A member that resumes or rejoins from a point older than the server's in-memory window gets
`catchup_log{after, before}` ahead of the replay: the messages after `after` and before
`before`, and the view installs among them, are in the log only, and the member reads them with
`history` requests, one page at a time. Everything else comes as usual meanwhile: the replay
from `before`, then live frames. The protocol acts on those at once (it ACKs atomic messages,
answers `flush_ok`, follows the view), so the member holds up nobody while it reads, but it
keeps their *events* for the application until the gap is read: the application sees every
message once, in log order per stream, with the installs it crossed in their place.

`Gap` is that reading, sans I/O: which page to ask for next, what a page hands the
application, and the position the member's knowledge is at meanwhile (a resume point taken
during the gap starts at its frontier, never past it: what was kept back for the application
is read again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from client_sdk.errors import ProtocolViolation
from client_sdk.events import GroupEvent, Message, Reset, ViewInstalled

Frame = dict[str, Any]

#: messages asked for per page (the server may answer fewer: its `history_page` limit)
PAGE = 1000
#: a page the server refused is asked again this many times; then the host reconnects
PAGE_RETRIES = 3


@dataclass(slots=True)
class Gap:
    group: str
    epoch: int
    #: the frontier: every message up to this offset has been handed to the application
    after: int
    before: int
    #: per stream, the last seq handed to the application (history's frontier)
    streams: dict[str, int]
    #: the last view installed, as the application has seen them
    view: int
    #: the events of what arrived behind the gap, kept for the application
    events: list[GroupEvent] = field(default_factory=list)
    #: per stream, the first seq that arrived behind the gap (the history must end before it)
    ahead: dict[str, int] = field(default_factory=dict)
    #: the highest `base` what arrived behind the gap would give (taken at the end)
    base: int = 0
    #: the `history` request under way, and how often the current page was asked for
    req: str = ""
    tries: int = 0
    #: the frontier jumped over offsets retention dropped (streams may skip seqs after it)
    holed: bool = False
    #: the members of `view`, once a page installed it (None: not read from the log)
    members: tuple[str, ...] | None = None
    #: the messages the pages have handed to the application (the `CaughtUp` kept behind the
    #: gap counts only the replay from memory: this is added to it)
    count: int = 0
    #: the messages held back (behind an atomic one) when the gap opened: received before
    #: it, they go to the application when released, ahead of the gap (each is later in its
    #: stream than anything the log can add, and of a view no later than the gap starts in),
    #: and stay held if the gap is abandoned (a lost connection)
    held_before: set[int] = field(default_factory=set)

    def request(self, req: str, accept_from: str) -> Frame:
        """The `history` frame for the next page (with the group's own `accept_from`)."""
        self.req = req
        self.tries += 1
        frame: Frame = {"type": "history", "req": req, "group": self.group, "after": self.after,
                        "before": self.before, "limit": PAGE}
        if accept_from != "members":
            frame["accept_from"] = accept_from
        return frame

    @property
    def done(self) -> bool:
        return self.after >= self.before - 1

    def page(self, f: Frame, events: list[GroupEvent]) -> None:
        """A `history_page` for this gap: its messages and installs go to `events` (for the
        application, now), in log order; aborted atomic ones are skipped. Moves the
        frontier to the page's `end`, or to the log's head when that is below `before`."""
        if f["epoch"] != self.epoch:
            raise ProtocolViolation(f"{self.group}: a history page of log {f['epoch']}, "
                               f"not {self.epoch}")
        first = f["first"]
        if first > self.after + 1 and not self.holed:
            # retention dropped what lay between (the server's view of it was older): the
            # application is told how far its knowledge jumps, as after a refused resume
            events.append(Reset(self.group, "offset_unavailable", self.epoch, self.after,
                                self.epoch, first - 1, first - self.after - 1))
            self.holed = True
        aborted = set(f["aborted"])
        installs = sorted(f["installs"], key=lambda i: i["view"])
        k = 0
        for m in f["messages"]:
            offset = m["offset"]
            while k < len(installs) and installs[k]["offset"] < offset:
                self._install(installs[k], events)
                k += 1
            self._message(m, offset in aborted, events)
        for i in installs[k:]:
            self._install(i, events)
        end = f["end"]
        if end > self.after:
            self.tries = 0  # it moved on (a page that does not counts as a refusal)
        self.after = max(self.after, end)
        if end >= f["head"]:  # the log ends here: nothing more to read before `before`
            self.after = max(self.after, self.before - 1)

    def _message(self, m: Frame, aborted: bool, events: list[GroupEvent]) -> None:
        stream, seq = m["stream"], m["seq"]
        had = self.streams.get(stream, 0)
        if seq <= had:
            return  # had already (its point covered this stream further; or held back)
        if had and seq != had + 1 and not self.holed:
            raise ProtocolViolation(f"{self.group}/{stream}: seq {seq} after {had} in the log")
        self.streams[stream] = seq
        if not aborted:
            self.count += 1
            events.append(Message(self.group, m["offset"], stream, seq, m["sender"], m["view"],
                                  m["atomic"], m.get("payload"), m["ts"]))

    def _install(self, i: Frame, events: list[GroupEvent]) -> None:
        if i["view"] <= self.view:
            return
        self.view, self.members = i["view"], tuple(i["members"])
        events.append(ViewInstalled(self.group, i["view"], tuple(i["members"]),
                                    tuple(i["joined"]), tuple(i["left"]), i["offset"]))

    def check_continuity(self) -> None:
        """At the end: each stream's history reaches exactly the first seq that came behind
        the gap (else a message was lost between them)."""
        for stream, first in self.ahead.items():
            had = self.streams.get(stream, 0)
            if had and first != had + 1 and not self.holed:
                raise ProtocolViolation(f"{self.group}/{stream}: the log ends at seq {had}, "
                                   f"the replay starts at {first}")
