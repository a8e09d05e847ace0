"""The scenario file: good files parse to what they say, bad ones are refused with the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from notify_chaos.cli import shipped
from notify_chaos.scenario import ScenarioError, load, loads, parse_seconds

GOOD = """\
name: demo
description: one line
duration: 2m
drain: 500ms
system:
  nodes: 1
  store: memory
  server_args: [--suspect-timeout, "2"]
  nats: 0
clients:
  publishers: {count: 2, group: g1, rate: 50, size: 4000, order: total, atomic: true}
  subscribers: {count: 3, groups: [g1, g2]}
actions:
  - target: node-1
    start: 10s
    duration: 2
    mode: kill
  - {target: "client->node-1", start: 1m, duration: 0.5m, mode: delay,
     params: {ms: 10, jitter_ms: 5}}
  - {target: subscriber-2, start: 5s, duration: 1s, mode: pause}
  - {target: "subscriber-1->node-1", start: 5s, duration: 1s, mode: loss, params: {percent: 5}}
"""


def test_a_good_file_parses_with_units_and_aliases() -> None:
    s = loads(GOOD)
    assert (s.name, s.duration, s.drain) == ("demo", 120.0, 0.5)
    assert s.system.store == "memory" and s.system.server_args == ["--suspect-timeout", "2"]
    p, sub = s.clients.publishers, s.clients.subscribers
    assert (p.count, p.groups, p.rate, p.size, p.order, p.atomic) == (2, ["g1"], 50, 4000,
                                                                      "total", True)
    assert sub.groups == ["g1", "g2"]
    kill, delay, pause, loss = s.actions
    assert (kill.target, kill.start, kill.duration, kill.mode) == ("node-1", 10, 2, "kill")
    assert (delay.start, delay.end, delay.params) == (60, 90, {"ms": 10, "jitter_ms": 5})
    assert pause.mode == "pause" and loss.params == {"percent": 5}


def test_seconds() -> None:
    assert [parse_seconds(x) for x in ("20s", "500ms", "1.5m", "2h", 3, 2.5, " 7 ")] == [
        20, 0.5, 90, 7200, 3, 2.5, 7]
    for bad in ("ten", "5 days", True, None, "-3s"):
        with pytest.raises(ValueError):
            parse_seconds(bad)


@pytest.mark.parametrize(("change", "line", "words"), [
    (("duration: 2m", "duration: soon"), 3, "not a duration"),
    (("    mode: kill", "    mode: explode"), 17, "kill"),
    (("  - target: node-1", "  - target: router-1"), 14, "bad target"),
    (("nats: 0", "nats: 2"), 5, "cluster mode"),
    (("nodes: 1", "nodes: 3"), 5, "needs cluster mode"),
    (("params: {ms: 10, jitter_ms: 5}", "params: {jitter_ms: 5}"), 18, "needs params.ms"),
    (("params: {percent: 5}", "params: {percent: 150}"), 21, "percent"),
    (("params: {percent: 5}", "params: {percent: 5, colour: red}"), 21, "colour"),
    (("rate: 50", "rate: -1"), 11, "greater than 0"),
    (("count: 3", "count: three"), 12, "integer"),
    (("  store: memory", "  store: postgres"), 7, "sqlite"),
    (("    start: 10s", "    start: 10s\n    colour: red"), 16, "colour"),
    (("{target: subscriber-2,", "{target: subscriber-9,"), 20, "does not exist"),
    (("start: 1m, duration: 0.5m", "start: 1m, duration: 1.5m"), 18, "after duration"),
    (("target: \"client->node-1\"", "target: \"node-1->nats-2\""), 18, "NATS"),
    (("{target: subscriber-2, start: 5s, duration: 1s, mode: pause}",
      "{target: subscriber-2, start: 5s, duration: 1s, mode: kill}"), 20, "applies to node-N"),
    (("{target: subscriber-2, start: 5s, duration: 1s, mode: pause}",
      "{target: \"client->node-1\", start: 5s, duration: 1s, mode: kill}"), 20, "not a link"),
])
def test_a_bad_file_is_refused_naming_the_line(change: tuple[str, str], line: int,
                                                words: str) -> None:
    old, new = change
    assert old in GOOD
    with pytest.raises(ScenarioError) as e:
        loads(GOOD.replace(old, new), "demo.yaml")
    assert f"demo.yaml:{line}:" in str(e.value), str(e.value)
    assert words in str(e.value)


def test_not_yaml_or_not_a_mapping() -> None:
    with pytest.raises(ScenarioError, match=r"x.yaml:3: not valid YAML"):
        loads("duration: 1\nclients: [a, {b\n", "x.yaml")
    with pytest.raises(ScenarioError, match="a YAML mapping"):
        loads("- 1\n- 2\n", "x.yaml")
    with pytest.raises(ScenarioError, match="duration"):
        loads("description: no duration\n", "x.yaml")


def test_every_shipped_scenario_is_valid_short_and_described(tmp_path: Path) -> None:
    names = shipped()
    assert {"sigkill-sqlite", "cut-short", "cut-long", "slow-consumer", "delay-10ms",
            "disk-full", "negative-memory-sigkill"} <= set(names)
    for name, path in names.items():
        s = load(path)
        assert s.description and "\n" not in s.description, name
        assert s.duration + s.drain < 120, name  # each under 2 minutes
    neg = load(names["negative-memory-sigkill"])
    assert neg.system.store == "memory" and any(a.mode == "kill" for a in neg.actions)


CLUSTER = """
duration: 20s
system: {nodes: 3, nats: 3, store: jetstream, lease_ttl: 2}
clients:
  publishers: {count: 1, group: g1}
  subscribers: {count: 3, group: g1}
