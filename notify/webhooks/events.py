"""What a stored view install or message means for an app backend: the view diff, pure.

Theory of operation. Each install of a group's view (`ViewInstall`: version, members, who
joined, who left) becomes up to six kinds of events, in this order:

- `group.occupied`: the previous view was empty and this one is not;
- `member.left` / `member.arrived`: per instance (a member id `user#instance`), from the
  install's `left` and `joined` (a member in both was replaced by a new incarnation: it left and
  arrived);
- `user.left` / `user.arrived`: presence by user (notify/core/users.py): the first instance of
  a user in, the last one out;
- `group.vacated`: this view is empty and the previous one was not.

The previous members are known from the install alone (`members - joined + left`), so a
consecutive install needs no memory of the last one. Across a gap (installs that retention
pruned before a crash could be read back, notify/webhooks/source.py) the diff is by sets between
the last view notified and the next one known, and says so in `data.collapsed`.

An event's id (the `webhook-id`) is a digest of what it is about (group, log epoch, view,
type, member or user; a message's offset and publish id), so the same event derived twice
(once live, once again from the log after a crash) carries the same id, and a receiver dedupes
it by that id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from notify.core.actions import Message, ViewInstall
from notify.core.users import split_member, user_of


@dataclass(frozen=True, slots=True)
class Event:
    """One webhook event, for every endpoint that wants it."""

    #: the `webhook-id`: stable across retries, restarts and re-derivation
    id: str
    type: str
    group: str
    #: when it happened (Unix seconds): the body's `timestamp`
    ts: float
    data: dict[str, Any]

    def body(self) -> bytes:
        """The POST's body: `{"type", "timestamp", "data"}` (Standard Webhooks' layout)."""
        return orjson.dumps({"type": self.type, "timestamp": _iso(self.ts), "data": self.data})


def event_id(*parts: object) -> str:
    return "evt_" + hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:32]


def _iso(ts: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def previous_members(install: ViewInstall) -> tuple[str, ...]:
    """The members of the view before `install` (`members - joined + left`)."""
    joined = set(install.joined)
    before = [m for m in install.members if m not in joined or m in install.left]
    before += [m for m in install.left if m not in install.members]
    return tuple(before)


def view_events(install: ViewInstall, ts: float, *,
                previous: Sequence[str] | None = None) -> list[Event]:
    """The events of one install. `previous`: the members of the last view notified when it is
    not the one right before (a gap); None: the install's own `joined`/`left` say it exactly."""
    g, v, epoch = install.group, install.view, install.epoch
    collapsed = previous is not None
    if previous is None:
        before = previous_members(install)
        left, joined = list(install.left), list(install.joined)
    else:
        before = tuple(previous)
        now_set, before_set = set(install.members), set(before)
        left = [m for m in before if m not in now_set]
        joined = [m for m in install.members if m not in before_set]
    users_before, users_now = _users(before), _users(install.members)
    out: list[Event] = []

    def add(kind: str, subject: str, **data: Any) -> None:
        body = {"group": g, "view": v, **data}
        if collapsed:
            body["collapsed"] = True
        out.append(Event(event_id(g, epoch, v, kind, subject), kind, g, ts, body))

    if not before and install.members:
        add("group.occupied", "")
    for m in left:
        user, instance = split_member(m)
        add("member.left", m, member=m, user=user, instance=instance)
    for u in users_before:
        if u not in users_now:
            add("user.left", u, user=u)
    for m in joined:
        user, instance = split_member(m)
        add("member.arrived", m, member=m, user=user, instance=instance)
    for u in users_now:
        if u not in users_before:
            add("user.arrived", u, user=u)
    if before and not install.members:
        add("group.vacated", "")
    return out


def message_event(m: Message) -> Event:
    """A stored message, as the server API's history shows it (docs/api.md). Its id: the
    group, the offset, and the sender's publish id (a message carries no epoch; a log reset
    gives its offsets again, to other publishes)."""
    return Event(event_id(m.group, "message", m.offset, m.sender, m.id), "message", m.group,
                 m.ts,
                 {"group": m.group, "offset": m.offset, "id": m.id, "sender": m.sender,
                  "stream": m.stream, "seq": m.seq, "atomic": m.atomic, "payload": m.payload,
                  "time": m.ts})


def _users(members: Iterable[str]) -> dict[str, None]:
    """The users of `members`, in order of first appearance (a dict as an ordered set)."""
    return dict.fromkeys(user_of(m) for m in members)


__all__ = ["Event", "event_id", "message_event", "previous_members", "view_events"]
