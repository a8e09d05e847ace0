"""Timeouts and limits of the core.

Every phase of a view change has a timeout so that a non-responder is suspected, never waited on
forever (DESIGN §4, the lesson of JGroups/Spread "flush gets stuck" reports). The defaults are the
ones DESIGN §4 names; the what-if analysis job tunes `suspect_timeout`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds. `install_hold` delays a proposal so concurrent requests merge into one change."""

    heartbeat_interval: float = 5.0
    heartbeat_timeout: float = 15.0
    suspect_timeout: float = 3.0
    install_hold: float = 0.0
    flush_timeout: float = 5.0
    ack_timeout: float = 10.0
    #: a connection that has not said a successful `hello` by then is closed (4006)
    hello_timeout: float = 10.0
    #: after a restart, the stored view's members may resume (no view change) for this long;
    #: the ones that do not are removed like any suspect
    recovery_window: float = 10.0
    #: a write (a batch of messages, a view) storage has not finished by then means storage
    #: stopped answering: the server stops (fail-stop, G13) rather than hold the group forever
    write_timeout: float = 30.0
    #: a group nobody is in and nothing is under way in leaves memory after this long (G14);
    #: its durable state stays in the log and comes back when someone joins or publishes
    idle_group: float = 60.0
    #: a loaded group that accepted no message for this long lets its in-memory window go
    #: (`Topic.cool`): members that resume later read what they lack from the log (G14: memory
    #: holds what is hot, not what was). 0: never
    quiet_group: float = 60.0
    #: how long the publish ids of a sender that left the view (or of a non-member sender,
    #: since its last publish) are remembered for idempotent retries (G14: then forgotten)
    departed_ids: float = 600.0
    #: a clash (a new incarnation of one instance, notify/core/users.py) holds the old one's
    #: removal this long, for the newer connection's join: both then land in one view change
    clash_hold: float = 0.25


#: the most frames a client's `batch` may hold (notify/wire.py; `welcome.limits` says it, and a
#: client batches only when it does). A batch is as long in bytes as `max_frame_bytes` allows.
MAX_BATCH_FRAMES = 1000


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds that keep one client from costing the others (G11, G12)."""

    max_frame_bytes: int = 1 << 20
    #: how deeply a publish `payload` may nest arrays and objects (`[[1]]` is 2 levels); a
    #: deeper one is refused at the edge (`rejected`, `bad_payload`), before any stream has it
    max_payload_depth: int = 64
    #: what the log keeps of each group and serves (catch-up, `history`): messages, and their
    #: payload bytes at most (applied by the store: notify/storage)
    retain_messages: int = 100_000
    retain_bytes: int = 64 << 20
    #: the in-memory window of each loaded group: its newest messages (and their payload bytes
    #: at most), replayed from memory to members that resume (G7, G8); older ones within
    #: retention are read from the log (G14: memory holds what is hot, not the retention)
    window_messages: int = 1_000
    window_bytes: int = 1 << 20
    #: one `history` page: messages at most, and about this many payload bytes
    history_page: int = 1_000
    history_page_bytes: int = 1 << 20
    #: publish ids remembered per sender for idempotent retries
    idempotency_window: int = 10_000
    #: outbound frames queued for one member before it is cut as a slow consumer
    max_outbound_frames: int = 50_000
    #: and bytes queued for one member (a few large frames can weigh what many small ones do)
    max_outbound_bytes: int = 16 << 20
    max_groups_per_session: int = 1_000
    #: members one group may have. Every view change sends the whole member list to every
    #: member (n² ids on the wire), and the cluster stores each view as one record: both grow
    #: with it. A join past it is refused `group_full`; nobody already in is affected
    max_group_members: int = 1_000
    #: sessions (client instances: tabs, devices, processes) one user may have at once; a new
    #: one past it first retires the user's oldest disconnected one, else is refused
    max_instances_per_user: int = 32
    max_group_name: int = 200
    #: a snapshot relayed to a joiner, in bytes of base64 on the wire (≈ 4/3 of compressed)
    max_state_bytes: int = 512 << 20
    #: publishes per second per connection (token bucket refill rate; 0 = unlimited). The
    #: default is above what one connection reaches in bench/ (~11k/s): lower it on the internet
    publish_rate: float = 20_000.0
    #: the bucket's size: how many publishes may come in one burst
    publish_burst: int = 20_000
    #: unresolved atomic messages one sender may have in one group
    max_pending_atomic: int = 10_000


@dataclass(frozen=True, slots=True)
class Retention:
    """What the log keeps and serves of the groups whose names match `groups` (a glob, as
    `fnmatch` reads it: `chat:*`): at most `messages`, `bytes` of payload, none older than
    `age` seconds (None: no bound by age). Pub/Sub's and Centrifugo's per-namespace history
    options are the model: a chat keeps a week, a cursor channel nothing to speak of."""

    groups: str
    messages: int
    bytes: int
    age: float | None = None

    def __post_init__(self) -> None:
        if not self.groups or self.messages < 1 or self.bytes < 1 or (
                self.age is not None and self.age <= 0):
            raise ValueError(f"bad retention rule {self!r}")


@dataclass(frozen=True, slots=True)
class CoreConfig:
    timeouts: Timeouts = field(default_factory=Timeouts)
    limits: Limits = field(default_factory=Limits)
    #: emit delivery event-log records (DESIGN §6) as actions
    event_log: bool = False
    #: emit the group events that metrics count (view changes, installs, atomic outcomes,
    #: suspects, rejects) as `LogEvent`s even without the event log; never per-message ones
    metrics: bool = False
    #: the groups' log is shared with other nodes (cluster mode): another owner may have
    #: written past what this node's copy of a group knows, so a resume point past its head
    #: (its offset, or an atomic message it holds) is answered `unavailable` (retry), not
    #: `bad_resume` (the client's point is wrong)
    shared_log: bool = False
    #: the host's log serves pages (`history`, and catch-up past the in-memory window, G8);
    #: without, a resume point older than the window is refused `offset_unavailable`
    history: bool = True
    #: retention by group pattern, the first that matches applies (`retention_for`)
    retention: tuple[Retention, ...] = ()
    #: the age bound of groups no rule matches (None: none)
    retain_age: float | None = None

    def retention_for(self, group: str) -> Retention:
        """The rule for `group`: the first of `retention` whose pattern matches it, else the
        defaults (`limits.retain_messages`, `limits.retain_bytes`, `retain_age`)."""
        for rule in self.retention:
            if fnmatchcase(group, rule.groups):
                return rule
        lim = self.limits
        return Retention("*", lim.retain_messages, lim.retain_bytes, self.retain_age)