actions:
  - {mode: kill-owner, start: 5s, duration: 4s}
  - {mode: pause-owner, target: "group:g1", start: 10s, duration: 3s}
  - {mode: kill-edge, start: 14s, duration: 2s}
  - {mode: kill-nats-leader, start: 17s, duration: 2s}
"""


def test_cluster_scenario_and_its_faults() -> None:
    s = loads(CLUSTER)
    assert s.system.cluster and s.system.nodes == 3 and s.system.lease_ttl == 2
    assert [a.label for a in s.actions] == ["kill-owner", "pause-owner group:g1", "kill-edge",
                                            "kill-nats-leader"]


@pytest.mark.parametrize(("old", "new", "words"), [
    ("duration: 3s}", "duration: 1s}", "longer than"),
    ("store: jetstream", "store: sqlite", "store: jetstream"),
    ("target: \"group:g1\"", "target: node-1", "group:NAME"),
    ("nats: 3", "nats: 0", "needs cluster mode"),
])
def test_bad_cluster_scenarios(old: str, new: str, words: str) -> None:
    assert old in CLUSTER
    with pytest.raises(ScenarioError) as e:
        loads(CLUSTER.replace(old, new))
    assert words in str(e.value), str(e.value)


ROUTE_DELAY = """
duration: 30s
system: {nodes: 3, nats: 3, store: jetstream}
actions:
  - {mode: delay-stream-leader, start: 5s, duration: 20s, params: {ms: 10, jitter_ms: 1}}
"""


def test_delay_stream_leader() -> None:
    (a,) = loads(ROUTE_DELAY).actions
    assert a.label == "delay-stream-leader" and a.params == {"ms": 10, "jitter_ms": 1}
    assert load(shipped()["cluster-table3-delay"]).actions[0].mode == "delay-stream-leader"
    (b,) = loads(ROUTE_DELAY.replace("jitter_ms: 1", "from_leader: true")).actions
    assert b.params == {"ms": 10, "from_leader": True}


@pytest.mark.parametrize(("old", "new", "words"), [
    ("params: {ms: 10, jitter_ms: 1}", "params: {}", "needs params.ms"),
    ("jitter_ms: 1", "percent: 1", "not known"),
    ("duration: 20s", "duration: 30s", "after duration"),
    ("nats: 3", "nats: 0", "needs cluster mode"),
    ("jitter_ms: 1", "from_leader: 1", "true or false"),
])
def test_bad_delay_stream_leader(old: str, new: str, words: str) -> None:
    assert old in ROUTE_DELAY
    with pytest.raises(ScenarioError) as e:
        loads(ROUTE_DELAY.replace(old, new).replace("nats: 0, store: jetstream", "nats: 0"))
    assert words in str(e.value), str(e.value)


DEVICES = """
duration: 20s
clients:
  publishers: {count: 1, group: g1}
  subscribers: {count: 3, group: g1}
  users: {alice: [subscriber-1, subscriber-2]}
actions:
  - {target: subscriber-1, start: 2s, duration: 10s, mode: flap, params: {down: 3s, up: 500ms}}
