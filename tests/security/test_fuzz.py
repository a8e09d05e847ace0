"""G12 fuzzing: random and mutated frames thrown at a real server for a bounded time.

The server (with token auth) runs on its own event loop in a thread; hypothesis drives a hostile
client, mallory, from the test thread with the synchronous websockets client. Mallory holds a
valid token for herself that lets her publish to `g` but not join it, and join `h`; she also
sends forged, subject-less, expired, garbage and missing tokens, claims other members' ids, and
every kind of broken or mutated frame: random bytes and text, templates with fields dropped,
retyped (`"3"` for a number, `1.0`, `"yes"` for a boolean), renamed (`sameView`) or added, `req`
as an integer, and payloads JSON allows but the server cannot carry (integers beyond 64 bits,
NaN and Infinity, lone surrogates, 10,000-level nesting), plus byte-level edits of valid frames.
A non-member's FIFO publish goes to its own `ext:` stream of `g`: the path on which one
oversized integer used to kill a stream worker and freeze the group's next view change.

Alice and bob, members of `g`, keep publishing throughout. After each example:

- the server is up and has caught no internal error;
- alice and bob each receive both their messages of the round, in FIFO order (seq + 1 per
  stream), and never anything from mallory (a non-member; they accept members only);
- every few examples a newcomer joins `g` and leaves again: every member installs both views
  (a frozen install barrier is the failure this catches);
- eve, a member of `h` only, never receives a frame of `g`.

After the fuzzing, a last joiner must be installed, and no task of the server's event loop may
have died with an exception. Every frame the server sent is checked against the schema by the
session hook (tests/conftest.py); this module also checks that the hook saw them.

The budget is a few seconds; set NOTIFY_FUZZ_SECONDS to fuzz longer (e.g. 300).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import deque
from collections.abc import Coroutine, Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import ClientConnection, connect

from notify.core import CoreConfig, Limits, Timeouts
from notify.core import events as ev
from notify.core.actions import Error, Rejected
from notify.runtime.frames import dumps
from notify.server.app import NotifyServer
from notify.server.auth import TokenVerifier
from notify.wire import Batch, parse_any, payload_problem
from tests.schema_check import CHECK, problems
from tests.security.conftest import OTHER_SECRET, SECRET, token

ALL = {"*": ["*"]}
MALLORY = {"g": ["publish"], "h": ["*"], "x*": ["*"]}


class ServerThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        #: every task the server's loop ever ran: a stream worker or outbox that died with an
        #: exception shows up here, whatever the server's internals look like
        self.tasks: list[asyncio.Task[Any]] = []

        def factory(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any],
                    **kw: Any) -> asyncio.Task[Any]:
            task = asyncio.Task(coro, loop=loop, **kw)
            self.tasks.append(task)
            return task

        self.loop.set_task_factory(factory)  # type: ignore[arg-type]
        self.server = NotifyServer(
            CoreConfig(Timeouts(suspect_timeout=0.5, flush_timeout=1.0),
                       Limits(max_frame_bytes=64 * 1024, publish_rate=2000, publish_burst=200)),
            port=0, verifier=TokenVerifier(secret=SECRET))
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)

    def dead_tasks(self) -> list[str]:
        async def look() -> list[str]:
            return [f"{t.get_coro()!r:.80}: {t.exception()!r}" for t in list(self.tasks)
                    if t.done() and not t.cancelled() and t.exception() is not None]

        return asyncio.run_coroutine_threadsafe(look(), self.loop).result(10)

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
        self._buffer: deque[dict[str, Any]] = deque()
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
        """Frames in order, a batch unpacked; what a caller stops reading at stays buffered."""
        while True:
            while self._buffer:
                yield self._buffer.popleft()
            f = orjson.loads(self.ws.recv(timeout))
            for inner in f["frames"] if f.get("type") == "batch" else [f]:
                if inner["type"] == "view_change":
                    self.send({"type": "flush_ok", "group": inner["group"],
                               "view": inner["proposed"]})
                self._buffer.append(inner)

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

#: a string value that the serialiser replaces with this many nested arrays
DEEP_MARK = "\x00deep\x00"
DEEP = 10_000

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12)
#: what JSON (and JavaScript) allows and the server cannot carry
nasty_scalars = st.one_of(
    st.integers(2**64, 10**30), st.integers(-(10**30), -(2**63) - 1),
    st.sampled_from([float("nan"), float("inf"), float("-inf"), "\ud800", "split \ud83d",
                     "\udfff!", DEEP_MARK]))
nasty_values = st.recursive(
    nasty_scalars, lambda inner: st.lists(inner, min_size=1, max_size=3)
    | st.dictionaries(st.text(max_size=4) | st.just("\udc00"), inner, min_size=1, max_size=3),
    max_leaves=4)
#: a valid field under another name, or one no frame has
unknown_fields = st.sampled_from(["sameView", "wantState", "acceptFrom", "Type", "req ", "extra",
                                  "payload2", "resume_point", "member"])
#: a wrong type for a known field: JavaScript's habits and lax parsers' coercions
wrong_types = st.sampled_from(["3", 1.0, 1e3, "yes", "true", 1, 0, True, None, [], {},
                               -5, 2**64, "fifo", " "])
groups = st.sampled_from(["g", "h", "x1", "", "bad name", "g" * 300, "x*", "../g"])
members = st.sampled_from(["mallory", "alice", "bob", "eve", "", "x" * 300])
#: mostly her own valid token: a refused hello tests little beyond the hello
tokens = st.sampled_from(["mine"] * 4 + ["no-sub", "forged", "expired", None]) \
    | st.text(max_size=40)
TEMPLATES: list[dict[str, Any]] = [
    {"type": "join", "req": "r", "group": "h"},
    {"type": "join", "req": "r", "group": "g", "want_state": True},
    {"type": "join", "req": 1, "group": "h", "resume": {"epoch": 1, "offset": 0}},
    {"type": "leave", "req": "r", "group": "h"},
    {"type": "publish", "req": "r", "group": "g", "id": "i", "view": 0, "payload": "evil"},
    {"type": "publish", "req": 7, "group": "h", "id": "i", "view": 0, "payload": {"a": 1}},
    {"type": "publish", "req": "r", "group": "g", "id": "i", "view": 2, "order": "total",
     "atomic": True, "same_view": True, "payload": "evil"},
    {"type": "ack", "group": "g", "offsets": [1, 2, 3]},
    {"type": "flush_ok", "group": "g", "view": 3},
    {"type": "refresh", "token": "x"},
    {"type": "state_chunk", "group": "g", "transfer": "t", "index": 0, "last": True,
     "data": "AAAA"},
    {"type": "checkpoint", "req": "c", "group": "h", "index": 0, "last": True, "data": "AAAA",
     "position": {"epoch": 1, "offset": 0}},
    {"type": "hello", "protocol": 1, "member": "bob"},
]
#: tokens spliced into the text of a valid frame
SPLICES = ["NaN", "Infinity", "-1e400", '"\\ud800"', "123456789012345678901234567890", "[" * 300,
           "]", "{", "}", ",", ":", '"', "\\", "null", "true", "\x00", "\u00e9", '"sameView":true,']


def serialise(f: dict[str, Any]) -> str:
    """Like a JavaScript client: writes big integers, NaN/Infinity and lone surrogates (which
    orjson refuses to), then splices in the deep nestings."""
    text = json.dumps(f, allow_nan=True)
    return text.replace(json.dumps(DEEP_MARK), "[" * DEEP + "]" * DEEP)


@st.composite
def frames(draw: st.DrawFn) -> str | bytes:
    kind = draw(st.integers(0, 11))
    if kind == 0:
        return draw(st.binary(max_size=64))
    if kind == 1:
        return draw(st.text(max_size=64))
    f = dict(draw(st.sampled_from(TEMPLATES)))
    if kind == 2:  # a publish whose payload cannot be carried, the rest of it valid
        f = {"type": "publish", "req": draw(st.sampled_from(["r", 5])), "group": "g",
             "id": "nasty", "view": 0, "payload": draw(nasty_values)}
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.integers(0, 7))
        key = draw(st.sampled_from([*sorted(f), "type", "extra"]))
        if op == 0:
            f.pop(key, None)
        elif op == 1:
            f[key] = draw(json_values)
        elif op == 2:
            f["group"] = draw(groups)
        elif op == 3:
            f["member"] = draw(members)
        elif op == 4:
            f[draw(unknown_fields)] = draw(json_values)
        elif op == 5:
            f[key] = draw(wrong_types)
        elif op == 6:
            f[key] = draw(nasty_values)
        else:
            f["type"] = draw(st.sampled_from(["hello", "join", "publish", "ack", "nope", ""]))
    if f.get("type") == "publish" and isinstance(f.get("id"), str):
        f["id"] = f["id"] + str(draw(st.integers(0, 10**6)))
    text = serialise(f)
    if kind == 3:  # byte-level edits of a (probably) valid frame
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(0, len(text)))
            j = draw(st.integers(i, min(len(text), i + 8)))
            text = text[:i] + draw(st.sampled_from([*SPLICES, "", text[i:j] * 2])) + text[j:]
    if draw(st.booleans()):
        return text
    return text.encode("utf-8", "surrogatepass")  # a binary WebSocket message


def resolve(tok: str | None) -> str | None:
    return {"mine": token("mallory", MALLORY), "no-sub": token("", ALL),
            "forged": token("mallory", ALL, key=OTHER_SECRET),
            "expired": token("mallory", MALLORY, ttl=-10)}.get(tok or "", tok)  # type: ignore[arg-type]


# -- the edge parser alone -------------------------------------------------------------------------


@settings(max_examples=400, deadline=None, database=None)
@given(data=frames())
def test_G12_edge_parser_never_raises_and_answers_within_the_schema(data: str | bytes) -> None:
    """Whatever arrives, `parse_any` returns (never raises), and what it returns can be carried:
    a refusal is a frame the schema accepts, a publish's payload is bytes orjson reads back."""
    carried(parse_any(data))


