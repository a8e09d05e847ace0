"""One load process of `bench.sdkfanout`: a publisher or a subscriber process, on one system's
own client library (the notify SDK, a plain `websockets` client, `socketio.AsyncClient`, nats-py).

    python -m bench.sdkfanout_worker sub --system fifo --url ws://127.0.0.1:N --members 25 \
        --first 0 --view-size 51
    python -m bench.sdkfanout_worker pub --system fifo --url ws://127.0.0.1:N --view-size 51 \
        --window 64

The parent drives it with one JSON object per line on stdin and reads one JSON object per line
on stdout (stderr is its log). Every process prints `{"connected": true}` once its connections
are open, subscribed or joined, then `{"ready": true}` once it can take part: for a notify
subscriber once every one of its members sees the whole view (`--view-size` members: the
subscribers and the publisher; the publisher waits for that before `connected`), so that nothing
published after every process is ready can miss anyone. The parent starts the publisher only
once the subscribers are connected: the relay (`bench.peers relay`) broadcasts each sender's
frames to the connections open when that sender connected.

Subscriber commands:
    {"cmd": "expect", "base": B, "count": C, "lat": bool}
        messages B..B+C-1 come next; each member must receive each exactly once. The process
        prints {"complete": true} as soon as every member has all C (not at all if some never
        arrive: the parent has a deadline and asks for the report anyway).
    {"cmd": "report", "lat_file": PATH}
        {"got": ..., "missing": ..., "dup": ..., "stray": ..., "first_ns": ..., "last_ns": ...,
         "per_member": [...], "errors": [...]}; latencies (ns, int64) written to PATH.
Publisher commands:
    {"cmd": "burst", "base": B, "count": C}     publish C messages as fast as the client allows
    {"cmd": "rate", "base": B, "count": C, "rate": R}   C messages on a fixed schedule of R/s
        both answer {"published": C, "elapsed_s": ..., "behind_s": ...} once the last publish
        is settled (notify: its `published` reply; atomic: its outcome) or flushed (NATS).
Both: {"cmd": "quit"}.

Payload: `{"n": seq, "t": monotonic_ns, "p": padding}`, JSON of `--payload` bytes. `t` is the
scheduled send time on CLOCK_MONOTONIC (`time.monotonic_ns()`, one clock for every process on
the machine), so latency = receive time - scheduled time counts any queueing at the publisher
(no coordinated omission).

The notify publisher uses what the SDK allows today: `await group.publish(...)`, with at most
`--window` publishes awaiting their reply at once (1: await each one before the next).

The server API's publisher (`--system api`, `api-sqlite`; `--api-url`, `--api-key`) is no
member: one aiohttp `ClientSession` whose connector keeps up to `--api-window` keep-alive
connections, each call a `POST /api/v1/groups/bench/messages` with `{"payload": ...}` (no
`Idempotency-Key`: the server makes the id), at most `--api-window` unanswered at once. A
publish is settled by its 200 answer, which comes once the message is in the log; the
`published` report adds the answers' times (`answer_p50_ms`, `answer_p99_ms`: the 200 read -
the scheduled send time), to tell the call's own time from the delivery's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
import traceback
from array import array
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from notify import eventloop

loads = orjson.loads
dumps = orjson.dumps
clock = time.monotonic_ns
SUBJECT = GROUP = "bench"


def say(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def _within(seconds: float, close: Callable[[], Awaitable[object]]) -> None:
    """`close()`, given up after `seconds`."""
    async with asyncio.timeout(seconds):
        await close()


class Payload:
    """`{"n": seq, "t": send time (ns), "p": padding}` padded to `size` bytes of JSON."""

    def __init__(self, size: int) -> None:
        base = len(dumps({"n": 1_000_000, "t": clock() + 10**12, "p": ""}))
        self.pad = "x" * max(size - base, 0)

    def __call__(self, n: int, t: int) -> dict[str, Any]:
        return {"n": n, "t": t, "p": self.pad}


# ------------------------------------------------------------------------------------------------
# subscriber side: exactly-once bookkeeping shared by every member of this process


class Tracker:
    """Per member: which of the expected messages arrived (a byte each), duplicates, strays."""

    def __init__(self, members: int) -> None:
        self.members = members
        self.base = 0
        self.count = 0
        self.seen = [bytearray() for _ in range(members)]
        self.got = [0] * members
        self.dup = 0
        self.stray = 0
        self.left = 0
        self.first = 0
        self.last = 0
        self.lat: array[int] | None = None
        self.complete: asyncio.Event = asyncio.Event()
        self.errors: list[str] = []

    def expect(self, base: int, count: int, lat: bool) -> None:
        self.base, self.count = base, count
        self.seen = [bytearray(count) for _ in range(self.members)]
        self.got = [0] * self.members
        self.dup = self.stray = 0
        self.left = count * self.members
        self.first = self.last = 0
        self.lat = array("q") if lat else None
        self.complete = asyncio.Event()
        if self.left == 0:
            self.complete.set()

    def on(self, j: int, p: dict[str, Any]) -> None:
        """Member j received payload p."""
        at = clock()
        i = p["n"] - self.base
        if 0 <= i < self.count:
            seen = self.seen[j]
            if seen[i]:
                self.dup += 1
            else:
                seen[i] = 1
                self.got[j] += 1
                self.left -= 1
                if self.left == 0:
                    self.complete.set()
        else:
            self.stray += 1
        if not self.first:
            self.first = at
        self.last = at
        if self.lat is not None:
            self.lat.append(at - p["t"])

    def report(self, lat_file: str | None) -> dict[str, Any]:
        if lat_file and self.lat is not None:
            with open(lat_file, "wb") as f:
                self.lat.tofile(f)
        got = sum(self.got)
        return {"got": got, "missing": self.count * self.members - got, "dup": self.dup,
                "stray": self.stray, "first_ns": self.first, "last_ns": self.last,
                "per_member": self.got, "errors": self.errors[:5]}


class Sub:
    """`members` receivers of one system in this process."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.tr = Tracker(a.members)
        self.closers: list[Callable[[], Awaitable[Any]]] = []
        self.tasks: list[asyncio.Task[Any]] = []
        self._full: asyncio.Event | None = None

    def _guard(self, j: int, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        async def run() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a receiver that dies is an error of the run, not of us
                self.tr.errors.append(f"member {j}: {type(e).__name__}: {e}")
                print(traceback.format_exc(), file=sys.stderr)

        t = asyncio.create_task(run())
        self.tasks.append(t)
        return t

    async def setup(self) -> None:
        s = self.a.system
        if s == "nats":
            await self._setup_nats()
        elif s == "relay":
            await self._setup_relay()
        elif s == "socketio":
            await self._setup_socketio()
        else:
            await self._setup_notify()

    async def _setup_nats(self) -> None:
        import nats

        tr = self.tr

        async def one(j: int) -> None:
            nc = await nats.connect(self.a.url, name=f"sub{self.a.first + j}",
                                    allow_reconnect=False)

            async def cb(msg: Any) -> None:
                tr.on(j, loads(msg.data))

            await nc.subscribe(SUBJECT, cb=cb)
            await nc.flush()
            self.closers.append(nc.close)

        await asyncio.gather(*(one(j) for j in range(self.a.members)))

    async def _setup_relay(self) -> None:
        from websockets.asyncio.client import connect

        tr = self.tr

        async def loop(j: int, ws: Any) -> None:
            with contextlib.suppress(Exception):  # closed at the end
                async for data in ws:
                    tr.on(j, loads(data))

        async def one(j: int) -> None:
            ws = await connect(self.a.url, compression=None, max_size=None)
            self._guard(j, loop(j, ws))
            self.closers.append(ws.close)

        await asyncio.gather(*(one(j) for j in range(self.a.members)))

    async def _setup_socketio(self) -> None:
        import socketio

        tr = self.tr

        async def one(j: int) -> None:
            c = socketio.AsyncClient(reconnection=False)

            async def on_msg(p: dict[str, Any]) -> None:
                tr.on(j, p)

            c.on("msg", on_msg)
            await c.connect(self.a.url, transports=["websocket"], wait_timeout=10)
            await c.call("join", GROUP, timeout=10)
            self.closers.append(c.disconnect)

        await asyncio.gather(*(one(j) for j in range(self.a.members)))

    async def _setup_notify(self) -> None:
        from client_sdk import Message, ViewInstalled, connect

        tr = self.tr
        sizes = [0] * self.a.members
        full = asyncio.Event()
        want = self.a.view_size

        def handler(j: int) -> Callable[[Any], None]:
            def handle(ev: Any) -> None:
                if type(ev) is Message:
                    tr.on(j, ev.payload)
                elif type(ev) is ViewInstalled:
                    sizes[j] = len(ev.members)
                    if min(sizes) >= want:
                        full.set()
            return handle

        async def loop(j: int, group: Any) -> None:  # --receive iterator
            handle = handler(j)
            async for ev in group:
                handle(ev)

        async def one(j: int) -> None:
            client = await connect(self.a.url, member=f"m{self.a.first + j:03d}")
            self.closers.append(client.close)
            group = await client.join(GROUP)
            assert group.view is not None
            sizes[j] = max(sizes[j], len(group.view.members))
            if min(sizes) >= want:
                full.set()
            if self.a.receive == "handler":  # the callback style, as nats-py's `cb`
                group.on_event(handler(j))
            else:
                self._guard(j, loop(j, group))

        await asyncio.gather(*(one(j) for j in range(self.a.members)))
        self._full = full

    async def wait_ready(self) -> None:
        """notify: until every member of this process sees the whole view."""
        if self._full is not None:
            async with asyncio.timeout(60):
                await self._full.wait()

    async def command(self, c: dict[str, Any]) -> None:
        if c["cmd"] == "expect":
            self.tr.expect(c["base"], c["count"], bool(c.get("lat")))
            say({"ok": "expect"})
            tr = self.tr
            done = tr.complete

            async def announce() -> None:
                await done.wait()
                if self.tr is tr and tr.complete is done:
                    say({"complete": True})

            self.tasks.append(asyncio.create_task(announce()))
        elif c["cmd"] == "report":
            say(self.tr.report(c.get("lat_file")))

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*(_within(5, c) for c in self.closers), return_exceptions=True)