"""


def test_users_and_flap() -> None:
    """Issue 29: two clients as instances of one user, and a link that flaps."""
    s = loads(DEVICES)
    c = s.clients
    assert [c.user_of(n) for n in ("subscriber-1", "subscriber-2", "subscriber-3",
                                   "publisher-1")] == ["alice", "alice", None, None]
    (a,) = s.actions
    assert a.mode == "flap" and a.flap == (3.0, 0.5)
    flap = load(shipped()["two-devices-flap"])
    assert flap.clients.users == {"alice": ["subscriber-1", "subscriber-2"]}
    assert all(a.mode == "flap" for a in flap.actions) and flap.actions[0].duration == 60


@pytest.mark.parametrize(("old", "new", "words"), [
    ("alice: [", "al#ice: [", "not a user id"),
    ("subscriber-2]", "subscriber-4]", "not one of the clients"),
    ("subscriber-2]", "subscriber-2], bob: [subscriber-1]", "instance of alice and bob"),
    ("alice: [subscriber-1, subscriber-2]", "alice: []", "name its clients"),
    ("params: {down: 3s, up: 500ms}", "params: {down: 3s}", "needs params.up"),
    ("params: {down: 3s, up: 500ms}", "params: {down: 0s, up: 1s}", "needs params.down"),
    ("params: {down: 3s, up: 500ms}", "params: {down: 1s, up: 1s, ms: 3}", "not known"),
])
def test_bad_users_and_flap(old: str, new: str, words: str) -> None:
    assert old in DEVICES
    with pytest.raises(ScenarioError, match=words):
        loads(DEVICES.replace(old, new), "d.yaml")


PLACED = """
duration: 30s
system: {nodes: 3, nats: 3, store: jetstream}
clients:
  publishers: {count: 2, groups: ["t{1..3}", x], order: fifo}
  subscribers: {count: 2, groups: ["t{1..3}"]}
  churners: {count: 2, group: g1, stay: 1.5s, away: 500ms}
  schedule: {publisher-1: [[0s, 200ms], [22s, 24s]]}
  edges: {publisher-2: node-3, subscriber-1: node-2}
  pinned: [subscriber-1]
actions:
  - {target: node-2, start: 2.3s, duration: 400ms, mode: reset-nats, params: {pause: true}}
expect: {late_after_ack: 3s, removals: 0}
"""


def test_placement_schedules_churners_ranges_reset_and_expectations() -> None:
    """Issue 32's fields: where clients connect, when publishers publish, members that churn,
    group ranges, resetting a node's NATS connections, and what the verdict must also hold."""
    s = loads(PLACED)
    c = s.clients
    assert c.publishers.groups == ["t1", "t2", "t3", "x"] and c.subscribers.groups[-1] == "t3"
    assert (c.churners.count, c.churners.groups, c.churners.stay, c.churners.away) == (
        2, ["g1"], 1.5, 0.5)
    assert c.schedule == {"publisher-1": [(0.0, 0.2), (22.0, 24.0)]}
    assert c.edges == {"publisher-2": "node-3", "subscriber-1": "node-2"}
    assert c.pinned == ["subscriber-1"]
    (a,) = s.actions
    assert (a.mode, a.target, a.params) == ("reset-nats", "node-2", {"pause": True})
    assert (s.expect.late_after_ack, s.expect.removals) == (3.0, 0)
    assert loads(GOOD).clients.churners.count == 0 and loads(GOOD).expect.removals is None
    sixty = load(shipped()["cluster-takeover-60-groups"])
    assert sixty.clients.publishers.groups == [f"t{i}" for i in range(1, 61)]


@pytest.mark.parametrize(("old", "new", "words"), [
    ("publisher-1: [[0s", "publisher-3: [[0s", "not one of the 2 publishers"),
    ("publisher-1: [[0s", "subscriber-1: [[0s", "not one of the 2 publishers"),
    ("[22s, 24s]", "[24s, 22s]", "ends before it starts"),
    ("subscriber-1: node-2}", "subscriber-1: node-4}", "does not exist"),
    ("subscriber-1: node-2}", "subscriber-1: nats-2}", "not a node"),
    ("subscriber-1: node-2}", "subscriber-9: node-2}", "not one of the clients"),
    ("pinned: [subscriber-1]", "pinned: [subscriber-2]", "no node in `edges`"),
    ("\"t{1..3}\", x]", "\"t{3..1}\"]", "LOW <= HIGH"),
    ("params: {pause: true}", "params: {pause: 2}", "params.pause"),
    ("target: node-2, start: 2.3s", "target: subscriber-1, start: 2.3s", "node-N"),
    ("nats: 3, store: jetstream", "nats: 0, store: sqlite, nodes: 1", "needs cluster mode"),
    ("removals: 0", "removals: -1", "greater than or equal to 0"),
    ("stay: 1.5s", "stay: 0s", "greater than 0"),
])
def test_bad_placement_schedules_and_resets(old: str, new: str, words: str) -> None:
    assert old in PLACED
    text = PLACED.replace(old, new)
    if "nodes: 1" in new:
        text = text.replace("system: {nodes: 3, ", "system: {").replace(
            "publisher-2: node-3, subscriber-1: node-2", "subscriber-1: node-1")
    with pytest.raises(ScenarioError) as e:
        loads(text, "p.yaml")
    assert words in str(e.value), str(e.value)
