"""The server's sans-I/O core: sessions, members and their groups.

Theory of operation. The adapter numbers each WebSocket connection (`ConnId`) and feeds the hub
what happens on it: `opened`, each validated client frame (`handle`), `closed`; and the clock
(`tick`). The hub answers with actions. A connection becomes a *session* with `hello`; a session
is one incarnation of a member (DESIGN §4: a member is `(member id, incarnation)`). A `hello`
that presents the session token of a live or SUSPECT session resumes it on the new connection;
a `hello` for a member id that already has a session, without its token, is a new incarnation:
the old one is removed from its groups at once and its connection closed, rather than waiting
for its timeouts. Group frames are routed to their `Group`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from notify.core.actions import Action, Close, ConnId, Error, LogEvent, Rejected, Send, Welcome
from notify.core.config import CoreConfig
from notify.core.errors import CloseCode, ErrorCode, RejectCode
from notify.core.events import Ack, ClientFrame, FlushOk, Hello, Join, Leave, Publish
from notify.core.group import Group
from notify.core.view import MemberId

PROTOCOL_VERSION = 1
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@-]*")


@dataclass(slots=True)
class Session:
    token: str
    member: MemberId
    conn: ConnId | None
    groups: set[str] = field(default_factory=set)
    #: when the session may be forgotten once disconnected (it can no longer resume anything)
    expires: float | None = None


class Hub:
    def __init__(self, config: CoreConfig, *, new_token: Callable[[], str], epoch: int) -> None:
        self.config = config
        self.epoch = epoch
        self.groups: dict[str, Group] = {}
        self._new_token = new_token
        self._conns: dict[ConnId, Session | None] = {}
        self._sessions: dict[str, Session] = {}
        self._members: dict[MemberId, Session] = {}
        self._armed: set[str] = set()
        #: sessions without a connection, the only ones that can expire
        self._disconnected: dict[str, Session] = {}

    def restore(self, group: Group) -> None:
        """Adopt a group brought back from storage (before any connection is served)."""
        self.groups[group.name] = group

    # -- connections -----------------------------------------------------------------------------

    def opened(self, conn: ConnId, now: float) -> list[Action]:
        self._conns[conn] = None
        return []

    def closed(self, conn: ConnId, now: float, code: int = 1006, reason: str = "") -> list[Action]:
        session = self._conns.pop(conn, None)
        out: list[Action] = []
        if session is None or session.conn != conn:
            return out
        session.conn = None
        # Kept long enough to resume, and to replay whatever a flush was waiting for.
        t = self.config.timeouts
        session.expires = now + t.suspect_timeout + t.flush_timeout
        self._disconnected[session.token] = session
        if self.config.event_log:
            out.append(LogEvent("conn.close", now, {"member": session.member,
                                                    "session": session.token, "code": code,
                                                    "reason": reason}))
        for name in sorted(session.groups):
            out.extend(self._group_call(name, lambda g: g.disconnected(session.member, now)))
        return out

    # -- frames ----------------------------------------------------------------------------------

    def handle(self, conn: ConnId, frame: ClientFrame, now: float) -> list[Action]:
        session = self._conns.get(conn)
        if isinstance(frame, Hello):
            if session is not None:
                return [Send(conn, Error(ErrorCode.ALREADY_HELLO, "hello was already sent"))]
            return self._hello(conn, frame, now)
        if session is None:
            req = getattr(frame, "req", None)
            return [Send(conn, Error(ErrorCode.HELLO_REQUIRED, "send hello first", req))]
        member = session.member
        if isinstance(frame, Publish):
            g = self.groups.get(frame.group)
            if g is None:
                return [Send(conn, Rejected(frame.req, frame.id, RejectCode.NO_GROUP))]
            return self._group_call(frame.group, lambda g: g.publish(member, conn, frame, now))
        if isinstance(frame, Ack):
            return self._member_call(conn, frame.group, None,
                                     lambda g: g.ack(member, conn, frame.offsets, now))
        if isinstance(frame, FlushOk):
            return self._member_call(conn, frame.group, None,
                                     lambda g: g.flush_ok(member, conn, frame.view, now))
        if isinstance(frame, Join):
            return self._join(conn, session, frame, now)
        assert isinstance(frame, Leave)
        out = self._member_call(conn, frame.group, frame.req,
                                lambda g: g.leave(member, conn, frame.req, now))
        return out

    def _hello(self, conn: ConnId, hello: Hello, now: float) -> list[Action]:
        if hello.protocol != PROTOCOL_VERSION:
            return [Send(conn, Error(ErrorCode.PROTOCOL_VERSION,
                                     f"server speaks protocol {PROTOCOL_VERSION}"))]
        out: list[Action] = []
        session = self._sessions.get(hello.resume_session) if hello.resume_session else None
        if session is not None and hello.member not in (None, session.member):
            session = None  # a token for another member resumes nothing
        resumed = session is not None
        if session is not None:
            if session.conn is not None:  # the old connection is not known dead yet
                out.append(Close(session.conn, CloseCode.REPLACED, "resumed elsewhere"))
                self._conns.pop(session.conn, None)
                session.conn = None
                # Its groups must stop sending to the dead connection and start the suspect
                # clock: a group it does not resume (join with `resume`) removes it in time.
                member = session.member
                for name in sorted(session.groups):
                    out.extend(self._group_call(name, lambda g: g.disconnected(member, now)))
            session.conn, session.expires = conn, None
            self._disconnected.pop(session.token, None)
        else:
            if not hello.member or not _NAME.fullmatch(hello.member) or \
                    len(hello.member) > self.config.limits.max_group_name:
                return [Send(conn, Error(ErrorCode.BAD_FRAME,
                                         "hello needs a member id: letters, digits, _.:/@-"))]
            old = self._members.get(hello.member)
            if old is not None:
                out.extend(self._retire(old, "new_incarnation", now))
            session = Session(self._new_token(), hello.member, conn)
            self._sessions[session.token] = session
            self._members[session.member] = session
        self._conns[conn] = session
        t = self.config.timeouts
        lim = self.config.limits
        out.append(Send(conn, Welcome(session.token, session.member,
                                      int(t.heartbeat_interval * 1000),
                                      {"max_frame_bytes": lim.max_frame_bytes,
                                       "max_outbound_frames": lim.max_outbound_frames,
                                       "max_groups": lim.max_groups_per_session,
                                       "suspect_timeout_ms": int(t.suspect_timeout * 1000)},
                                      resumed)))
        if self.config.event_log:
            out.append(LogEvent("conn.open", now, {"member": session.member,
                                                   "session": session.token,
                                                   "resumed": resumed}))
        return out

    def _retire(self, old: Session, reason: str, now: float) -> list[Action]:
        """Remove an older incarnation from everything at once (DESIGN §4)."""
        out: list[Action] = []
        if old.conn is not None:
            out.append(Close(old.conn, CloseCode.REPLACED, "a newer connection of this member"))
            self._conns.pop(old.conn, None)
            old.conn = None
        for name in sorted(old.groups):
            out.extend(self._group_call(name, lambda g: g.remove(old.member, reason, now)))
        self._sessions.pop(old.token, None)
        self._disconnected.pop(old.token, None)
        return out

    def _join(self, conn: ConnId, session: Session, join: Join, now: float) -> list[Action]:
        lim = self.config.limits
        if not _NAME.fullmatch(join.group) or len(join.group) > lim.max_group_name:
            return [Send(conn, Error(ErrorCode.BAD_GROUP_NAME,
                                     f"group names are 1-{lim.max_group_name} of A-Za-z0-9_.:/@-",
                                     join.req))]
        if len(session.groups) >= lim.max_groups_per_session:
            session.groups = {n for n in session.groups if self.groups[n].involves(session.member)}
        if join.group not in session.groups and len(session.groups) >= lim.max_groups_per_session:
            return [Send(conn, Error(ErrorCode.TOO_MANY_GROUPS,
                                     f"at most {lim.max_groups_per_session} groups", join.req))]
        if join.group not in self.groups:
            self.groups[join.group] = Group(join.group, self.config, epoch=self.epoch)
        session.groups.add(join.group)
        return self._group_call(join.group, lambda g: g.join(session.member, conn, join, now))

    def _member_call(self, conn: ConnId, name: str, req: str | None,
                     call: Callable[[Group], list[Action]]) -> list[Action]:
        if name not in self.groups:
            return [Send(conn, Error(ErrorCode.NO_GROUP, f"no group {name!r}", req))]
        return self._group_call(name, call)

    def _group_call(self, name: str, call: Callable[[Group], list[Action]]) -> list[Action]:
        g = self.groups[name]
        out = call(g)
        if g.next_deadline() is not None:
            self._armed.add(name)
        return out

    # -- time ------------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        deadlines = [d for n in self._armed if (d := self.groups[n].next_deadline()) is not None]
        return min(deadlines) if deadlines else None

    def tick(self, now: float) -> list[Action]:
        out: list[Action] = []
        for name in sorted(self._armed):
            g = self.groups[name]
            d = g.next_deadline()
            if d is None:
                self._armed.discard(name)
            elif d <= now:
                out.extend(self._group_call(name, lambda g: g.tick(now)))
        for token, s in list(self._disconnected.items()):
            if s.expires is not None and now >= s.expires:
                del self._disconnected[token]
                self._sessions.pop(token, None)
                if self._members.get(s.member) is s:
                    del self._members[s.member]
        return out

    # -- introspection (tests, metrics) ----------------------------------------------------------

    def session_of(self, conn: ConnId) -> Session | None:
        return self._conns.get(conn)