def carried(f: object) -> None:
    if isinstance(f, Error | Rejected):
        assert problems(dumps(f)) == [], f
    elif isinstance(f, ev.Publish):
        assert isinstance(f.payload, orjson.Fragment)
        assert payload_problem(orjson.loads(orjson.dumps(f.payload)), 64) is None


def same(a: object, b: object) -> bool:
    """The same answer: the same event (a publish's payload read back), or the same refusal
    (its code and `req`; the message may word a frame's place in a batch differently)."""
    if isinstance(a, ev.Publish) and isinstance(b, ev.Publish):
        return (a.req, a.id, a.group, a.view, a.order, a.atomic) == \
            (b.req, b.id, b.group, b.view, b.order, b.atomic) and \
            orjson.loads(orjson.dumps(a.payload)) == orjson.loads(orjson.dumps(b.payload))
    if isinstance(a, Error) and isinstance(b, Error):
        return (a.code, a.req) == (b.code, b.req)
    return a == b


def _text(data: str | bytes) -> str:
    return data if isinstance(data, str) else data.decode("utf-8", "surrogateescape")


@settings(max_examples=300, deadline=None, database=None)
@given(parts=st.lists(frames(), min_size=1, max_size=4))
def test_G12_a_batch_of_anything_is_judged_frame_by_frame(parts: list[str | bytes]) -> None:
    """A `batch` of whatever arrives: never raises; each frame is answered as if it had come
    alone (the same core event or refusal), or the whole is refused when it is not a list of
    frames; and each accepted frame's own text, as a cluster's edge would route it, parses
    alone to the same thing."""
    text = '{"type":"batch","frames":[' + ",".join(_text(p) for p in parts) + "]}"
    data = text.encode("utf-8", "surrogateescape")
    f = parse_any(data)
    if not isinstance(f, Batch):
        assert isinstance(f, Error), f
        carried(f)
        return
    assert len(f.frames) == len(parts)
    for (one, own), part in zip(f.frames, parts, strict=True):
        carried(one)
        alone = parse_any(part)
        assert same(one, alone), (one, alone)
        again = parse_any(own())
        if isinstance(one, ev.Publish):
            assert isinstance(again, ev.Publish)
            assert orjson.loads(orjson.dumps(again.payload)) == \
                orjson.loads(orjson.dumps(one.payload))
            assert again.req == one.req and again.id == one.id
        elif not isinstance(one, Error | Rejected):  # (a refused frame is never sent on)
            assert again == one, (one, again)


