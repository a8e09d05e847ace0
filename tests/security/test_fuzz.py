"""G12 fuzzing: random and mutated frames thrown at a real server for a bounded time.

The server (with token auth) runs on its own event loop in a thread; hypothesis drives a hostile
client, mallory, from the test thread with the synchronous websockets client. Mallory holds a
valid token for herself that lets her publish to `g` but not join it, and join `h`; she also
sends forged, subject-less, expired, garbage and missing tokens, claims other members' ids, and
every kind of broken or mutated frame. (A stolen valid token is not tried: its holder *is* that
member, see docs/security.md.) After each example:

- the server is up and has caught no internal error;
- alice's next message in `g` is bob's next frame, in FIFO order (seq + 1): bob, who accepts
  members only, never gets anything from mallory (a non-member) and never misses a message;
- eve, a member of `h` only, never receives a frame of `g`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import ClientConnection, connect

from notify.core import CoreConfig, Limits, Timeouts
from notify.server import NotifyServer
from notify.server.auth import TokenVerifier
from tests.security.conftest import OTHER_SECRET, SECRET, token

ALL = {"*": ["*"]}
MALLORY = {"g": ["publish"], "h": ["*"], "x*": ["*"]}


class ServerThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = NotifyServer(
            CoreConfig(Timeouts(suspect_timeout=0.5, flush_timeout=1.0),
                       Limits(max_frame_bytes=64 * 1024, publish_rate=2000, publish_burst=200)),
            port=0, verifier=TokenVerifier(secret=SECRET))
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Member:
    """A well-behaved synchronous member: flushes when asked, records everything."""

    def __init__(self, url: str, name: str, group: str, accept_from: str = "members") -> None:
        self.name = name
        self.seen: list[dict[str, Any]] = []
        self._cm = connect(url, compression=None, max_size=None)
        self.ws: ClientConnection = self._cm.__enter__()
        self.send({"type": "hello", "protocol": 1, "token": token(name, ALL)})
        assert self.next(lambda f: f["type"] == "welcome")
        self.send({"type": "join", "req": "j", "group": group, "accept_from": accept_from})

    def installed(self, *with_: str) -> dict[str, Any]:
        return self.next(lambda f: f["type"] == "view_install"
                         and set(with_) | {self.name} <= set(f["members"]))

    def send(self, f: dict[str, Any]) -> None:
        self.ws.send(orjson.dumps(f).decode())

    def frames(self, timeout: float) -> Iterator[dict[str, Any]]:
        while True:
            f = orjson.loads(self.ws.recv(timeout))
            for inner in f["frames"] if f.get("type") == "batch" else [f]:
                if inner["type"] == "view_change":
                    self.send({"type": "flush_ok", "group": inner["group"],
                               "view": inner["proposed"]})
                yield inner

    def next(self, pred: Any, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for f in self.frames(timeout):
            self.seen.append(f)
            if pred(f):
                return f
            assert time.monotonic() < deadline, f"{self.name}: nothing matched"
        raise AssertionError("unreachable")

    def drain(self) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        try:
            for f in self.frames(0.05):
                got.append(f)
        except TimeoutError:
            pass
        self.seen.extend(got)
        return got


# -- strategies -------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12)
groups = st.sampled_from(["g", "h", "x1", "", "bad name", "g" * 300, "x*", "../g"])
members = st.sampled_from(["mallory", "alice", "bob", "eve", "", "x" * 300])
tokens = st.one_of(
    st.just("mine"), st.just("no-sub"), st.just("forged"), st.just("expired"), st.none(),
    st.text(max_size=40))
TEMPLATES: list[dict[str, Any]] = [
    {"type": "join", "req": "r", "group": "h"},
    {"type": "join", "req": "r", "group": "g", "want_state": True},
    {"type": "leave", "req": "r", "group": "h"},
    {"type": "publish", "req": "r", "group": "g", "id": "i", "view": 0, "payload": "evil"},
    {"type": "publish", "req": "r", "group": "g", "id": "i", "view": 2, "order": "total",
     "atomic": True, "same_view": True, "payload": "evil"},
    {"type": "ack", "group": "g", "offsets": [1, 2, 3]},
    {"type": "flush_ok", "group": "g", "view": 3},
    {"type": "refresh", "token": "x"},
    {"type": "state_chunk", "group": "g", "transfer": "t", "index": 0, "last": True,
     "data": "AAAA"},
    {"type": "hello", "protocol": 1, "member": "bob"},
]


@st.composite
def frames(draw: st.DrawFn) -> str | bytes:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=64))
    if kind == 1:
        return draw(st.text(max_size=64))
    f = dict(draw(st.sampled_from(TEMPLATES)))
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.integers(0, 4))
        key = draw(st.sampled_from([*sorted(f), "type", "extra"]))
        if op == 0:
            f.pop(key, None)
        elif op == 1:
            f[key] = draw(json_values)
        elif op == 2:
            f["group"] = draw(groups)
        elif op == 3:
            f["member"] = draw(members)
        else:
            f["type"] = draw(st.sampled_from(["hello", "join", "publish", "ack", "nope", ""]))
    if f.get("type") == "publish" and isinstance(f.get("id"), str):
        f["id"] = f["id"] + str(draw(st.integers(0, 10**6)))
    if draw(st.booleans()):
        return orjson.dumps(f).decode()
    return orjson.dumps(f)  # binary WebSocket message


def resolve(tok: str | None) -> str | None:
    return {"mine": token("mallory", MALLORY), "no-sub": token("", ALL),
            "forged": token("mallory", ALL, key=OTHER_SECRET),
            "expired": token("mallory", MALLORY, ttl=-10)}.get(tok or "", tok)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def world() -> Iterator[dict[str, Any]]:
    srv = ServerThread()
    url = srv.server.url
    alice = Member(url, "alice", "g")
    alice.installed()
    bob = Member(url, "bob", "g")  # alice reads (and flushes) while bob waits for his install
    alice.installed("bob")
    install = bob.installed("alice")
    eve = Member(url, "eve", "h", accept_from="any")
    eve.installed()
    w = {"srv": srv, "url": url, "alice": alice, "bob": bob, "eve": eve, "n": 0, "seq": 0,
         "view": install["view"], "start": time.monotonic()}
    yield w
    assert w["n"] >= 20, f"only {w['n']} examples ran in the time budget"
    for m in (alice, bob, eve):
        m._cm.__exit__(None, None, None)
    srv.stop()


_BUDGET = 8.0  # seconds of fuzzing at most, whatever max_examples says


# The websockets sync clients' background threads draw masking keys from `random` while
# hypothesis generates data; that is not the strategies using `random`.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
@settings(max_examples=120, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(hello_token=tokens, hello_member=st.none() | members,
       batch=st.lists(frames(), min_size=1, max_size=12))
def test_G12_fuzz_never_crashes_never_leaks_and_bystanders_keep_order(
        world: dict[str, Any], hello_token: str | None, hello_member: str | None,
        batch: list[str | bytes]) -> None:
    if time.monotonic() - world["start"] > _BUDGET:
        return
    srv: NotifyServer = world["srv"].server
    alice, bob, eve = world["alice"], world["bob"], world["eve"]
    try:
        with connect(world["url"], compression=None, max_size=None, open_timeout=5) as m:
            hello: dict[str, Any] = {"type": "hello", "protocol": 1}
            if (tok := resolve(hello_token)) is not None:
                hello["token"] = tok
            if hello_member is not None:
                hello["member"] = hello_member
            m.send(orjson.dumps(hello).decode())
            for data in batch:
                m.send(data)
            # read what comes back until the server has answered or closed
            with pytest.raises((TimeoutError, ConnectionClosed)):
                while True:
                    m.recv(0.05)
    except (ConnectionClosed, WebSocketException, OSError):
        pass

    # alice's next message is bob's next deliver: nothing lost, nothing from mallory, in order
    world["n"] += 1
    n = world["n"]
    alice.send({"type": "publish", "req": f"a{n}", "group": "g", "id": f"a{n}",
                "view": world["view"], "payload": f"a{n}"})
    d = bob.next(lambda f: f["type"] == "deliver")
    world["seq"] += 1
    assert (d["payload"], d["sender"], d["seq"], d["stream"]) == \
        (f"a{n}", "alice", world["seq"], "fifo:alice"), d
    alice.drain()
    assert srv.hub.groups["g"].view.members == ("alice", "bob")
    for f in eve.drain():
        assert f.get("group") != "g", f
    assert not [f for f in bob.seen if f["type"] == "deliver" and f["sender"] != "alice"]
    assert srv.stats.internal_errors == 0
