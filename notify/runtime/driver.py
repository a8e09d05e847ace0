"""The one driver of the core, shared by every host.

Every rule lives in `notify.core`: when a frame may leave (after the write it depends on, see
notify/core/writes.py), who gets it, when to stop. The driver does what is left, once, for every
host (the asyncio server, the cluster, the simulator, the Spark replay), so that a host adds
I/O and never a rule, and the simulator and the replay run exactly what the server runs:

- **Actions.** Serialise each frame once (one `view_install` or `deliver` object goes to many
  members), hand bytes to the host's `Transport`, writes to its `Store`, events, checkpoints
  and `Halt` to its `Observer`; nothing more is done once halted (G13).
- **Close, then closed.** A `Close` goes to the transport, and the hub hears `closed` for that
  connection right behind it: a host never has to report back a close the core asked for
  (it may: the hub ignores a connection it no longer knows).
- **Write answers.** Storage may answer inside `write` (the simulator), on the loop's next turn
  (the memory log) or later (SQLite's writer thread); an answer that comes while actions are
  being applied is queued behind them, so the hub is never re-entered. An answer is for the
  group object that issued the write: a group that left memory and came back meanwhile never
  takes an old write's answer for one of its own tickets.
- **Fault-in (G14).** A `join`, `publish` or `history` for a group that is not in memory asks
  the store to `fetch` it, and the driver holds that group's frames, and every later frame of their
  connections (a connection's frames are handled in the order it sent them), until the store
  answers or the load deadline passes (`write_timeout`: then they are refused `unavailable`,
  as when the log cannot be read, and a late answer is ignored). At most `MAX_HELD` frames
  wait for one load (G14): a connection that sends more is closed (it resumes, and resends).
  A host that can pause reading (the server) stops reading a connection while `holds(conn)`.
- **Fences.** A write answered `Fenced` means another node owns the group now, or the log
  cannot say whether the write is stored (so it must not be retracted): the group
  is dropped here (its members are told to reconnect, and resume at the owner) and the store
  forgets it, instead of failing the write. `drop_groups` does the same for a shard this node
  lost.
- **History.** A `ReadHistory` (a member's `history` request) asks the store for one page,
  off the event loop, and answers the page, trimmed to what the group allowed (`before`, the
  member's `accept_from`), as one `history_page`. One read at a time per connection and group
  (G14: a session is in at most `max_groups_per_session` groups): a request while that read is
  under way is refused `unavailable`.
- **Time.** `next_wakeup()` is the one deadline every host waits for, exactly (a host may wake
  earlier, never later): the hub's timers and the loads'. `tick()` then does what is due.
- **Containment (G12, G13).** An exception in the core while handling a frame answers that
  frame `internal` and goes on; one in applying an action loses that action only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from notify.core import Action, Close, CloseCode, Fanout, Halt, Hub, LogEvent, Send, Write
from notify.core.actions import (
    Deliver,
    Error,
    HistoryPage,
    ReadHistory,
    Rejected,
    StoreView,
    Welcome,
)
from notify.core.auth import Identity
from notify.core.errors import ErrorCode
from notify.core.events import ClientFrame, Hello, History, Join, Publish
from notify.core.group import Group
from notify.runtime.frames import BATCH_BYTES, BATCH_FRAMES, batch, dumps, packed, runs
from notify.runtime.ports import Done, Fenced, Observer, Page, Restorable, Store, Transport
from notify.runtime.stats import DriverStats, bump

log = structlog.get_logger("notify.runtime")

#: what members of a group that left this node are told (they reconnect, and resume there)
MOVED = "the group moved to another node; reconnect"

#: frames that may wait for one group's load from the log
MAX_HELD = 10_000

#: frames that bring their group back from the log when it is not in memory (a `history` of
#: a member whose group left memory, or moved here, since its resume)
_LOADS = (Join, Publish, History)


@dataclass(frozen=True, slots=True)
class _Closed:
    """A connection's close, held in order behind its frames while they wait for a load."""

    code: int
    reason: str


@dataclass(eq=False, slots=True)
class _Load:
    """One group being fetched from the log, and what waits for it."""

    group: str
    deadline: float
    waiting: list[tuple[int, ClientFrame | _Closed]] = field(default_factory=list)