# -- against a live server -------------------------------------------------------------------------


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
    w = {"srv": srv, "url": url, "alice": alice, "bob": bob, "eve": eve, "n": 0,
         "seqs": {"alice": {}, "bob": {}}, "view": install["view"], "joiners": 0,
         "start": time.monotonic(), "frames": CHECK.frames,
         "recent": deque(maxlen=JOIN_EVERY + 1)}
    yield w
    for m in (alice, bob, eve):
        m._cm.__exit__(None, None, None)
    srv.stop()


FUZZ_SECONDS = float(os.environ.get("NOTIFY_FUZZ_SECONDS", "6"))
#: a newcomer joins and leaves `g` every this many examples
JOIN_EVERY = 8


def receive_round(m: Member, n: int, seqs: dict[str, int]) -> None:
    """`m` receives alice's and bob's message of round `n`, each the next `seq` of its stream,
    and no message from anyone else."""
    want = {f"a{n}", f"b{n}"}
    while want:
        d = m.next(lambda f: f["type"] == "deliver")
        assert d["sender"] in ("alice", "bob") and d["stream"] == f"fifo:{d['sender']}", d
        assert d["seq"] == seqs.get(d["stream"], 0) + 1, (m.name, d, seqs)
        seqs[d["stream"]] = d["seq"]
        assert d["payload"] in want, (m.name, d, want)
        want.discard(d["payload"])


