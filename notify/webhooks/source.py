"""Where webhook events come from: the writes the log made durable, and, after a crash, the log.

Theory of operation. The server calls `NotifyServer.stored` hooks with every write its log has
made durable, before the frames held behind it leave (notify/core/writes.py): a `StoreView` (an
install) and an `Append` (accepted messages). `Source.of_write` turns one into events and the
cursor they advance (notify/webhooks/outbox.py); the service writes both to the outbox in one
transaction. So an event is derived only from what the log holds: a view that was never
stored (a failed write stops the server, G13) is never announced.

The durability window. A crash between the log's commit and the outbox's would lose the events
of that write, so at start, before the server listens, `catch_up` compares every group the log
knows (`list_groups`: its latest view and head) with its cursor and derives what is missing from
the log itself (`read_page`: the installs and messages after the cursor's offset), in order, one
outbox transaction per page. Events derived twice get the same ids (notify/webhooks/events.py).
Installs that retention pruned meanwhile are bridged by a set diff (`data.collapsed`); messages
it pruned are gone (logged).

The first start with webhooks on a log that has history records the log's state as the baseline
(no events for the past). After that, a group without a cursor is a new group: its events
start from the empty view.

In a cluster (notify/webhooks/jsoutbox.py) a node derives only the groups it owns: the catch-up
is asked for a `Part` (the shards this node just acquired), reads the cursors of those groups
only, and records a baseline per shard.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import structlog

from notify.core.actions import Append, Message, StoreView, ViewInstall, Write
from notify.storage.base import MAX_LIST, GroupInfo, MessageLog
from notify.webhooks.config import WebhookSettings
from notify.webhooks.events import Event, message_event, view_events
from notify.webhooks.outbox import Cursor, OutboxPort

log = structlog.get_logger("notify.webhooks")

#: one catch-up page: messages, and payload bytes
PAGE, PAGE_BYTES = 1000, 8 * 1024 * 1024


@dataclass(slots=True)
class Batch:
    """What one or more stored writes mean: rows per endpoint, and the cursors they advance."""

    rows: list[tuple[str, Event]] = field(default_factory=list)
    cursors: dict[str, Cursor] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)

    def extend(self, other: Batch) -> None:
        self.rows.extend(other.rows)
        self.cursors.update(other.cursors)
        for g, o in other.offsets.items():
            self.offsets[g] = max(o, self.offsets.get(g, 0))

    def __len__(self) -> int:
        return len(self.rows)


@dataclass(frozen=True, slots=True)
class Part:
    """Some shards of the log (cluster mode): the groups `of` maps into `shards`."""

    of: Callable[[str], int]
    shards: Collection[int]

    def has(self, group: str) -> bool:
        return self.of(group) in self.shards


class Source:
    """The configured endpoints' view of stored writes."""

    def __init__(self, hooks: list[WebhookSettings]) -> None:
        self.hooks = list(hooks)
        self._views = any(e != "message" for h in hooks for e in h.events)
        #: the endpoints that want some group's messages (none: an `Append` costs no glob)
        self._messages = [h for h in hooks if "message" in h.events]

    def wants_messages(self, group: str) -> bool:
        return any(h.wants_messages(group) for h in self._messages)

    def route(self, out: Batch, events: list[Event]) -> None:
        for e in events:
            for h in self.hooks:
                if h.wants(e.type, e.group):
                    out.rows.append((h.key, e))

    def of_write(self, write: Write, now: float) -> Batch | None:
        """The events of one stored write (None: nothing to record)."""
        if isinstance(write, StoreView):
            i = write.install
            out = Batch()
            if self._views:
                self.route(out, view_events(i, now))
            out.cursors[i.group] = _cursor(i)
            return out
        if not self._messages or not isinstance(write, Append) or not write.messages:
            return None
        # every message of an append is of one group: its endpoints are matched once
        keys = [h.key for h in self._messages if h.wants_messages(write.group)]
        if not keys:
            return None
        out = Batch()
        for m in write.messages:
            e = message_event(m)
            out.rows.extend((key, e) for key in keys)
        out.offsets[write.group] = write.messages[-1].offset
        return out

    # -- after a crash ---------------------------------------------------------------------------

    def catch_up(self, store: MessageLog, outbox: OutboxPort, now: float,
                 added: Callable[[list[str]], None], part: Part | None = None) -> int:
        """Derive what the log holds beyond the cursors (blocking: run off the loop, before
        the server listens; in a cluster, before the hook's writes of `part`'s groups are
        written). Returns the events derived; `added(endpoints)` after each outbox
        transaction."""
        groups = _all_groups(store)
        if part is None:
            if not outbox.baselined():
                base = [Cursor(i.group, 0, i.view, i.head, i.members) for i in groups]
                outbox.set_baseline(base)
                log.info("webhooks_baseline", groups=len(base))
                return 0
        else:
            groups = [i for i in groups if part.has(i.group)]
            fresh = {s for s in part.shards if not outbox.baselined(s)}
            for s in sorted(fresh):
                base = [Cursor(i.group, 0, i.view, i.head, i.members) for i in groups
                        if part.of(i.group) == s]
                outbox.set_baseline(base, s)
                log.info("webhooks_baseline", shard=s, groups=len(base))
            groups = [i for i in groups if part.of(i.group) not in fresh]
        cursors = outbox.cursors([i.group for i in groups] if part is not None else None)
        derived = 0
        for info in groups:
            c = cursors.get(info.group) or Cursor(info.group, 0, 0, 0, ())
            if info.view > c.view or (info.head > c.offset and self.wants_messages(info.group)):
                derived += self._group(store, outbox, info, c, now, added)
        if derived:
            log.warning("webhooks_caught_up", events=derived,
                        detail="events of writes stored before a crash or a takeover, "
                               "from the log")
        return derived

    def before(self, store: MessageLog, outbox: OutboxPort, write: Write, now: float,
               added: Callable[[list[str]], None]) -> int:
        """Cluster mode, at this node's first stored write to a group in its holding of the
        shard (its load fenced the group before it): derive what the log holds between the
        group's stored cursor and `write` (not `write` itself: the hook derived it), so that
        a write the previous owner stored after this node's catch-up of the shard, and never
        got into the outbox, is not passed by `write`'s cursor. Blocking."""
        if isinstance(write, StoreView):
            group, bound = write.group, (write.install.view, write.install.offset + 1)
        elif isinstance(write, Append) and write.messages:
            first = write.messages[0]
            group, bound = write.group, (first.view + 1, first.offset)
        else:
            return 0
        c = outbox.cursors([group]).get(group) or Cursor(group, 0, 0, 0, ())
        return self._group(store, outbox, GroupInfo(group, 0, (), 0), c, now, added, bound)

    def _group(self, store: MessageLog, outbox: OutboxPort, info: GroupInfo, c: Cursor,
               now: float, added: Callable[[list[str]], None],
               bound: tuple[int, int] | None = None) -> int:
        """`bound`: (view, offset): only installs below that view and messages below that
        offset (`before`)."""
        msgs = self.wants_messages(info.group)
        views, offsets = bound if bound is not None else (1 << 62, 1 << 62)
        derived, after = 0, c.offset
        if after >= offsets - 1 and c.view >= views - 1:
            return 0
        while True:
            page = store.read_page(info.group, after, PAGE, PAGE_BYTES)
            if page is None:
                break
            if msgs and page.first > after + 1:
                log.error("webhooks_messages_pruned", group=info.group,
                          lost=page.first - after - 1)
            items: list[tuple[int, int, Message | ViewInstall]] = [
                (m.offset, 0, m) for m in page.messages
                if msgs and c.offset < m.offset < offsets]
            items += [(i.offset, 1, i) for i in page.installs if c.view < i.view < views]
            items.sort(key=lambda x: (x[0], x[1], x[2].view if isinstance(x[2], ViewInstall)
                                      else 0))
            out = Batch()
            for _, _, item in items:
                if isinstance(item, Message):
                    self.route(out, [message_event(item)])
                    c = Cursor(c.group, c.epoch, c.view, item.offset, c.members)
                else:
                    gap = None if item.view == c.view + 1 else c.members
                    self.route(out, view_events(item, now, previous=gap))
                    c = _cursor(item)
            c = Cursor(c.group, c.epoch, c.view, max(c.offset, min(page.end, offsets - 1)),
                       c.members)
            out.cursors[c.group] = c
            added(outbox.add(out.rows, list(out.cursors.values()), {}, now))
            derived += len(out)
            if page.end >= page.head or page.end <= after or page.end >= offsets - 1:
                break
            after = page.end
        if info.view > c.view:  # installs the pages did not hold (pruned): the latest one
            last = ViewInstall(info.group, info.view, info.members, (), (), c.epoch, info.head)
            out = Batch()
            self.route(out, view_events(last, now, previous=c.members))
            c = Cursor(c.group, c.epoch, info.view, max(c.offset, info.head), info.members)
            added(outbox.add(out.rows, [c], {}, now))
            derived += len(out)
        return derived


def _cursor(i: ViewInstall) -> Cursor:
    return Cursor(i.group, i.epoch, i.view, i.offset, tuple(i.members))


def _all_groups(store: MessageLog) -> list[GroupInfo]:
    out: list[GroupInfo] = []
    after = ""
    while True:
        page = store.list_groups("", after, MAX_LIST)
        out.extend(page)
        if len(page) < MAX_LIST:
            return out
        after = page[-1].group


__all__ = ["Batch", "Part", "Source"]