class Driver:
    __slots__ = ("_clock", "_loads", "_observer", "_queue", "_reading", "_running", "_store",
                 "_transport", "_waiting", "halted", "hub", "stats")

    def __init__(self, hub: Hub, *, transport: Transport, store: Store, observer: Observer,
                 clock: Callable[[], float], stats: DriverStats | None = None) -> None:
        self.hub = hub
        self._transport, self._store, self._observer = transport, store, observer
        self._clock = clock
        self.stats = stats if stats is not None else DriverStats()
        self._queue: deque[Action] = deque()
        self._running = False
        #: the reason, once a `Halt` was applied: nothing more is done after it
        self.halted: str | None = None
        #: groups being fetched from the log (each entry leaves when answered or overdue)
        self._loads: dict[str, _Load] = {}
        #: connection -> the group whose load holds its frames (left with that load)
        self._waiting: dict[int, str] = {}
        #: (connection, group) with a history page being read (each leaves when answered)
        self._reading: set[tuple[int, str]] = set()

    # -- what hosts tell the driver ----------------------------------------------------------------

    def opened(self, conn: int) -> None:
        self.run(self.hub.opened(conn, self._clock()))

    def closed(self, conn: int, code: int = 1006, reason: str = "") -> None:
        """The host lost `conn` (the client went, or its outbox gave up on it)."""
        group = self._waiting.get(conn)
        if group is not None:  # after the frames it sent before (they wait for a load)
            self._loads[group].waiting.append((conn, _Closed(code, reason)))
            return
        self.run(self.hub.closed(conn, self._clock(), code, reason))

    def frame(self, conn: int, frame: ClientFrame) -> None:
        """A client frame, parsed (notify/wire.py), for this node's hub."""
        if self._waiting:
            group = self._waiting.get(conn)
            if group is not None:
                self._hold(self._loads[group], conn, frame)
                return
        if isinstance(frame, _LOADS) and frame.group not in self.hub.groups:
            self._fault_in(conn, frame)
        else:
            self._handle(conn, frame)

    def call(self, fn: Callable[[float], list[Action]], conn: int | None = None,
             what: str = "call") -> None:
        """Apply what `fn(now)` returns: a hub call a host makes itself (a verified `hello`,
        a token refresh). A failure is contained like a frame's (G12)."""
        try:
            actions = fn(self._clock())
        except Exception:
            self._internal(conn, None, what)
            return
        self.run(actions)

    def opened_remote(self, conn: int, hello: Hello, identity: Identity | None,
                      token: str | None, born: float | None = None) -> None:
        """A connection another node's edge holds (a cluster): its session as that edge
        presented it (`token`, so that a member resuming through any edge is found by every
        owner). The edge answered the hello itself: the welcome is not sent again."""
        now = self._clock()
        actions = [*self.hub.opened(conn, now),
                   *self.hub.hello(conn, hello, now, identity, token=token, born=born)]
        self.run([a for a in actions
                  if not (isinstance(a, Send) and isinstance(a.frame, Welcome))])

    def refresh(self, conn: int, identity: Identity) -> bool:
        """A new token for `conn`'s session; False if the hub refused it (it said why)."""
        actions = self.hub.refresh(conn, identity, self._clock())
        self.run(actions)
        return not actions

    def drop_groups(self, names: list[str], reason: str = MOVED) -> None:
        """`names` leave this node (its shard moved): their members' connections are closed
        with `reason`, and the store forgets them (a fencing log takes them over again if they
        come back). Writes still under way for them are answered to nobody."""
        names = [n for n in names if n in self.hub.groups]
        if not names:
            return
        self.stats.groups_dropped += len(names)
        log.info("groups_dropped", groups=len(names), reason=reason)
        self.run(self.hub.drop_groups(names, reason))
        for name in names:
            self._store.forget(name)

    def adopt(self, stored: Restorable) -> None:
        """A group the log holds, back in memory (a restart, a shard this node now owns)."""
        now = self._clock()
        self.hub.restore(stored.restore(self.hub.config, now), now)

    def tick(self) -> None:
        """Do what is due by now: the hub's deadlines, and loads that took too long."""
        now = self._clock()
        if self._loads:
            for load in [x for x in self._loads.values() if now >= x.deadline]:
                log.error("load_group_timeout", group=load.group)
                self._answered(load, None, "timed out")
        self.call(self.hub.tick, what="tick")
        if self.hub.evicted:  # idle groups left memory: the store forgets its tables of them
            for name in self.hub.take_evicted():
                self._store.forget(name)

    def next_wakeup(self) -> float | None:
        """When `tick` has something to do next (None: nothing is armed). A host ticks at this
        time exactly or earlier, and asks again after anything it fed the driver."""
        hub = self.hub.next_deadline()
        if not self._loads:  # (the usual case: asked after every call, so kept cheap)
            return hub
        earliest = min(x.deadline for x in self._loads.values())
        return earliest if hub is None else min(hub, earliest)

    def group_names(self) -> list[str]:
        """The groups in memory here now."""
        return list(self.hub.groups)

    @property
    def loading(self) -> int:
        """Groups being fetched now (bounded by the groups frames name)."""
        return len(self._loads)

    def holds(self, conn: int) -> bool:
        """Do `conn`'s frames wait for a load? (A host may stop reading it meanwhile.)"""
        return conn in self._waiting

    # -- frames and loads --------------------------------------------------------------------------

    def _handle(self, conn: int, frame: ClientFrame) -> None:
        try:
            actions = self.hub.handle(conn, frame, self._clock())
        except Exception:  # a bug of ours must not take the server down (G12)
            self._internal(conn, getattr(frame, "req", None), type(frame).__name__)
            return
        self.run(actions)

    def _internal(self, conn: int | None, req: object, what: str) -> None:
        self.stats.internal_errors += 1
        log.exception("core_error", conn=conn, frame=what)
        if conn is not None:
            self.run([Send(conn, Error(ErrorCode.INTERNAL, "internal error; frame dropped",
                                       req))])  # type: ignore[arg-type]

    def _fault_in(self, conn: int, frame: Join | Publish | History) -> None:
        """Hold `frame` until its group is back from the log: one fetch per group at a time
        (two loads racing would each adopt what they read; on JetStream each also appends a
        fence record, which would refuse a write the first one's group already started)."""
        load = self._loads.get(frame.group)
        fetch = load is None
        if load is None:
            load = self._loads[frame.group] = _Load(
                frame.group, self._clock() + self.hub.config.timeouts.write_timeout)
        self._hold(load, conn, frame)
        if fetch:  # (the store may answer at once, inside `fetch`)
            self._store.fetch(frame.group, lambda stored, error: self._answered(
                load, stored, error))

    def _hold(self, load: _Load, conn: int, item: ClientFrame | _Closed) -> None:
        if len(load.waiting) < MAX_HELD:
            load.waiting.append((conn, item))
            self._waiting[conn] = load.group
            return
        # bounded (G14): this connection goes, with what it had waiting; its client resumes
        # and sends again (publishes are idempotent by id)
        load.waiting = [(c, i) for c, i in load.waiting if c != conn]
        self._waiting.pop(conn, None)
        log.warning("too_many_held", group=load.group, conn=conn)
        self.run([Close(conn, CloseCode.SHUTDOWN, f"too many frames wait for group "
                                                  f"{load.group!r}; reconnect")])

    def _answered(self, load: _Load, stored: Restorable | None, error: str | None) -> None:
        """The store's answer to `load` (once; a late one, after the deadline, is ignored)."""
        if self._loads.get(load.group) is not load:
            return
        del self._loads[load.group]
        for conn, _item in load.waiting:
            if self._waiting.get(conn) == load.group:
                del self._waiting[conn]
        if error is None and stored is not None and load.group not in self.hub.groups:
            try:
                self.adopt(stored)
                self.stats.groups_loaded += 1
            except Exception:
                log.exception("restore_failed", group=load.group)
                error = "could not be restored"
        elif error is not None:
            log.error("load_group_failed", group=load.group, error=error)
        for conn, item in load.waiting:
            if conn in self._waiting:  # held again, by a later frame's load: keep the order
                self._hold(self._loads[self._waiting[conn]], conn, item)
            elif isinstance(item, _Closed):
                self.closed(conn, item.code, item.reason)
            elif not isinstance(item, _LOADS) or item.group != load.group:
                self.frame(conn, item)
            elif error is None:  # the group is in memory now, or new (the log never had it)
                self._handle(conn, item)
            else:
                self.run([Send(conn, Error(
                    ErrorCode.UNAVAILABLE, f"group {item.group!r} cannot be read from the "
                    "log right now; try again", item.req))])

    # -- actions -----------------------------------------------------------------------------------

    def run(self, actions: list[Action]) -> None:
        """Apply `actions` in order (and whatever storage completes meanwhile, after them)."""
        self._queue.extend(actions)
        if self._running:
            return
        self._running = True
        try:
            self._drain()
        finally:
            self._running = False

    def _drain(self) -> None:
        queue = self._queue
        stats = self.stats
        while queue:
            a = queue.popleft()
            if self.halted is not None:
                queue.clear()
                return
            try:
                if isinstance(a, Fanout):
                    self._fanout(a)
                elif isinstance(a, Send):
                    self._sends(a)
                elif isinstance(a, Write):
                    self._store.write(a, self._completion(a))
                elif isinstance(a, LogEvent):
                    self._observer.event(a)
                elif isinstance(a, Close):
                    self._close(a)
                elif isinstance(a, ReadHistory):
                    self._read(a)
                elif isinstance(a, Halt):
                    self.halted = a.reason
                    queue.clear()
                    log.critical("halt", reason=a.reason)
                    self._observer.halt(a.reason)
                    return
                else:
                    self._observer.checkpoint(a)
            except Exception:  # a bug of ours: the others' frames must still go (G13)
                stats.internal_errors += 1
                log.exception("action_failed", action=type(a).__name__)

    def _read(self, a: ReadHistory) -> None:
        if (a.conn, a.group) in self._reading:
            self._queue.append(Send(a.conn, Error(
                ErrorCode.UNAVAILABLE, f"a history page of {a.group!r} is being read for this "
                "connection; ask again once it is answered", a.req)))
            return
        self._reading.add((a.conn, a.group))
        self._store.read(a.group, a.after, a.limit, a.max_bytes,
                         lambda page, error: self._paged(a, page, error))

    def _paged(self, a: ReadHistory, page: Page | None, error: str | None) -> None:
        """The store's answer to `a` (on the loop: the store calls back there)."""
        self._reading.discard((a.conn, a.group))
        if error is not None:
            log.error("history_read_failed", group=a.group, error=error)
            self.run([Send(a.conn, Error(ErrorCode.UNAVAILABLE, f"the log of {a.group!r} "
                                         "cannot be read right now; try again", a.req))])
            return
        self.stats.history_pages += 1
        self.run([Send(a.conn, history_page(a, page))])

    def _close(self, a: Close) -> None:
        bump(self.stats.closes, int(a.code))
        self._transport.close(a.conn, a.code, a.reason,
                              drain=a.code != CloseCode.SLOW_CONSUMER)
        # what the host's connection handler would say once the socket is gone: the hub
        # hears it now, behind what is queued (frames to that connection are dropped)
        self._queue.extend(self.hub.closed(a.conn, self._clock(), int(a.code), a.reason))

    def _fanout(self, first: Fanout) -> None:
        """Fan out `first` and the fan-outs queued right behind it to the same members.

        A group stores what its publishers sent during one write as one batch, and its fan-outs
        come out of the core together, to the same recipients (`Group._append_intake`). They go
        to each member as one `batch` frame, pushed once: the per-member cost (the outbox, its
        bound, its wake-up) is paid once per run instead of once per message, which is most of
        the server's cost of a delivery. Each member still gets every message in offset order,
        and the publishers' `published` answers follow the run, in order."""
        queue, conns = self._queue, first.conns
        frames = [dumps(Deliver.of(first.message))]
        replies = [first.reply]
        size = len(frames[0])
        while queue and len(frames) < BATCH_FRAMES and size < BATCH_BYTES:
            a = queue[0]
            if type(a) is not Fanout or (a.conns is not conns and a.conns != conns):
                break
            queue.popleft()
            data = dumps(Deliver.of(a.message))
            frames.append(data)
            replies.append(a.reply)
            size += len(data)
        n = len(frames)
        run = frames[0] if n == 1 else batch(frames)
        push = self._transport.push
        for conn in conns:
            push(conn, run, frames=n)
        self.stats.deliveries += len(conns) * n
        answers: dict[int, list[tuple[bytes, bool]]] = {}
        for r in replies:
            if r is not None:
                answers.setdefault(r.conn, []).append((dumps(r.frame), False))
                self.stats.messages += 1
        self._push_each(answers)

    def _sends(self, first: Send) -> None:
        """`first` and the sends queued right behind it: each connection's frames of the run in
        as few pushes as the batch limits allow, in the order they were sent.

        The core sends one frame object to many members (a `confirm` of an atomic message, a
        `view_change`, an install), and a replay is a run of frames to one member: each frame
        is serialised once, and each member's outbox is pushed once per run, not once per
        frame. Order matters only per connection, and is kept."""
        queue, stats = self._queue, self.stats
        per: dict[int, list[tuple[bytes, bool]]] = {}
        last: object = None
        data = b""
        a = first
        while True:
            if a.frame is not last:
                try:
                    data = dumps(a.frame)
                except Exception:  # a bug of ours: this frame is lost, the others go (G13)
                    stats.internal_errors += 1
                    log.exception("action_failed", action="Send", frame=type(a.frame).__name__)
                    data = b""
                last = a.frame
                if isinstance(a.frame, Error):
                    stats.errors_out += 1
                    bump(stats.by_code, a.frame.code)
                elif isinstance(a.frame, Rejected):
                    bump(stats.rejected, a.frame.code)
            if data:
                per.setdefault(a.conn, []).append((data, a.replay))
            if not queue or type(queue[0]) is not Send:
                break
            a = queue.popleft()  # type: ignore[assignment]
        self._push_each(per)

    def _push_each(self, per: dict[int, list[tuple[bytes, bool]]]) -> None:
        """Push each connection its frames (serialised, with whether each is part of a replay),
        in order: a lone frame as it is, several as `batch` runs within the batch limits, a
        replay's frames apart from the others (they do not count against the bound). Members
        that get the same frames get the same bytes (a cluster link sends one copy per edge)."""
        push = self._transport.push
        shared: dict[tuple[int, ...], bytes] = {}
        for conn, frames in per.items():
            if len(frames) == 1:
                push(conn, frames[0][0], bounded=not frames[0][1])
                continue
            start = 0
            while start < len(frames):  # segments of the same kind (replay or not)
                replay = frames[start][1]
                end = start + 1
                while end < len(frames) and frames[end][1] == replay:
                    end += 1
                for run, n in runs([(d, 1) for d, _ in frames[start:end]]):
                    key = tuple(map(id, run))
                    data = shared.get(key)
                    if data is None:
                        data = shared[key] = packed(run)
                    push(conn, data, bounded=not replay, frames=n)
                start = end

    def _completion(self, w: Write) -> Done:
        group, ticket = w.group, w.ticket
        issuer: Group | None = self.hub.groups.get(group)

        def done(error: str | None) -> None:
            if self.halted is not None:
                return
            if self.hub.groups.get(group) is not issuer:
                # the group left memory (or this node) since: its tickets are not this one's
                log.info("stale_write_answer", group=group, ticket=ticket, error=error)
                return
            if isinstance(error, Fenced):  # another node owns it now (DESIGN §9)
                self.stats.fence_refusals += 1
                log.warning("fenced", group=group)
                self.drop_groups([group])
                return
            if error is not None and type(w) is StoreView and self.hub.config.shared_log:
                # A view the log refused (it is not stored: an unclear answer is `Fenced`).
                # On one node that stops the server (G13: a restart recovers from the log);
                # in a cluster the group alone stops here and is read again from the log,
                # which is that restart for one group (cluster review S6: one group's view
                # must not take every group of the node down).
                log.error("view_write_failed", group=group, ticket=ticket, error=error)
                self.drop_groups([group])
                return
            if error is not None:
                log.error("write_failed", group=group, ticket=ticket, error=error)
            self.run(self.hub.written(group, ticket, error, self._clock()))

        return done


__all__ = ["Driver"]


def history_page(a: ReadHistory, page: Page | None) -> HistoryPage:
    """The `history_page` answering `a` from what the log read: no message from `before` on
    (the group's bound), none a non-member sent unless the member accepts them (G6), and the
    installs and aborts of what it covers (`end`)."""
    if page is None:  # the log never had the group: nothing stored yet
        return HistoryPage(a.req, a.group, a.epoch, (), (), (), a.after, a.after + 1, 0)
    end = max(a.after, min(page.end, a.before - 1))
    messages = tuple(Deliver.of(m) for m in page.messages
                     if m.offset <= end and (m.from_member or a.accept_any))
    installs = tuple(i for i in page.installs if a.after <= i.offset <= end)
    aborted = tuple(sorted(o for o in page.aborted if a.after < o <= end))
    return HistoryPage(a.req, a.group, a.epoch, messages, installs, aborted, end, page.first,
                       page.head)