def joiner_cycle(w: dict[str, Any], name: str, *, leave: bool = True) -> None:
    """`name` joins `g` and is installed everywhere; then (with `leave`) leaves the same way."""
    alice, bob = w["alice"], w["bob"]
    j = Member(w["url"], name, "g")
    try:
        for m in (alice, bob):  # each flushes as it reads its view_change
            m.next(lambda f: f["type"] == "view_change" and name in f["joining"])
        for m in (alice, bob):
            m.next(lambda f: f["type"] == "view_install" and name in f["joined"])
        install = j.installed("alice", "bob")
        w["view"] = install["view"]
        if not leave:
            return
        j.send({"type": "leave", "req": 1, "group": "g"})
        for m in (alice, bob):
            m.next(lambda f: f["type"] == "view_change" and name in f["leaving"])
        for m in (alice, bob):
            w["view"] = m.next(lambda f: f["type"] == "view_install" and name in f["left"])["view"]
        j.next(lambda f: f["type"] == "view_install" and name in f["left"])
    finally:
        j._cm.__exit__(None, None, None)


#: The issue's cases, sent by an authenticated mallory first in every run (then hypothesis's):
#: each payload is what a JavaScript client sends; her FIFO publishes to `g`, a group she is
#: not in, go to her `ext:` stream of `g`, whose worker a 2**64 integer used to kill.
ISSUE_CASES = [
    '{"type":"publish","req":"big","group":"g","id":"big","view":0,'
    '"payload":{"amount":100000000000000000000}}',
    '{"type":"publish","req":"sur","group":"g","id":"sur","view":0,"payload":"\\ud83d"}',
    '{"type":"publish","req":"nan","group":"g","id":"nan","view":0,"payload":[NaN]}',
    '{"type":"publish","req":"deep","group":"g","id":"deep","view":0,"payload":'
    + "[" * DEEP + "]" * DEEP + "}",
    '{"type":"publish","req":"sv","group":"g","id":"sv","view":0,"sameView":true,"payload":1}',
    '{"type":"publish","req":"v3","group":"g","id":"v3","view":"3","payload":1}',
    '{"type":"publish","req":7,"group":"g","id":"i7","view":0,"payload":{"n":1e400}}',
    '{"type":"join","req":"j","group":"h","wantState":true}',
]


# The websockets sync clients' background threads draw masking keys from `random` while
# hypothesis generates data; that is not the strategies using `random`. No shrinking: the
# server's state carries over from one example to the next, so a smaller example proves nothing.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
@settings(max_examples=max(150, int(FUZZ_SECONDS * 40)), deadline=None, database=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@example(hello_token="mine", hello_member=None, batch=ISSUE_CASES[:4])
@example(hello_token="mine", hello_member="mallory", batch=ISSUE_CASES[4:])
@given(hello_token=tokens, hello_member=st.sampled_from([None, None, "mallory"]) | members,
       batch=st.lists(frames(), min_size=1, max_size=12))
def test_G12_fuzz_never_crashes_never_leaks_and_the_group_goes_on(
        world: dict[str, Any], hello_token: str | None, hello_member: str | None,
        batch: list[str | bytes]) -> None:
    if time.monotonic() - world["start"] > FUZZ_SECONDS:
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

    # The server's state outlives an example: when the group fails, the frames that broke it
    # may have come a few examples earlier (hypothesis then calls the failure flaky and shows
    # the wrong example), so the failure names the recent ones.
    world["recent"].append((hello_token, hello_member, [f"{d!r:.120}" for d in batch]))
    try:
        # Both members publish; both receive both, in order, and nothing from mallory.
        world["n"] += 1
        n = world["n"]
        for who, tag in ((alice, "a"), (bob, "b")):
            who.send({"type": "publish", "req": n, "group": "g", "id": f"{tag}{n}",
                      "view": world["view"], "payload": f"{tag}{n}"})
        receive_round(alice, n, world["seqs"]["alice"])
        receive_round(bob, n, world["seqs"]["bob"])
        if n % JOIN_EVERY == 0:  # the group still installs views
            world["joiners"] += 1
            joiner_cycle(world, f"newcomer{n}")
    except (AssertionError, TimeoutError) as e:
        recent = "\n".join(map(repr, world["recent"]))
        raise AssertionError(f"the group stopped: {e!r}; mallory's last examples:\n{recent}") \
            from e
    assert srv.hub.groups["g"].view.members == ("alice", "bob")
    for f in eve.drain():
        assert f.get("group") != "g", f
    assert srv.stats.internal_errors == 0


def test_G12_after_fuzzing_a_joiner_is_installed_and_no_server_task_died(
        world: dict[str, Any]) -> None:
    assert world["n"] >= 20, f"only {world['n']} examples ran in the time budget"
    assert world["joiners"] >= 2
    joiner_cycle(world, "last", leave=False)
    srv: ServerThread = world["srv"]
    assert srv.server.hub.groups["g"].view.members == ("alice", "bob", "last")
    assert srv.server.stats.internal_errors == 0
    assert srv.dead_tasks() == []
    assert CHECK.frames > world["frames"]  # the schema hook saw this server's frames