# ------------------------------------------------------------------------------------------------
# publisher side


class Pub:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.payload = Payload(a.payload)
        self.closers: list[Callable[[], Awaitable[Any]]] = []
        self.tasks: list[asyncio.Task[Any]] = []
        self.send: Callable[[dict[str, Any]], Awaitable[Any]]
        self.settle: Callable[[], Awaitable[Any]] = self._nothing
        self.errors: list[str] = []
        #: the API publisher: each 200 answer's time - the message's scheduled time (ns)
        self.answered = array("q")

    @staticmethod
    async def _nothing() -> None:
        return None

    async def setup(self) -> None:
        s = self.a.system
        if s == "nats":
            import nats

            nc = await nats.connect(self.a.url, name="pub", allow_reconnect=False)
            self.closers.append(nc.close)

            async def send_nats(p: dict[str, Any]) -> None:
                await nc.publish(SUBJECT, dumps(p))

            self.send, self.settle = send_nats, nc.flush
        elif s == "relay":
            from websockets.asyncio.client import connect

            ws = await connect(self.a.url, compression=None, max_size=None)
            self.closers.append(ws.close)

            async def drain() -> None:  # the relay broadcasts to the sender too
                with contextlib.suppress(Exception):
                    async for _ in ws:
                        pass

            self.tasks.append(asyncio.create_task(drain()))

            async def send_relay(p: dict[str, Any]) -> None:
                await ws.send(dumps(p), text=True)

            self.send = send_relay
        elif s == "socketio":
            import socketio

            c = socketio.AsyncClient(reconnection=False)
            c.on("msg", lambda p: None)  # in the room like every member (notify, the relay)
            await c.connect(self.a.url, transports=["websocket"], wait_timeout=10)
            await c.call("join", GROUP, timeout=10)
            self.closers.append(c.disconnect)

            async def send_sio(p: dict[str, Any]) -> None:
                await c.emit("pub", p)

            self.send = send_sio
        elif s.startswith("api"):
            await self._setup_api()
        else:
            await self._setup_notify()

    async def _setup_api(self) -> None:
        import aiohttp

        window = self.a.api_window
        base = self.a.api_url.rstrip("/") + f"/api/v1/groups/{GROUP}"
        url = base + "/messages"
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=window, limit_per_host=window),
            headers={"Authorization": f"Bearer {self.a.api_key}"},
            timeout=aiohttp.ClientTimeout(total=60))
        self.closers.append(session.close)
        # the subscribers joined before this process started: the group exists (else 404)
        async with session.get(base) as r:
            if r.status != 200:
                raise RuntimeError(f"GET {base}: {r.status} {await r.text()}")
        json_type = {"Content-Type": "application/json"}

        async def one(p: dict[str, Any]) -> None:
            async with session.post(url, data=dumps({"payload": p}), headers=json_type) as r:
                body = await r.read()
                if r.status != 200:
                    self.errors.append(f"publish {p['n']}: {r.status} {body[:200]!r}")
                else:
                    self.answered.append(clock() - p["t"])

        self.send, self.settle = self._windowed(one, window)

    def _windowed(self, one: Callable[[dict[str, Any]], Awaitable[None]], window: int
                  ) -> tuple[Callable[[dict[str, Any]], Awaitable[None]],
                             Callable[[], Awaitable[None]]]:
        """(send, settle) for a publisher with at most `window` calls of `one` awaiting their
        answer; a call that raises is recorded in `errors`."""
        sem = asyncio.Semaphore(window)
        inflight: set[asyncio.Task[Any]] = set()

        async def guarded(p: dict[str, Any]) -> None:
            try:
                await one(p)
            except Exception as e:
                self.errors.append(f"publish {p['n']}: {type(e).__name__}: {e}")
            finally:
                sem.release()

        async def send(p: dict[str, Any]) -> None:
            await sem.acquire()
            t = asyncio.create_task(guarded(p))
            inflight.add(t)
            t.add_done_callback(inflight.discard)

        async def settle() -> None:
            while inflight:
                await asyncio.gather(*list(inflight))

        return send, settle

    async def _setup_notify(self) -> None:
        from client_sdk import ClientOptions, ViewInstalled, connect

        order = "total" if self.a.system == "total" else "fifo"
        atomic = self.a.system == "atomic"
        window = self.a.window
        opts = ClientOptions(max_pending_publishes=max(1000, 2 * window))
        client = await connect(self.a.url, member="publisher", options=opts)
        self.closers.append(client.close)
        group = await client.join(GROUP)
        assert group.view is not None
        size = len(group.view.members)
        full = asyncio.Event()
        if size >= self.a.view_size:
            full.set()

        async def drain() -> None:  # notify delivers to the sender too: take its events
            async for ev in group:
                if type(ev) is ViewInstalled and len(ev.members) >= self.a.view_size:
                    full.set()

        self.tasks.append(asyncio.create_task(drain()))
        async with asyncio.timeout(60):
            await full.wait()

        async def one(p: dict[str, Any]) -> None:
            r = await group.publish(p, order=order, atomic=atomic)
            if atomic and not r.committed:
                self.errors.append(f"atomic {p['n']} aborted: {r.reason}")

        send_notify, settle = self._windowed(one, window)

        if self.a.publish == "nowait":
            futures: deque[tuple[int, asyncio.Future[Any]]] = deque()

            async def take_oldest() -> None:
                n, f = futures.popleft()
                try:
                    r = await f
                    if atomic and not r.committed:
                        self.errors.append(f"atomic {n} aborted: {r.reason}")
                except Exception as e:
                    self.errors.append(f"publish {n}: {type(e).__name__}: {e}")

            async def send_nowait(p: dict[str, Any]) -> None:
                while len(futures) >= window:  # at most `window` publishes unanswered
                    await take_oldest()
                futures.append((p["n"], group.publish_nowait(p, order=order, atomic=atomic)))

            async def settle_nowait() -> None:
                while futures:
                    await take_oldest()

            self.send, self.settle = send_nowait, settle_nowait
            return
        self.send, self.settle = send_notify, settle

    async def command(self, c: dict[str, Any]) -> None:
        base, count = c["base"], c["count"]
        payload, send = self.payload, self.send
        t0 = clock()
        behind = 0
        self.answered = array("q")
        if c["cmd"] == "burst":
            for n in range(base, base + count):
                await send(payload(n, clock()))
        else:
            period = 1e9 / c["rate"]
            for i in range(count):
                due = t0 + int(i * period)
                wait = due - clock()
                if wait > 0:
                    await asyncio.sleep(wait / 1e9)
                else:
                    behind = max(behind, -wait)
                await send(payload(base + i, due))  # from the schedule: no coordinated omission
        t_sent = clock()
        await self.settle()
        t1 = clock()
        out = {"published": count, "elapsed_s": (t1 - t0) / 1e9, "send_s": (t_sent - t0) / 1e9,
               "behind_s": behind / 1e9, "errors": self.errors[:5],
               "n_errors": len(self.errors)}
        if self.answered:
            a = sorted(self.answered)
            for name, q in (("answer_p50_ms", 0.5), ("answer_p99_ms", 0.99)):
                out[name] = a[min(len(a) - 1, int(q * len(a)))] / 1e6
        say(out)

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*(_within(5, c) for c in self.closers), return_exceptions=True)


