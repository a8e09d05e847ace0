"""The scenario file (seed 004's template, DESIGN §10): YAML validated with pydantic.

    name: sigkill-sqlite
    description: one line for `notify-chaos list`
    duration: 30s     # how long publishers publish (`20s`, `500ms`, `2m` or seconds)
    drain: 15s               # after that, at most this long for subscribers to catch up
    system: {nodes: 1, store: sqlite, server_args: [--suspect-timeout, "2"], nats: 0}
    clients:
      publishers: {count: 2, groups: [g1], rate: 100, size: 100, order: fifo, atomic: false}
      subscribers: {count: 2, groups: [g1]}
    actions:
      - {target: node-1, start: 10s, duration: 2s, mode: kill}

Cluster mode (docs/cluster.md): `system: {nodes: 3, nats: 3, store: jetstream, lease_ttl: 2}`
starts a NATS cluster and 3 `notify serve --cluster` nodes; clients get every node's URL. Its
faults pick their victim when they start: `kill-owner`, `kill-edge`, `pause-owner`,
`kill-nats-leader` (target `group:NAME` or none: the first publisher group), and
`delay-stream-leader` (params `ms`, `jitter_ms`: a delay on every route link touching the
nats-server that leads the NOTIFY stream; the run then routes the NATS cluster through proxies).

Clients of one user (issue 29): `clients.users: {alice: [subscriber-1, subscriber-2]}` makes
those two clients instances of user `alice` (member ids `alice#subscriber-1`,
`alice#subscriber-2`), as two devices of one person. Mode `flap` (params `down`, `up`) cuts a
link for `down`, restores it for `up`, and again, until the action ends.

Placement and timing (issue 32): `clients.edges: {subscriber-1: node-2}` starts a client's
URL list at that node; `clients.schedule: {publisher-1: [[0s, 0.2s], [20s, 21s]]}` makes a
publisher publish only in those windows (a quiet sender, bursts); `clients.pinned: [...]` gives
those clients their `edges` node's URL alone; `clients.churners: {count,
group, stay, away}` are members that join and leave again and again (view-change churn); a
group list may hold a range, `t{1..60}`. Mode `reset-nats` (target `node-N`, params `pause`)
resets that node's NATS client connections (`ss -K`), SIGSTOPped around it with `pause: true`.
`expect: {late_after_ack: 3s, removals: 0}` adds promises the verdict checks.

A prober beside the faults (issue 33): `probe: {rate: 20, latency_threshold: 0.5s,
publish_deadline: 1s}` runs `notify probe` against the nodes, scrapes its SLIs and reports
each one's good/total before, during and after every fault (`notify_chaos.probe`).

Errors name the line of the offending value (`ScenarioError`), as YAML users expect: the
document is composed once to learn where every key and list item sits, then validated.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml  # type: ignore[import-untyped]
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ms|s|min|m|h)?\s*$")


def parse_seconds(v: Any) -> float:
    """`20s`, `500ms`, `1.5m`, `2h` or a plain number of seconds."""
    if isinstance(v, bool):
        raise ValueError("a duration, not a boolean")
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        m = _DURATION.match(v)
        if m:
            return float(m.group(1)) * _UNITS[m.group(2) or "s"]
    raise ValueError(f"not a duration: {v!r} (use e.g. 20s, 500ms, 2m or a number of seconds)")


Seconds = Annotated[float, BeforeValidator(parse_seconds), Field(ge=0)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class System(_Model):
    nodes: int = Field(default=1, ge=1)
    store: Literal["sqlite", "memory", "jetstream"] = "sqlite"
    server_args: list[str] = Field(default_factory=list)
    #: NATS servers for cluster mode (DESIGN §9, docs/cluster.md); 0: a single node
    nats: int = Field(default=0, ge=0)
    #: cluster mode: `--lease-ttl` of every node (seconds a shard lease lives unrenewed)
    lease_ttl: Seconds = Field(default=2.0, gt=0)
    #: a node that exits on its own (e.g. fail-stop, status 70) is started again, as a service
    #: manager would, after this many seconds; null: left down
    restart_on_exit: Seconds | None = 1.0

    @model_validator(mode="after")
    def _today(self) -> System:
        if self.cluster:
            if self.store != "jetstream":
                raise ValueError("store: cluster mode (nats > 0) keeps its log on JetStream: "
                                 "use store: jetstream")
            if self.nats not in (1, 3, 5):
                raise ValueError("nats: 1, 3 or 5 servers")
            return self
        if self.store == "jetstream":
            raise ValueError("store: jetstream needs cluster mode (nats: 3)")
        if self.nodes != 1:
            raise ValueError("nodes: more than 1 needs cluster mode (nats: 3, store: jetstream)"
                             ": separate single nodes would be separate services")
        return self

    @property
    def cluster(self) -> bool:
        return self.nats > 0


_RANGE = re.compile(r"^(?P<pre>[^{}]*)\{(?P<lo>[0-9]+)\.\.(?P<hi>[0-9]+)\}(?P<post>[^{}]*)$")


def expand_groups(v: Any) -> Any:
    """A group name, a list of them, or a range `t{1..60}` (t1, t2, ..., t60) in either."""
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list):
        return v
    out: list[Any] = []
    for x in items:
        m = _RANGE.match(x) if isinstance(x, str) else None
        if m is None:
            out.append(x)
            continue
        lo, hi = int(m.group("lo")), int(m.group("hi"))
        if hi < lo or hi - lo >= 10_000:
            raise ValueError(f"{x!r}: a range is {{LOW..HIGH}} with LOW <= HIGH, "
                             "at most 10,000 names")
        out += [f"{m.group('pre')}{i}{m.group('post')}" for i in range(lo, hi + 1)]
    return out


class ClientOptionsSpec(_Model):
    """`client_sdk.ClientOptions` fields the scenario may set."""

    heartbeat_interval: Seconds = 1.0
    heartbeat_timeout: Seconds = 3.0
    backoff_base: Seconds = 0.05
    backoff_cap: Seconds = 0.5
    request_timeout: Seconds = 30.0
    max_pending_publishes: int = Field(default=10_000, ge=1)


class _Members(_Model):
    count: int = Field(default=1, ge=0)
    groups: Annotated[list[str], BeforeValidator(expand_groups), Field(min_length=1)] = ["g1"]

    @model_validator(mode="before")
    @classmethod
    def _group_alias(cls, v: Any) -> Any:
        if isinstance(v, dict) and "group" in v:
            v = dict(v)
            if "groups" in v:
                raise ValueError("give `group` or `groups`, not both")
            v["groups"] = v.pop("group")
        return v


class Publishers(_Members):
    #: messages per second, per publisher (spread over its groups)
    rate: float = Field(default=100.0, gt=0, le=50_000)
    #: payload bytes (padding; the payload also carries the id and the send time)
    size: int = Field(default=100, ge=0, le=900_000)
    order: Literal["fifo", "total"] = "fifo"
    atomic: bool = False


class Subscribers(_Members):
    pass


class Churners(_Members):
    """Members that join their groups, stay `stay`, leave, stay away `away`, and again, from
    t=0 until `duration` (view-change churn); they deliver nothing the verdict owes them."""

    count: int = Field(default=0, ge=0)
    stay: Seconds = Field(default=2.0, gt=0)
    away: Seconds = Field(default=1.0, gt=0)


#: a publisher's active window: it publishes (at its rate) from the first time to the second
Window = tuple[Seconds, Seconds]


#: a user id as `hello.member` accepts it (notify/core/hub.py; no `#`: notify/core/users.py)
_USER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@-]*$")
_CLIENT = re.compile(r"^(publisher|subscriber|churner)-([1-9][0-9]*)$")
_NODE = re.compile(r"^node-([1-9][0-9]*)$")


class Clients(_Model):
    publishers: Publishers = Field(default_factory=Publishers)
    subscribers: Subscribers = Field(default_factory=Subscribers)
    churners: Churners = Field(default_factory=Churners)
    options: ClientOptionsSpec = Field(default_factory=ClientOptionsSpec)
    #: user -> the clients that are instances of it (issue 29: one user, many devices): each
    #: connects as that user with its own name as the instance (member id `user#client-name`);
    #: a client named nowhere is a user of its own (member `name#<random instance>`)
    users: dict[str, list[str]] = Field(default_factory=dict)
    #: publisher -> the windows it publishes in (seconds from t=0, `[from, to]`); a publisher
    #: named nowhere publishes from t=0 to `duration` (a quiet sender, bursts)
    schedule: dict[str, list[Window]] = Field(default_factory=dict)
    #: client -> the node its URL list starts at (its edge while that node is up); a client
    #: named nowhere starts one node further than the client before it
    edges: dict[str, str] = Field(default_factory=dict)
    #: clients given only their `edges` node's URL: they reconnect to it, never elsewhere
    pinned: list[str] = Field(default_factory=list)

    def _client_exists(self, name: str) -> bool:
        counts = {"publisher": self.publishers.count, "subscriber": self.subscribers.count,
                  "churner": self.churners.count}
        m = _CLIENT.match(name)
        return m is not None and int(m.group(2)) <= counts[m.group(1)]

    @model_validator(mode="after")
    def _placement(self) -> Clients:
        for name, windows in self.schedule.items():
            if not name.startswith("publisher-") or not self._client_exists(name):
                raise ValueError(f"schedule: {name!r} is not one of the {self.publishers.count} "
                                 "publishers")
            if not windows:
                raise ValueError(f"schedule.{name}: give at least one [from, to] window")
            for a, b in windows:
                if b <= a:
                    raise ValueError(f"schedule.{name}: window [{a:g}, {b:g}] ends before it "
                                     "starts")
        for name, node in self.edges.items():
            if not self._client_exists(name):
                raise ValueError(f"edges: {name!r} is not one of the clients")
            if not _NODE.match(node):
                raise ValueError(f"edges.{name}: {node!r} is not a node (node-N)")
        for name in self.pinned:
            if name not in self.edges:
                raise ValueError(f"pinned: {name!r} has no node in `edges` to be pinned to")
        return self

    @model_validator(mode="after")
    def _users(self) -> Clients:
        counts = {"publisher": self.publishers.count, "subscriber": self.subscribers.count,
                  "churner": self.churners.count}
        seen: dict[str, str] = {}
        for user, names in self.users.items():
            if not _USER.match(user):
                raise ValueError(f"users: {user!r} is not a user id (letters, digits, "
                                 "_.:/@-, no #)")
            if not names:
                raise ValueError(f"users.{user}: name its clients (publisher-N, subscriber-N)")
            for n in names:
                m = _CLIENT.match(n)
                if not m or m.group(1) == "churner" or int(m.group(2)) > counts[m.group(1)]:
                    raise ValueError(f"users.{user}: {n!r} is not one of the clients "
                                     f"({counts['publisher']} publishers, "
                                     f"{counts['subscriber']} subscribers)")
                if n in seen:
                    raise ValueError(f"users: {n} is an instance of {seen[n]} and {user}")
                seen[n] = user
        return self

    def user_of(self, client: str) -> str | None:
        """The user `client` is an instance of (`users`), or None: a user of its own."""
        return next((u for u, names in self.users.items() if client in names), None)


Mode = Literal["kill", "pause", "delay", "loss", "cut", "flap", "slow", "disk_full", "reset-nats",
               "kill-owner", "kill-edge", "pause-owner", "kill-nats-leader",
               "delay-stream-leader"]
#: cluster faults: the victim is chosen when the action starts (`target` is the group whose
#: owner counts, default the first publisher group); a killed process is started again at the
#: action's end, a paused one continued
CLUSTER_MODES = ("kill-owner", "kill-edge", "pause-owner", "kill-nats-leader",
                 "delay-stream-leader")
#: cluster faults on the links between nats-servers: the run routes the cluster's traffic
#: through proxies (`notify_chaos.routes`) when a scenario has one
ROUTE_MODES = ("delay-stream-leader",)
PROCESS_MODES = ("kill", "pause")
LINK_MODES = ("delay", "loss", "cut", "flap", "slow")
NODE_MODES = ("disk_full", "reset-nats")

_TARGET = re.compile(
    r"^(?:(?P<node>node-[1-9][0-9]*)|(?P<nats>nats-[1-9][0-9]*)|(?P<clients>clients)"
    r"|(?P<client>(?:publisher|subscriber)-[1-9][0-9]*)"
    r"|(?P<src>clients?|(?:publisher|subscriber)-[1-9][0-9]*|node-[1-9][0-9]*)"
    r"\s*->\s*(?P<dst>(?:node|nats)-[1-9][0-9]*))$")


class Action(_Model):
    """One fault: `target`, from `start` for `duration`, `mode`, `params`.

    Targets: `node-N` (a notify server), `nats-N`, `clients` (every client), `publisher-N`,
    `subscriber-N`, or a link `SRC->DST` where SRC is `client`/`clients` (every client),
    `publisher-N`, `subscriber-N` or `node-N` and DST is `node-N` or `nats-N`. A link mode on a
    process target means every link into or out of it."""

    target: str
    start: Seconds
    duration: Seconds = Field(gt=0)
    mode: Mode
    params: dict[str, Any] = Field(default_factory=dict)
    name: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _cluster_target(cls, v: Any) -> Any:
        if isinstance(v, dict) and v.get("mode") in CLUSTER_MODES:
            v = dict(v)
            if "target" in v and not str(v["target"]).startswith("group:"):
                raise ValueError(f"mode {v['mode']}: target is `group:NAME` (whose owner "
                                 "counts) or left out (the first publisher group)")
            v.setdefault("target", "group:")
        return v

    @field_validator("target")
    @classmethod
    def _target(cls, v: str) -> str:
        if v.startswith("group:"):
            return v
        m = _TARGET.match(v.strip())
        if not m:
            raise ValueError(f"bad target {v!r}: node-N, nats-N, clients, publisher-N, "
                             "subscriber-N, or a link like client->node-1")
        if m.group("nats") or (m.group("dst") or "").startswith("nats"):
            raise ValueError(f"{v}: NATS servers are not a target yet (use mode "
                             "kill-nats-leader)")
        if (m.group("src") or "").startswith("node"):
            raise ValueError(f"{v}: node-to-node links are not a target yet")
        return v.strip()

    @model_validator(mode="after")
    def _params(self) -> Action:
        p, mode = self.params, self.mode
        allowed = {"delay": {"ms", "jitter_ms"}, "loss": {"percent", "rto_ms"},
                   "slow": {"bytes_per_s"}, "cut": set(), "flap": {"down", "up"},
                   "kill": {"signal"}, "pause": set(),
                   "disk_full": set(), "reset-nats": {"pause"},
                   **{m: set() for m in CLUSTER_MODES},
                   "delay-stream-leader": {"ms", "jitter_ms", "from_leader"}}[mode]
        unknown = set(p) - allowed
        if unknown:
            raise ValueError(f"params {sorted(unknown)} not known for mode {mode} "
                             f"(allowed: {sorted(allowed) or 'none'})")
        delay = mode in ("delay", "delay-stream-leader")
        if delay and not _num(p.get("ms"), 0):
            raise ValueError(f"mode {mode} needs params.ms (a number ≥ 0)")
        if delay and "jitter_ms" in p and not _num(p["jitter_ms"], 0):
            raise ValueError("params.jitter_ms must be a number ≥ 0")
        if mode == "delay-stream-leader" and not isinstance(p.get("from_leader", False), bool):
            raise ValueError("params.from_leader is true or false")
        if mode == "loss" and not _num(p.get("percent"), 0, 100):
            raise ValueError("mode loss needs params.percent (0 to 100)")
        if mode == "slow" and not _num(p.get("bytes_per_s"), 1):
            raise ValueError("mode slow needs params.bytes_per_s (≥ 1)")
        if mode == "flap":
            for k in ("down", "up"):
                try:
                    if parse_seconds(p.get(k)) <= 0:
                        raise ValueError
                except ValueError:
                    raise ValueError(f"mode flap needs params.{k} (a duration > 0, e.g. 3s)"
                                     ) from None
        if mode == "reset-nats" and not isinstance(p.get("pause", False), bool):
            raise ValueError("params.pause: true (SIGSTOP the node around the reset) or false")
        if mode == "kill" and p.get("signal", "KILL") not in ("KILL", "TERM"):
            raise ValueError("params.signal: KILL or TERM")
        if mode in CLUSTER_MODES:
            return self
        if self.target.startswith("group:"):
            raise ValueError(f"target {self.target}: only for {', '.join(CLUSTER_MODES)}")
        link = "->" in self.target
        if link and mode not in LINK_MODES:
            raise ValueError(f"mode {mode} applies to a process, not a link ({self.target})")
        if mode in (*NODE_MODES, "kill") and not self.target.startswith("node-"):
            raise ValueError(f"mode {mode} applies to node-N (a client is not restarted)")
        if mode == "reset-nats" and (link or not self.target.startswith("node-")):
            raise ValueError(f"mode {mode} applies to node-N (its NATS client connections)")
        return self

    @property
    def end(self) -> float:
        return self.start + self.duration

    @property
    def flap(self) -> tuple[float, float]:
        """Mode `flap`: (down, up) seconds of each cycle."""
        return parse_seconds(self.params["down"]), parse_seconds(self.params["up"])

    @property
    def label(self) -> str:
        if self.target == "group:":
            return self.name or self.mode
        return self.name or f"{self.mode} {self.target}"


def _num(v: Any, lo: float, hi: float | None = None) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool) and v >= lo
            and (hi is None or v <= hi))


class Expect(_Model):
    """What this scenario promises beyond the safety rules; each broken one is an
    `expectations` violation in the verdict (issue 32)."""

    #: every delivery of an acknowledged message to a subscriber comes at most this long after
    #: the acknowledgement (a tail lost on the way to an edge must be noticed, not wait for the
    #: next burst)
    late_after_ack: Seconds | None = None
    #: at most this many members removed (after a suspect timeout) in the whole run
    removals: int | None = Field(default=None, ge=0)


class Probe(_Model):
    """`notify probe` beside the faults (issue 33; docs/slo.md for the SLIs): the run starts
    it with these flags against `targets` (default: every node), each through a link proxy of
    its own (`probe->node-N`), scrapes its `/metrics` every `scrape_every` into
    `probe/metrics.jsonl` and reports each SLI's good/total before, during and after every
    fault. The thresholds define the SLIs: a chaos run wants them short, so that a fault's bad
    events are counted inside its window (they are counted when their deadline passes)."""

    #: SDK publishes per second, per target
    rate: float = Field(default=20.0, gt=0, le=1000)
    #: the probe group (a group of its own: the verdict's clients must not be in it)
    group: str = Field(default="probe", min_length=1)
    #: the nodes probed (`node-N`); empty: every node
    targets: list[str] = Field(default_factory=list)
    #: publish SLI: answered within this long
    publish_deadline: Seconds = Field(default=1.0, gt=0)
    #: delivery SLI: received within this long of the publish call
    latency_threshold: Seconds = Field(default=0.5, gt=0)
    #: seconds between deliberate drops of the receiver's socket (resume SLI); 0: never
    reconnect_every: Seconds = 0.0
    resume_deadline: Seconds = Field(default=5.0, gt=0)
    #: seconds between deliberate view changes (view-change SLI); 0: never
    view_change_every: Seconds = 0.0
    view_change_threshold: Seconds = Field(default=1.0, gt=0)
    #: seconds between two scrapes of the prober's /metrics
    scrape_every: Seconds = Field(default=1.0, ge=0.1, le=10)
    #: an SLI `dropped` when its ratio during a fault is more than this below the one before,
    #: and `recovered` when the one after is at most this below it
    tolerance: float = Field(default=0.05, ge=0, lt=1)

    @field_validator("targets")
    @classmethod
    def _nodes(cls, v: list[str]) -> list[str]:
        for t in v:
            if not _NODE.match(t):
                raise ValueError(f"{t!r} is not a node (node-N)")
        if len(set(v)) != len(v):
            raise ValueError("a node is named twice")
        return v


class Scenario(_Model):
    name: str | None = None
    description: str = ""
    duration: Seconds = Field(gt=0)
    #: after publishing stops, subscribers get at most this long to deliver the rest
    drain: Seconds = 15.0
    #: seconds of traffic before t=0 that the report leaves out (connections settle)
    warmup: Seconds = 1.0
    system: System = Field(default_factory=System)
    clients: Clients = Clients()
    actions: list[Action] = Field(default_factory=list)
    expect: Expect = Field(default_factory=Expect)
    #: a prober beside the faults, its SLIs per phase in the report (issue 33); none: no prober
    probe: Probe | None = None

    @model_validator(mode="after")
    def _fit(self) -> Scenario:
        pubs, subs = self.clients.publishers.count, self.clients.subscribers.count
        if self.probe is not None:
            for t in self.probe.targets:
                self._node_exists("probe.targets", t)
            c = self.clients
            if self.probe.group in {*c.publishers.groups, *c.subscribers.groups,
                                    *c.churners.groups}:
                raise ValueError(f"probe.group: {self.probe.group!r} is a group of the "
                                 "scenario's clients; the prober needs one of its own")
        for name, node in self.clients.edges.items():
            self._node_exists(f"clients.edges.{name}", node)
        for i, a in enumerate(self.actions):
            if a.mode in CLUSTER_MODES:
                if not self.system.cluster:
                    raise ValueError(f"actions[{i}]: mode {a.mode} needs cluster mode "
                                     "(system.nats: 3)")
                if a.mode == "kill-edge" and self.system.nodes < 3:
                    raise ValueError(f"actions[{i}]: kill-edge needs 3 nodes (an owner and "
                                     "two others)")
                if a.mode == "pause-owner" and a.duration <= self.system.lease_ttl:
                    raise ValueError(f"actions[{i}]: pause-owner must last longer than "
                                     f"system.lease_ttl ({self.system.lease_ttl:g}s)")
                if a.mode in ROUTE_MODES and a.end > self.duration:
                    raise ValueError(f"actions[{i}] ends at {a.end:g}s, after duration "
                                     f"{self.duration:g}s")
                continue
            if a.end > self.duration:
                raise ValueError(f"actions[{i}] ends at {a.end:g}s, after duration "
                                 f"{self.duration:g}s")
            if a.mode == "reset-nats" and not self.system.cluster:
                raise ValueError(f"actions[{i}]: mode reset-nats needs cluster mode "
                                 "(system.nats: 3): a single node has no NATS connection")
            for kind, n in (("publisher", pubs), ("subscriber", subs), ("node", self.system.nodes)):
                for m in re.finditer(rf"{kind}-([0-9]+)", a.target):
                    if int(m.group(1)) > n:
                        raise ValueError(f"actions[{i}]: {a.target} does not exist "
                                         f"({n} {kind}s)")
        return self

    def _node_exists(self, where: str, node: str) -> None:
        """`node` (`node-N`, checked by the field) is one of the system's nodes."""
        if int(node.removeprefix("node-")) > self.system.nodes:
            raise ValueError(f"{where}: {node} does not exist ({self.system.nodes} nodes)")


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and line."""


def _positions(node: yaml.Node, path: tuple[Any, ...],
               out: dict[tuple[Any, ...], int]) -> None:
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = k.value
            out[(*path, key)] = k.start_mark.line + 1
            _positions(v, (*path, key), out)
            out[(*path, key)] = k.start_mark.line + 1  # the key's line, not the value's
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _positions(v, (*path, i), out)


def _line_of(loc: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> int | None:
    path = tuple(x for x in loc if not (isinstance(x, str) and "[" in x))  # drop union tags
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get(())


def loads(text: str, source: str = "<scenario>") -> Scenario:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise ScenarioError(f"{where}: not valid YAML: {getattr(e, 'problem', e)}") from e
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a YAML mapping (duration, system, ...)")
    lines: dict[tuple[Any, ...], int] = {}
    if node is not None:
        _positions(node, (), lines)
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        msgs = []
        for err in e.errors():
            loc = tuple(err["loc"])
            m = re.match(r"actions\[([0-9]+)\]", err["msg"].removeprefix("Value error, "))
            if not loc and m:  # a check across fields that names its action
                loc = ("actions", int(m.group(1)))
            m = re.match(r"probe\.([a-z_]+):", err["msg"].removeprefix("Value error, "))
            if not loc and m:  # ... or the probe's field
                loc = ("probe", m.group(1))
            line = _line_of(loc, lines)
            where = ".".join(str(x) for x in loc) or "(top)"
            msg = err["msg"].removeprefix("Value error, ")
            if isinstance(err.get("input"), str | int | float) and err["type"] not in (
                    "value_error", "assertion_error"):
                msg += f" (got {err['input']!r})"
            msgs.append(f"{source}:{line if line is not None else '?'}: {where}: {msg}")
        raise ScenarioError("\n".join(msgs)) from None


def load(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ScenarioError(f"{p}: {e.strerror}") from e
    return loads(text, str(p))
