"""The server's sans-I/O core: sessions, members and their groups.

Theory of operation. The adapter numbers each WebSocket connection (`ConnId`) and feeds the hub
what happens on it: `opened`, each validated client frame (`handle`), `closed`; and the clock
(`tick`). The hub answers with actions. A connection becomes a *session* with `hello`; a session
is one incarnation of a member (DESIGN §4: a member is `(member id, incarnation)`), and a member
is one client instance of a user (`user#instance`, notify/core/users.py: two tabs of one user
are two members). A `hello` that presents the session token of a live or SUSPECT session resumes
it on the new connection; one that presents a token this hub does not know starts a new session
under that token (a session keeps one token on every node, S11). A `hello` for a member id that
already has a session, without its token, is a *clash* (two connections claim one instance)
and the newer wins: the old session is removed from its groups at once and its connection
closed with 4002 (`REPLACED`), rather than waiting for its timeouts. The SDKs never reconnect
into the clash (they take a new instance, or close), so it settles within one view change. A
user has at most `max_instances_per_user` sessions. Group frames are routed to their `Group`.

Authentication happens in the adapter (it holds the keys and the clock): a verified token
reaches the hub as an `Identity` passed with `hello` (`hello(conn, frame, now, identity)`), and a
`refresh` as `refresh(conn, identity, now)`. With an identity the member id is the token's `sub`
and a `member` that names anyone else is refused; the session carries the identity's grants,
which `join` and `publish` consult, and its expiry, which `tick` enforces (close 4005). Without
one (development mode) the client names itself and may do everything.

A session's life is `SessionState`, moved only along `SESSION_TRANSITIONS` by `Hub._move`:
CONNECTED while it has a connection, DISCONNECTED (resumable, G7) until `expires`, then EXPIRED;
RETIRED at once when a new incarnation of its member says hello. The hub's dicts (by
connection, by token, by member, the DISCONNECTED ones) are indexes of those states, written
only by `_move` (and by `hello`, which indexes a new session and gives a resumed one the
edge's token). An open connection is in exactly one of three tables, its state: `_awaiting`
(opened, no successful hello yet: its hello deadline), `_conns` (its CONNECTED session) or
`_trusted` (the host's own publisher, `trust`); one that left them all is being closed.

Per-connection limits live here too because they need only `now`: a connection must say a
successful `hello` within `hello_timeout` (4006), and publishes draw on a token bucket
(`publish_rate`, `publish_burst`) whose refusal is `rejected{code: rate_limited}`.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial

from notify.core.actions import (
    Action,
    Close,
    ConnId,
    Error,
    Halt,
    LogEvent,
    Pong,
    Rejected,
    Send,
    Welcome,
)
from notify.core.auth import ALLOW_ALL, Grants, Identity, Perm
from notify.core.checkpoint import Checkpoint
from notify.core.config import MAX_BATCH_FRAMES, CoreConfig, Limits
from notify.core.deadlines import Deadlines
from notify.core.errors import CloseCode, ErrorCode, RejectCode
from notify.core.events import (
    Ack,
    CheckpointChunk,
    ClientFrame,
    FlushOk,
    Hello,
    History,
    Join,
    Leave,
    Ping,
    Publish,
    Req,
    StateChunk,
)
from notify.core.group import Group
from notify.core.membership import IllegalTransition, Reason
from notify.core.rate import TokenBucket
from notify.core.users import INSTANCE, SEPARATOR, is_trusted, member_id, user_of
from notify.core.view import MemberId

PROTOCOL_VERSION = 1
#: what a group name is (`valid_group_name`; the server API's OpenAPI document says it too)
GROUP_NAME = r"[A-Za-z0-9][A-Za-z0-9_.:/@-]*"
_NAME = re.compile(GROUP_NAME)


def valid_group_name(name: str, limits: Limits) -> bool:
    """A group name `join` accepts: 1 to `max_group_name` of A-Za-z0-9_.:/@-, starting with a
    letter or digit (the server API checks its path's names by the same rule)."""
    return _NAME.fullmatch(name) is not None and len(name) <= limits.max_group_name


#: how long the token of a session replaced in a clash is refused, and at most how many
RETIRED_MEMORY = 120.0
MAX_RETIRED = 100_000
#: a session token a new session may keep (`Hub._token_for`): what our tokens look like
_TOKEN = re.compile(r"[A-Za-z0-9_.-]{1,128}")


class SessionState(StrEnum):
    CONNECTED = "connected"  # on a live connection (`Session.conn`)
    DISCONNECTED = "disconnected"  # its connection was lost: resumable until `expires` (G7)
    RETIRED = "retired"  # a new incarnation of its member replaced it (DESIGN §4): forgotten
    EXPIRED = "expired"  # nobody resumed it in time: forgotten (G14)


class SessionEvent(StrEnum):
    DISCONNECT = "disconnect"  # its connection closed, or a resume on another one replaced it
    RESUME = "resume"  # a hello with its token, on a new connection (G7)
    RETIRE = "retire"  # a hello of its member without its token: a new incarnation
    EXPIRE = "expire"  # `expires` passed while it was DISCONNECTED


SESSION_TRANSITIONS: dict[SessionState, dict[SessionEvent, SessionState]] = {
    SessionState.CONNECTED: {SessionEvent.DISCONNECT: SessionState.DISCONNECTED,
                             SessionEvent.RETIRE: SessionState.RETIRED},
    SessionState.DISCONNECTED: {SessionEvent.RESUME: SessionState.CONNECTED,
                                SessionEvent.RETIRE: SessionState.RETIRED,
                                SessionEvent.EXPIRE: SessionState.EXPIRED},
    SessionState.RETIRED: {},
    SessionState.EXPIRED: {},
}


@dataclass(slots=True)
class Session:
    token: str
    #: `user#instance`, or `user` for a client that named no instance (notify/core/users.py)
    member: MemberId
    conn: ConnId | None
    user: str
    instance: str | None
    state: SessionState = SessionState.CONNECTED
    groups: set[str] = field(default_factory=set)
    #: when the session may be forgotten once disconnected (it can no longer resume anything)
    expires: float | None = None
    #: what the session's token allows (everything in development mode)
    grants: Grants = ALLOW_ALL
    #: when the session's token expires (None: no token, or no `exp`)
    token_expires: float | None = None
    #: when it was made, by the clock of the node that made it (in a cluster, the wall clock:
    #: an owner orders two incarnations of one member by it, `Hub.hello(born=)`)
    born: float = 0.0

    def on(self, event: SessionEvent) -> None:
        try:
            self.state = SESSION_TRANSITIONS[self.state][event]
        except KeyError:
            raise IllegalTransition(f"session {event.value} in {self.state.value}") from None


def _expel(g: Group, *, member: MemberId, now: float) -> list[Action]:
    return g.expel(member, Reason.REMOVED, now)


def _drop(g: Group, *, member: MemberId, now: float) -> list[Action]:
    return g.remove(member, Reason.DISCONNECTED, now)


@dataclass(frozen=True, slots=True)
class Removal:
    """What `Hub.remove` or `Hub.disconnect` did: the members it removed, the view that will
    not hold them (`remove`; 0 when nothing matched), and the actions to apply."""

    members: tuple[MemberId, ...]
    version: int
    actions: list[Action]


class Hub:
    def __init__(self, config: CoreConfig, *, new_token: Callable[[], str], epoch: int) -> None:
        self.config = config
        self.epoch = epoch
        self.groups: dict[str, Group] = {}
        self._new_token = new_token
        #: connections with a session (CONNECTED): its session
        self._conns: dict[ConnId, Session] = {}
        #: connections that have not said a successful hello yet: their deadline (4006), in
        #: the order they opened, so the first is the earliest
        self._awaiting: dict[ConnId, float] = {}
        #: CONNECTED and DISCONNECTED sessions by token, and by member (the latest incarnation)
        self._sessions: dict[str, Session] = {}
        self._members: dict[MemberId, Session] = {}
        #: the same sessions by user, then member id, oldest first (`max_instances_per_user`)
        self._users: dict[str, dict[MemberId, Session]] = {}
        #: the groups' deadlines (suspects, flushes, ACKs, writes, departed ids...), asked
        #: again only of the groups called since the last turn (notify/core/deadlines.py)
        self._deadlines = Deadlines()
        #: the DISCONNECTED sessions by token, the only ones that can expire (in loss order)
        self._disconnected: dict[str, Session] = {}
        #: (token expiry, conn) of connected sessions with a token that expires (lazy heap)
        self._token_heap: list[tuple[float, ConnId]] = []
        #: the host's own connections that publish as a trusted sender (`trust`): the server
        #: API's, one per key
        self._trusted: dict[ConnId, MemberId] = {}
        #: publishes per connection (G11)
        self._buckets: dict[ConnId, TokenBucket] = {}
        #: tokens of sessions a newer incarnation replaced (a clash) -> until when they are
        #: remembered (`RETIRED_MEMORY`; insertion order is expiry order)
        self._retired: dict[str, float] = {}
        #: groups evicted as idle since the adapter last took them (`take_evicted`): what its
        #: store keeps of each, besides the log, can go too (G14)
        self.evicted: list[str] = []
        #: groups with nobody in them and nothing under way, since when (G14: they leave
        #: memory after `idle_group`; insertion order is time order)
        self._idle: dict[str, float] = {}
        #: loaded groups whose window holds more than it must, since their last accepted
        #: message (insertion order is time order): they cool after `quiet_group` (G14)
        self._warm: dict[str, float] = {}
        self._quiet = config.timeouts.quiet_group if config.history else 0.0
        #: groups that left memory or whose window cooled, ever: the adapter may hand the
        #: memory they freed back to the system when this moves (notify/server/heap.py)
        self.freed = 0
        #: the `now` of the call being handled (when a group became idle)
        self._now = 0.0

    def restore(self, group: Group, now: float = 0.0) -> None:
        """Adopt a group brought back from storage: after a restart (its members' recovery
        window), or because someone joins or publishes to a group that had left memory (G14).
        The adapter does this before handing the hub a frame for the group."""
        if group.name in self.groups:
            return
        self.groups[group.name] = group
        self._deadlines.touch(group.name)  # its members' recovery window
        if group.idle():
            self._idle[group.name] = now
        if self._quiet and group.topic.warm:
            self._warm[group.name] = now

    # -- connections -----------------------------------------------------------------------------

    def opened(self, conn: ConnId, now: float) -> list[Action]:
        self._awaiting[conn] = now + self.config.timeouts.hello_timeout
        return []

    def closed(self, conn: ConnId, now: float, code: int = 1006, reason: str = "") -> list[Action]:
        self._now = now
        session = self._conns.pop(conn, None)
        self._awaiting.pop(conn, None)
        self._buckets.pop(conn, None)
        self._trusted.pop(conn, None)
        out: list[Action] = []
        if session is None or session.conn != conn:
            return out
        self._move(session, SessionEvent.DISCONNECT)
        # Kept long enough to resume, and to replay whatever a flush was waiting for (G7).
        t = self.config.timeouts
        session.expires = now + t.suspect_timeout + t.flush_timeout
        if self.config.event_log:
            out.append(LogEvent("conn.close", now, {"member": session.member,
                                                    "session": session.token, "code": code,
                                                    "reason": reason}))
        for name in sorted(session.groups):
            out.extend(self._group_call(name, lambda g: g.disconnected(session.member, now)))
        return out

    def trust(self, conn: ConnId, sender: MemberId) -> list[Action]:
        """Make `conn`, a connection of the host's own (opened, never hello'd), a trusted
        sender's: the server API's for one key (`api:NAME`, notify/core/users.py). It only
        publishes. Its messages reach every member of the current view whatever their
        `accept_from`, stamped with that view, in FIFO order per sender (its stream
        `fifo:api:NAME`) or in the total order, atomic too (G5: an atomic one is confirmed
        when every member of its view ACKed it); the caller checked who may publish where.
        It is in no view, so it never holds up a flush or an ACK."""
        if not is_trusted(sender) or conn not in self._awaiting:
            raise ValueError(f"cannot trust connection {conn} as {sender!r}")
        del self._awaiting[conn]
        self._trusted[conn] = sender
        return []

    # -- frames ----------------------------------------------------------------------------------

    def handle(self, conn: ConnId, frame: ClientFrame, now: float) -> list[Action]:
        """A frame from a client; a `hello` here carries no identity (development mode)."""
        self._now = now
        if self._trusted and conn in self._trusted:
            return self._trusted_frame(conn, self._trusted[conn], frame, now)
        if isinstance(frame, Hello):
            return self.hello(conn, frame, now, None)
        if isinstance(frame, Ping):  # before hello too: a heartbeat needs no session
            return [Send(conn, Pong(frame.req))]
        session = self._conns.get(conn)
        if session is None:
            req = getattr(frame, "req", None)
            return [Send(conn, Error(ErrorCode.HELLO_REQUIRED, "send hello first", req))]
        member = session.member
        if isinstance(frame, Publish):
            return self._publish(conn, session, frame, now)
        if isinstance(frame, Ack):
            return self._member_call(conn, frame.group, None,
                                     lambda g: g.ack(member, conn, frame.offsets, now))
        if isinstance(frame, FlushOk):
            return self._member_call(conn, frame.group, None,
                                     lambda g: g.flush_ok(member, conn, frame.view, now))
        if isinstance(frame, Join):
            return self._join(conn, session, frame, now)
        if isinstance(frame, History):
            return self._member_call(conn, frame.group, frame.req,
                                     lambda g: g.history(member, conn, frame))
        if isinstance(frame, StateChunk):
            return self._member_call(conn, frame.group, None,
                                     lambda g: g.state_chunk(member, conn, frame, now))
        if isinstance(frame, CheckpointChunk):
            if not session.grants.allows(frame.group, Perm.PUBLISH):
                return [Send(conn, Error(ErrorCode.FORBIDDEN, "a checkpoint needs the publish "
                                         f"grant for {frame.group!r}", frame.req))]
            return self._member_call(conn, frame.group, frame.req,
                                     lambda g: g.checkpoint_chunk(member, conn, frame, now))
        assert isinstance(frame, Leave)
        out = self._member_call(conn, frame.group, frame.req,
                                lambda g: g.leave(member, conn, frame.req, now))
        return out

    def hello(self, conn: ConnId, hello: Hello, now: float,
              identity: Identity | None, *, token: str | None = None,
              born: float | None = None) -> list[Action]:
        """`hello`, with the identity the adapter verified from its token (None: no auth).

        `token` (cluster mode): the session token the member's edge gave it. An owner's hub
        uses the edge's token instead of making one, so the same session is known by the same
        token on every node: a member that resumes on another edge presents it there, and each
        owner finds the session (docs/cluster.md). `born`: when the session was made (cluster
        mode: the wall clock of the node that made it; else `now`). A routed session born
        before the member's session this hub has is the *older* incarnation, however late its
        edge's link brought it: it is refused (4002), not taken for the newer (cluster
        simulator seed 380)."""
        self._now = now
        if conn in self._conns:
            return [Send(conn, Error(ErrorCode.ALREADY_HELLO, "hello was already sent"))]
        if hello.protocol != PROTOCOL_VERSION:
            return [Send(conn, Error(ErrorCode.PROTOCOL_VERSION,
                                     f"server speaks protocol {PROTOCOL_VERSION}"))]
        if identity is not None:
            # The member id is the token's `sub`, never the client's say-so (docs/security.md).
            if hello.member is not None and hello.member != identity.member:
                return self._refuse_auth(conn, ErrorCode.MEMBER_MISMATCH,
                                         "`member` is not the token's subject")
            if identity.expired(now):
                return self._refuse_auth(conn, ErrorCode.TOKEN_EXPIRED, "the token has expired")
            hello = Hello(hello.protocol, identity.member, hello.resume_session, hello.instance)
        out = self._hello(conn, hello, now, token, born)
        session = self._conns.get(conn)
        if session is not None:
            self._awaiting.pop(conn, None)
            self._set_identity(conn, session, identity)
        return out

    def refresh(self, conn: ConnId, identity: Identity, now: float) -> list[Action]:
        """A new token for a live session: new grants and a new expiry, same member."""
        session = self._conns.get(conn)
        if session is None:
            return [Send(conn, Error(ErrorCode.HELLO_REQUIRED, "send hello first"))]
        if identity.member != session.user:
            return [Send(conn, Error(ErrorCode.MEMBER_MISMATCH,
                                     "the new token is for another user"))]
        if identity.expired(now):
            return [Send(conn, Error(ErrorCode.TOKEN_EXPIRED, "the new token has expired"))]
        self._set_identity(conn, session, identity)
        return []

    def refuse(self, conn: ConnId, code: ErrorCode, message: str) -> list[Action]:
        """The adapter could not verify a token: refuse the connection (error, then 4004)."""
        return self._refuse_auth(conn, code, message)

    def _refuse_auth(self, conn: ConnId, code: ErrorCode, message: str) -> list[Action]:
        return [Send(conn, Error(code, message)),
                Close(conn, CloseCode.UNAUTHORIZED, code.value)]

    def _set_identity(self, conn: ConnId, session: Session, identity: Identity | None) -> None:
        session.grants = ALLOW_ALL if identity is None else identity.grants
        session.token_expires = None if identity is None else identity.expires
        if session.token_expires is not None:
            heapq.heappush(self._token_heap, (session.token_expires, conn))
            if len(self._token_heap) > 2 * len(self._conns) + 64:
                # Entries of closed connections and replaced tokens wait for their expiry in
                # the lazy heap: drop them now and then, so the heap follows what is live (G14).
                self._token_heap = [(exp, c) for exp, c in self._token_heap
                                    if (s := self._conns.get(c)) is not None
                                    and s.token_expires == exp]
                heapq.heapify(self._token_heap)

    def _hello(self, conn: ConnId, hello: Hello, now: float,
               token: str | None = None, born: float | None = None) -> list[Action]:
        out: list[Action] = []
        if self._retired and (token in self._retired or hello.resume_session in self._retired):
            # the session a newer incarnation replaced: still the older one (`_retire`)
            return [Close(conn, CloseCode.REPLACED, "a newer connection of this member")]
        session = self._sessions.get(hello.resume_session) if hello.resume_session else None
        if session is None and token is not None:  # already known by the edge's token
            session = self._sessions.get(token)
        if session is not None and session.state is SessionState.DISCONNECTED and \
                session.expires is not None and now >= session.expires:
            # past its expiry: gone, whether or not a tick has swept it yet (a host's tick
            # rate must not decide whether a resume is taken)
            self._move(session, SessionEvent.EXPIRE)
            session = None
        if session is not None and hello.member is not None and \
                member_id(hello.member, hello.instance) != session.member:
            session = None  # a token for another member (user or instance) resumes nothing
        if session is None and token is not None and token in self._sessions:
            return [Send(conn, Error(ErrorCode.BAD_FRAME, "session token in use"))]
        resumed = session is not None
        if session is not None and token is not None and session.token != token:
            # resumed through another edge, which gave the session a token of its own
            self._sessions.pop(session.token, None)
            self._disconnected.pop(session.token, None)
            session.token = token
            self._sessions[token] = session
            if session.state is SessionState.DISCONNECTED:
                self._disconnected[token] = session
        if session is not None:
            if session.state is SessionState.CONNECTED:  # the old connection is not known dead
                assert session.conn is not None
                out.append(Close(session.conn, CloseCode.REPLACED, "resumed elsewhere"))
                self._move(session, SessionEvent.DISCONNECT)
                # Its groups must stop sending to the dead connection and start the suspect
                # clock: a group it does not resume (join with `resume`) removes it in time.
                member = session.member
                for name in sorted(session.groups):
                    out.extend(self._group_call(name, lambda g: g.disconnected(member, now)))
            self._move(session, SessionEvent.RESUME, conn)
        else:
            user, instance = hello.member, hello.instance
            if not user or not _NAME.fullmatch(user) or \
                    len(user) > self.config.limits.max_group_name:
                return [Send(conn, Error(ErrorCode.BAD_FRAME,
                                         "hello needs a member id: letters, digits, _.:/@-"))]
            if is_trusted(user):  # the server API's senders (a token's `sub` too)
                return [Send(conn, Error(ErrorCode.BAD_FRAME,
                                         "member ids starting with `api:` are the server "
                                         "API's"))]
            if instance is not None and not INSTANCE.fullmatch(instance):
                return [Send(conn, Error(ErrorCode.BAD_FRAME,
                                         "an instance is 1-64 of letters, digits, _-"))]
            member = member_id(user, instance)
            old = self._members.get(member)
            if old is not None and token is not None and born is not None and born < old.born:
                # routed here after the newer one, by a slower link: still the older (4002)
                return [Close(conn, CloseCode.REPLACED, "a newer connection of this member")]
            if old is not None:  # a clash: the newer wins, the older is closed (4002)
                out.extend(self._retire(old, Reason.NEW_INCARNATION, now))
            room = self._make_room(user, now, routed=token is not None)
            if room is None:
                return [Send(conn, Error(ErrorCode.TOO_MANY_INSTANCES,
                                         f"user {user!r} has {len(self._users[user])} connected "
                                         "instances, the most allowed (max_instances_per_user)"))]
            out.extend(room)
            session = Session(token or self._token_for(hello), member, conn, user, instance,
                              born=now if born is None else born)
            self._sessions[session.token] = session
            self._members[member] = session
            self._users.setdefault(user, {})[member] = session
        self._conns[conn] = session
        t = self.config.timeouts
        lim = self.config.limits
        out.append(Send(conn, Welcome(session.token, session.member,
                                      int(t.heartbeat_interval * 1000),
                                      {"max_frame_bytes": lim.max_frame_bytes,
                                       "max_batch_frames": MAX_BATCH_FRAMES,
                                       "max_outbound_frames": lim.max_outbound_frames,
                                       "max_outbound_bytes": lim.max_outbound_bytes,
                                       "max_payload_depth": lim.max_payload_depth,
                                       "max_groups": lim.max_groups_per_session,
                                       "max_group_members": lim.max_group_members,
                                       "suspect_timeout_ms": int(t.suspect_timeout * 1000),
                                       "publish_rate": int(lim.publish_rate),
                                       "publish_burst": lim.publish_burst,
                                       "max_pending_atomic": lim.max_pending_atomic,
                                       "max_instances_per_user": lim.max_instances_per_user},
                                      resumed, session.user, session.instance)))
        if self.config.event_log:
            out.append(LogEvent("conn.open", now, {"member": session.member,
                                                   "session": session.token,
                                                   "resumed": resumed}))
        return out

    def _token_for(self, hello: Hello) -> str:
        """A new session's token: the one its hello presented, when this hub knows no session
        by it (expired here, or made by another node: a cluster edge), else a new one.

        One session keeps one token on every node it passes through, so an owner that missed
        some of its moves (it was paused, or the member resumed through other edges meanwhile)
        still knows it by the token it presents, and never takes a resume for a new
        incarnation (S11). The token proves nothing the client did not already hold: a resume
        needs the same member id too (with auth, the token's `sub`)."""
        presented = hello.resume_session
        if presented is not None and _TOKEN.fullmatch(presented) and \
                presented not in self._sessions:
            return presented
        return self._new_token()

    def _remember_retired(self, token: str, now: float) -> None:
        """A clash's loser must not come back as the newest: in a cluster its connection's
        session can reach an owner after the newer one did (its edge's link was slower), and
        the later hello would win (cluster simulator seed 380). Remembered for
        `RETIRED_MEMORY` seconds, at most `MAX_RETIRED` of them (G14)."""
        self._retired.pop(token, None)
        self._retired[token] = now + RETIRED_MEMORY
        while len(self._retired) > MAX_RETIRED:
            del self._retired[next(iter(self._retired))]

    def _forget_retired(self, now: float) -> None:
        retired = self._retired  # (insertion order is expiry order: the oldest first)
        while retired:
            token, until = next(iter(retired.items()))
            if until > now:
                break
            del retired[token]

    def _make_room(self, user: str, now: float, *, routed: bool = False
                   ) -> list[Action] | None:
        """Room for one more instance of `user` (`max_instances_per_user`): nothing to do, or
        the retirement of its oldest DISCONNECTED session (it was leaving anyway, at its
        suspect timeout); None when every one is connected (the hello is refused).

        A session routed here by another node's edge (cluster mode) is never refused: its
        edge answered the hello and applied the limit to its own connections; refused here,
        the client would only get a stray error and a member that cannot act."""
        sessions = self._users.get(user)
        if sessions is None or len(sessions) < self.config.limits.max_instances_per_user:
            return []
        for s in sessions.values():
            if s.state is SessionState.DISCONNECTED:
                return self._retire(s, Reason.INSTANCE_LIMIT, now)
        return [] if routed else None

    def _retire(self, old: Session, reason: Reason, now: float) -> list[Action]:
        """Remove an older incarnation from everything at once (DESIGN §4)."""
        out: list[Action] = []
        if old.conn is not None:
            out.append(Close(old.conn, CloseCode.REPLACED, "a newer connection of this member"))
        if reason is Reason.NEW_INCARNATION:
            self._remember_retired(old.token, now)
        self._move(old, SessionEvent.RETIRE)
        for name in sorted(old.groups):
            out.extend(self._group_call(name, lambda g: g.remove(old.member, reason, now)))
        return out

    def _move(self, session: Session, event: SessionEvent, conn: ConnId | None = None) -> None:
        """Every change of a session's state (`SESSION_TRANSITIONS`), and the indexes that
        follow it; `conn`: the connection a RESUME moves it to."""
        was = session.conn
        session.on(event)
        state = session.state
        if was is not None:  # it leaves its connection (which may still say hello afresh)
            self._conns.pop(was, None)
            session.conn = None
        if state is SessionState.CONNECTED:
            session.conn, session.expires = conn, None
            self._disconnected.pop(session.token, None)
        elif state is SessionState.DISCONNECTED:
            self._disconnected[session.token] = session
        else:  # RETIRED, EXPIRED: forgotten
            self._disconnected.pop(session.token, None)
            self._sessions.pop(session.token, None)
            if self._members.get(session.member) is session:
                del self._members[session.member]
            instances = self._users.get(session.user)
            if instances is not None and instances.get(session.member) is session:
                del instances[session.member]
                if not instances:
                    del self._users[session.user]

    def _join(self, conn: ConnId, session: Session, join: Join, now: float) -> list[Action]:
        lim = self.config.limits
        if not valid_group_name(join.group, lim):
            return [Send(conn, Error(ErrorCode.BAD_GROUP_NAME,
                                     f"group names are 1-{lim.max_group_name} of A-Za-z0-9_.:/@-",
                                     join.req))]
        if len(session.groups) >= lim.max_groups_per_session:
            session.groups = {n for n in session.groups
                              if n in self.groups and self.groups[n].involves(session.member)}
        if join.group not in session.groups and len(session.groups) >= lim.max_groups_per_session:
            return [Send(conn, Error(ErrorCode.TOO_MANY_GROUPS,
                                     f"at most {lim.max_groups_per_session} groups", join.req))]
        if not session.grants.allows(join.group, Perm.JOIN) or (
                join.want_state and not session.grants.allows(join.group, Perm.STATE)):
            what = "join" if not session.grants.allows(join.group, Perm.JOIN) else "state of"
            return [Send(conn, Error(ErrorCode.FORBIDDEN,
                                     f"the token does not allow to {what} {join.group!r}",
                                     join.req))]
        if join.group not in self.groups:
            self.groups[join.group] = Group(join.group, self.config, epoch=self.epoch)
        session.groups.add(join.group)
        return self._group_call(join.group, lambda g: g.join(session.member, conn, join, now))

    def _publish(self, conn: ConnId, session: Session, p: Publish, now: float) -> list[Action]:
        lim = self.config.limits
        code: RejectCode | None = None
        if lim.publish_rate > 0:
            bucket = self._buckets.get(conn)
            if bucket is None:
                bucket = self._buckets[conn] = TokenBucket(float(lim.publish_burst), now)
            if bucket.take(now, lim.publish_rate, lim.publish_burst):
                code = RejectCode.RATE_LIMITED
        if code is None and not (session.grants.allows(p.group, Perm.PUBLISH) and (
                not p.atomic or session.grants.allows(p.group, Perm.PUBLISH_ATOMIC))):
            code = RejectCode.FORBIDDEN
        if code is None and p.group not in self.groups:
            code = RejectCode.NO_GROUP
        if code is not None:
            return [Send(conn, Rejected(p.req, p.id, code))]
        member = session.member
        return self._group_call(p.group, lambda g: g.publish(member, conn, p, now))

    def _trusted_frame(self, conn: ConnId, sender: MemberId, frame: ClientFrame,
                       now: float) -> list[Action]:
        if not isinstance(frame, Publish) or frame.ephemeral:
            return [Send(conn, Error(ErrorCode.BAD_FRAME, "a trusted sender only publishes",
                                     getattr(frame, "req", None)))]
        if frame.group not in self.groups:
            return [Send(conn, Rejected(frame.req, frame.id, RejectCode.NO_GROUP))]
        return self._group_call(frame.group,
                                lambda g: g.publish(sender, conn, frame, now, trusted=True))

    def _member_call(self, conn: ConnId, name: str, req: Req | None,
                     call: Callable[[Group], list[Action]]) -> list[Action]:
        if name not in self.groups:
            return [Send(conn, Error(ErrorCode.NO_GROUP, f"no group {name!r}", req))]
        return self._group_call(name, call)

    def _group_call(self, name: str, call: Callable[[Group], list[Action]]) -> list[Action]:
        g = self.groups.get(name)
        if g is None:  # left memory since (a session remembers the groups it was in)
            return []
        busy = g.writes.busy
        # (touched first: a call that raises may have changed the group all the same)
        self._deadlines.touch(name)
        out = g.writes.route(call(g), busy=busy)  # frames wait for the write under way (G10)
        if g.halted:  # it asked the process to stop (G13): nothing more of it leaves
            return [a for a in out if isinstance(a, Halt)]
        self._after_call(g)
        return out

    def _after_call(self, g: Group) -> None:
        t = g.topic
        if t.warm and self._quiet and self._warm.get(g.name, -1.0) < t.accepted_at:
            self._warm.pop(g.name, None)  # to the end: the most recently active
            self._warm[g.name] = t.accepted_at
        if not g.slots and g.idle():
            self._idle.setdefault(g.name, self._now)
        elif self._idle:
            self._idle.pop(g.name, None)

    def written(self, group: str, ticket: int, error: str | None, now: float) -> list[Action]:
        """Storage finished (or failed) the write `ticket` of `group` (an `Append` or a
        `StoreView`): the frames that waited for it, and what the group does next."""
        g = self.groups.get(group)
        if g is None:  # dropped since (cluster: its shard moved to another node)
            return []
        self._now = now
        self._deadlines.touch(group)
        out = g.written(ticket, error, now)
        if g.halted:
            return [a for a in out if isinstance(a, Halt)]
        self._after_call(g)
        return out

    def checkpoint_committed(self, group: str, cp: Checkpoint, conn: ConnId, req: Req,
                             now: float) -> list[Action]:
        """Storage made `cp` durable (see `CommitCheckpoint`)."""
        self._now = now
        return self._group_call(group, lambda g: g.checkpoint_committed(cp, conn, req, now))

    def drop_groups(self, names: list[str], reason: str) -> list[Action]:
        """Forget `names` at once, without a view change (cluster mode: this node no longer
        owns them, and another node rebuilds them from the log). Nothing of them is written or
        sent any more, except a close of every connection in them, so that their members
        reconnect and resume where the group now lives (`SHUTDOWN`: reconnect)."""
        conns: set[ConnId] = set()
        for name in names:
            g = self.groups.pop(name, None)
            if g is None:
                continue
            self._deadlines.forget(name)
            self._idle.pop(name, None)
            self._warm.pop(name, None)
            conns.update(g.connections())
        out: list[Action] = []
        for conn in sorted(conns):
            out.append(Close(conn, CloseCode.SHUTDOWN, reason))
        return out

    # -- the server API's removals (docs/api.md) --------------------------------------------------

    def remove(self, group: str, target: str, now: float) -> Removal:
        """Remove `target` from `group`'s view: one instance (`user#instance`, or a member id
        that names no instance), or, for a user id, every instance of that user in the view.
        Each is removed by a view change (`Reason.REMOVED`) whose install reaches it and tells
        it why; it is not closed, and stays in its other groups. Nothing in the view matches:
        no members, no actions (and a group not in memory has nobody in its view here)."""
        self._now = now
        g = self.groups.get(group)
        if g is None:
            return Removal((), 0, [])
        members = tuple(m for m in g.view.members
                        if m == target or (SEPARATOR not in target and user_of(m) == target))
        # every removal requested now lands in the next view (a proposal under way takes it
        # in), which may be installed before this returns (nobody has to flush)
        version = g.view.version + 1 if members else 0
        out: list[Action] = []
        for m in members:
            out.extend(self._group_call(group, partial(_expel, member=m, now=now)))
        return Removal(members, version, out)

    def disconnect(self, user: str, now: float) -> Removal:
        """End every session of `user` at once: its connections closed with 4007
        (`DISCONNECTED`: the SDKs do not reconnect with the same token), each instance removed
        from its groups by the normal view change (`Reason.DISCONNECTED`), not after a suspect
        timeout, and no session of it can be resumed. `version` is unused (0)."""
        self._now = now
        sessions = list(self._users.get(user, {}).values())
        out: list[Action] = []
        for s in sessions:
            if s.conn is not None:
                out.append(Close(s.conn, CloseCode.DISCONNECTED,
                                 "disconnected by the server API"))
            self._move(s, SessionEvent.RETIRE)
            for name in sorted(s.groups):
                out.extend(self._group_call(name, partial(_drop, member=s.member, now=now)))
        return Removal(tuple(s.member for s in sessions), 0, out)

    # -- time ------------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        self._deadlines.settle(self._deadline_of)
        first = self._deadlines.earliest()  # the groups'
        deadlines: list[float] = [] if first is None else [first]
        if self._token_heap:
            deadlines.append(self._token_heap[0][0])
        if self._awaiting:  # in the order they opened: the first is the earliest
            deadlines.append(next(iter(self._awaiting.values())))
        if self._idle:
            deadlines.append(next(iter(self._idle.values())) + self.config.timeouts.idle_group)
        if self._warm:
            deadlines.append(next(iter(self._warm.values())) + self._quiet)
        return min(deadlines) if deadlines else None

    def tick(self, now: float) -> list[Action]:
        self._now = now
        out: list[Action] = []
        awaiting = self._awaiting
        while awaiting:
            conn, deadline = next(iter(awaiting.items()))
            if now < deadline:
                break
            del awaiting[conn]
            out.append(Close(conn, CloseCode.HELLO_TIMEOUT, "no hello in time"))
        heap = self._token_heap
        while heap and heap[0][0] <= now:
            exp, conn = heapq.heappop(heap)
            s = self._conns.get(conn)
            if s is not None and s.conn == conn and s.token_expires == exp:
                # The session stays resumable: a client that reconnects with a fresh token
                # and its session id resumes like after any lost connection (G7).
                out.append(Close(conn, CloseCode.TOKEN_EXPIRED, "token expired; refresh it"))
        self._deadlines.settle(self._deadline_of)
        for name in self._deadlines.pop_due(now):
            out.extend(self._group_call(name, lambda g: g.tick(now)))
        disconnected = self._disconnected  # in loss order, so in expiry order
        while disconnected:
            s = next(iter(disconnected.values()))
            if s.expires is None or now < s.expires:
                break
            self._move(s, SessionEvent.EXPIRE)  # (takes it out of `_disconnected`)
        self._evict_idle(now)
        if self._warm:
            self._cool_quiet(now)
        if self._retired:
            self._forget_retired(now)
        return out

    def _deadline_of(self, name: str) -> float | None:
        g = self.groups.get(name)
        return None if g is None else g.next_deadline()

    def _evict_idle(self, now: float) -> None:
        """G14: a group nobody is in costs nothing after `idle_group` seconds. Its view
        version, log head, streams and recent messages are in the log, and the adapter brings
        it back (`restore`) before the next frame for it."""
        ttl, idle = self.config.timeouts.idle_group, self._idle
        while idle:
            name, since = next(iter(idle.items()))
            if now < since + ttl:  # the sum next_deadline gives (see AtomicTracker.overdue)
                break
            del idle[name]
            g = self.groups.get(name)
            if g is not None and g.idle():
                del self.groups[name]
                self._deadlines.forget(name)
                self._warm.pop(name, None)
                self.evicted.append(name)
                self.freed += 1

    def _cool_quiet(self, now: float) -> None:
        """G14: the window of a group that accepted nothing for `quiet_group` seconds goes
        (`Topic.cool`); its members stay, and one that resumes reads from the log."""
        warm = self._warm
        while warm:
            name = next(iter(warm))
            if now < warm[name] + self._quiet:
                break
            del warm[name]
            g = self.groups.get(name)
            if g is None:  # evicted or dropped since
                continue
            if now < g.topic.accepted_at + self._quiet:  # active since: not quiet yet
                warm[name] = g.topic.accepted_at
            else:
                g.topic.cool()
                self.freed += 1

    def take_evicted(self) -> list[str]:
        out, self.evicted = self.evicted, []
        return out

    # -- introspection (tests, metrics) ----------------------------------------------------------

    def session_of(self, conn: ConnId) -> Session | None:
        return self._conns.get(conn)

    def live_sessions(self) -> int:
        return len(self._conns)