# ------------------------------------------------------------------------------------------------


async def main_async(a: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    worker: Sub | Pub = Sub(a) if a.role == "sub" else Pub(a)
    try:
        async with asyncio.timeout(90):
            await worker.setup()
        say({"connected": True})
        if isinstance(worker, Sub):
            await worker.wait_ready()
        say({"ready": True})
        while True:
            line = await reader.readline()
            if not line:
                break  # the parent is gone
            c = json.loads(line)
            if c["cmd"] == "quit":
                break
            await worker.command(c)
    finally:
        await worker.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sdkfanout_worker")
    p.add_argument("role", choices=["sub", "pub"])
    p.add_argument("--system", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--members", type=int, default=25)
    p.add_argument("--first", type=int, default=0, help="index of this process's first member")
    p.add_argument("--view-size", type=int, default=51,
                   help="notify: members in the full view (subscribers + the publisher)")
    p.add_argument("--payload", type=int, default=100)
    p.add_argument("--window", type=int, default=64)
    p.add_argument("--publish", choices=["await", "nowait"], default="await")
    p.add_argument("--event-loop", choices=["auto", "uvloop", "asyncio"], default="auto")
    p.add_argument("--receive", choices=["handler", "iterator"], default="handler")
    p.add_argument("--api-url", default=None, help="api systems: http://HOST:PORT")
    p.add_argument("--api-key", default=None, help="api systems: the key's secret")
    p.add_argument("--api-window", type=int, default=100,
                   help="api systems: calls awaiting their answer at once")
    a = p.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    with contextlib.suppress(ImportError):
        import structlog

        structlog.configure(
            wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
            logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    profile_dir = os.environ.get("SDKFANOUT_PROFILE_WORKERS")  # (bench sdkfanout --profile-clients)
    if not profile_dir:
        return eventloop.run(main_async(a), a.event_loop)
    import cProfile

    with cProfile.Profile(time.process_time) as prof:  # CPU, not the waits
        try:
            return eventloop.run(main_async(a), a.event_loop)
        finally:
            name = f"{a.role}-{a.system}-{a.first}-{os.getpid()}.prof"
            prof.dump_stats(os.path.join(profile_dir, name))


if __name__ == "__main__":
    sys.exit(main())
