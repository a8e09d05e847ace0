"""Fan-out benchmark (DESIGN §8): 1 publisher → N members (default 50), 100-byte payloads.

    python -m bench fanout                 # every system, ~2 minutes
    python -m bench fanout --quick         # smoke run, ~30 s
    python -m bench fanout --systems relay,fifo --duration 10

Systems, each its own server process (`python -m bench.peers ...`), run one after another on
free loopback ports:

    relay     bare `websockets` relay: every received frame re-broadcast to every connection
    socketio  python-socketio rooms on aiohttp (clients: socketio.AsyncClient)
    fifo      notify, order "fifo"
    total     notify, order "total"
    atomic    notify, order "fifo", atomic: every member ACKs, counted when `confirm` arrives
    durable   notify on its SQLite log (the `notify serve` default: durability full, fsync),
              order "fifo"
    durable-normal  the same with `--durability normal` (no fsync: survives a killed process)

The load is one asyncio process (this one): the publisher and N receivers. Receivers for the relay
and notify are the same light sans-I/O `websockets` clients: each received frame is parsed with
orjson, `batch` frames are unpacked, each message is counted and, when sampled, its latency
recorded as receive time - the publisher's send time carried in the payload (both clocks are this
process's `perf_counter`). Every connection, the publisher's included, receives every message
(the relay broadcasts to the sender too, as notify delivers to it); only the N receivers count.

Two modes per system, on the same connections:

1. saturation: the publisher sends as fast as the system takes it, bounded by a window: at most
   `--window` messages sent and not yet received by the average receiver (and, for notify, at most
   `--window` publishes without their `published` reply, or atomic ones without `outcome`).
   Reported: delivered msg/s summed over receivers, measured over `--duration` after `--warmup`.
2. fixed rate (`--rate`, default 1,000 msg/s): latency p50/p95/p99/p99.9/max of every message to
   every receiver. Send times are the schedule's (no coordinated omission).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from array import array
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

now = time.perf_counter
loads = orjson.loads
dumps = orjson.dumps

SYSTEMS = ("relay", "socketio", "fifo", "total", "atomic", "durable", "durable-normal")
GROUP = "bench"
_CLK_TCK = os.sysconf("SC_CLK_TCK")

# ------------------------------------------------------------------------------------------------
# measurement


class Meter:
    """Shared by all receivers of one system: delivered count, latency samples, waiters."""

    def __init__(self, receivers: int) -> None:
        self.receivers = receivers
        self.delivered = 0
        self.lat = array("d")
        self.rec_from = 1 << 62  # record latency of messages with rec_from <= n < rec_to
        self.rec_to = 1 << 62
        self.mask = 0  # ... and n & mask == 0
        self.order_errors = 0
        self.errors: list[Any] = []
        self._need = 0
        self._waiter: asyncio.Future[None] | None = None

    def add(self, k: int) -> None:
        self.delivered += k
        if self._waiter is not None and self.delivered >= self._need:
            if not self._waiter.done():
                self._waiter.set_result(None)
            self._waiter = None

    def sample(self, n: int, t: float, at: float) -> None:
        if self.rec_from <= n < self.rec_to and not n & self.mask:
            self.lat.append(at - t)

    async def wait_delivered(self, total: int, timeout: float | None = None) -> bool:
        if self.delivered >= total:
            return True
        self._need = total
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._waiter)
        except TimeoutError:
            return False
        return True

    def percentiles(self) -> dict[str, float]:
        a = sorted(self.lat)
        if not a:
            return {}

        def q(x: float) -> float:
            return round(a[min(len(a) - 1, int(x * len(a)))] * 1000, 3)

        return {"p50": q(0.5), "p95": q(0.95), "p99": q(0.99), "p99.9": q(0.999),
                "max": round(a[-1] * 1000, 3), "samples": len(a)}


def machine_busy() -> float:
    """CPU seconds all cores spent busy so far (/proc/stat: everything but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / _CLK_TCK


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


# ------------------------------------------------------------------------------------------------
# a light WebSocket client: websockets' sans-I/O protocol on an asyncio.Protocol


class RawWS(asyncio.Protocol):
    """One client connection; `on_data(bytes)` is called for each received message."""

    def __init__(self, uri: str, on_data: Callable[[bytes | bytearray | memoryview], None]) -> None:
        self._ws = ClientProtocol(parse_uri(uri), max_size=None)
        self.on_data = on_data
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.Transport | None = None
        self._frags: list[bytes] = []

    @classmethod
    async def connect(cls, uri: str, on_data: Callable[[Any], None]) -> RawWS:
        wsuri = parse_uri(uri)
        loop = asyncio.get_running_loop()
        proto = cls(uri, on_data)
        await loop.create_connection(lambda: proto, wsuri.host, wsuri.port)
        async with asyncio.timeout(10):
            await proto.opened
        return proto

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._ws.send_request(self._ws.connect())
        self._flush()

    def data_received(self, data: bytes) -> None:
        ws = self._ws
        ws.receive_data(data)
        for ev in ws.events_received():
            if type(ev) is Frame:
                op = ev.opcode
                if op is Opcode.TEXT or op is Opcode.BINARY:
                    if ev.fin:
                        self.on_data(ev.data)
                    else:
                        self._frags = [bytes(ev.data)]
                elif op is Opcode.CONT:
                    self._frags.append(bytes(ev.data))
                    if ev.fin:
                        self.on_data(b"".join(self._frags))
                        self._frags = []
            elif isinstance(ev, Response) and not self.opened.done():
                if ws.handshake_exc is not None:
                    self.opened.set_exception(ws.handshake_exc)
                else:
                    self.opened.set_result(None)
        self._flush()  # pongs, close frames

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(exc or ConnectionError("closed during handshake"))
        if not self.lost.done():
            self.lost.set_result(None)

    def _flush(self) -> None:
        t = self.transport
        if t is None:
            return
        for d in self._ws.data_to_send():
            if d:
                t.write(d)
            elif t.can_write_eof():
                t.write_eof()

    def send(self, data: bytes) -> None:
        self._ws.send_text(data)
        self._flush()

    async def close(self) -> None:
        t = self.transport
        if t is None or t.is_closing():
            return
        with contextlib.suppress(Exception):
            self._ws.send_close(1000)
            self._flush()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1):
                await asyncio.shield(self.lost)
        t.abort()


# ------------------------------------------------------------------------------------------------
# servers under test


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProc:
    """A `python -m bench.peers SYSTEM --port N` subprocess; always killed on exit."""

    def __init__(self, system: str, logdir: Path, profile: Path | None = None,
                 args: tuple[str, ...] = ()) -> None:
        self.system, self.port = system, free_port()
        self.logfile = logdir / f"server-{system}-{self.port}.log"
        self.profile = profile
        self.proc: asyncio.subprocess.Process | None = None
        self.args = args
        self.api_port: int | None = None

    async def __aenter__(self) -> ServerProc:
        cmd = [sys.executable, "-m", "bench.peers", self.system, "--port", str(self.port),
               *self.args]
        if self.profile is not None:
            cmd += ["--profile", str(self.profile)]
        self._log = open(self.logfile, "wb")  # noqa: SIM115 - closed in __aexit__
        root = Path(__file__).resolve().parent.parent
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(root), *filter(None, [os.environ.get("PYTHONPATH")])]))
        self.proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=asyncio.subprocess.PIPE, stderr=self._log, cwd=root, env=env)
        assert self.proc.stdout is not None
        try:
            async with asyncio.timeout(20):
                line = await self.proc.stdout.readline()
        except TimeoutError:
            line = b""
        if not line.startswith(b"READY"):
            await self._stop()
            raise RuntimeError(f"{self.system} server did not start; see {self.logfile}:\n"
                               + self.logfile.read_text()[-2000:])
        # `READY PORT api=API_PORT`: a notify peer serving the server API too (bench.peers)
        extra = dict(w.split("=", 1) for w in line.decode().split()[2:] if "=" in w)
        self.api_port = int(extra["api"]) if "api" in extra else None
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cpu(self) -> float:
        try:
            return cpu_seconds(self.pid)
        except OSError:
            return 0.0

    async def _stop(self) -> None:
        p = self.proc
        if p is not None and p.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                p.terminate()
            try:
                async with asyncio.timeout(10 if self.profile else 5):
                    await p.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                await p.wait()
        self._log.close()

    async def __aexit__(self, *exc: object) -> None:
        await self._stop()


# ------------------------------------------------------------------------------------------------
# load: one publisher and N receivers per system


class Payload:
    """`{"n": seq, "t": send time, "p": padding}` padded to `size` bytes of JSON."""

    def __init__(self, size: int) -> None:
        base = len(dumps({"n": 100000, "t": now() + 1e4, "p": ""}))
        self.pad = "x" * max(size - base, 0)

    def __call__(self, n: int, t: float) -> dict[str, Any]:
        return {"n": n, "t": t, "p": self.pad}


class Load:
    """The interface each system's load implements."""

    meter: Meter
    sent = 0

    async def setup(self) -> None: ...

    async def publish(self, n: int, t: float) -> None: ...

    def full(self) -> bool:
        """Whether the system's own flow control (e.g. unanswered publishes) is at its window."""
        return False

    async def room(self) -> None:
        """Wait until the system can take another message (the publisher's window)."""

    async def teardown(self) -> None: ...


class RelayLoad(Load):
    def __init__(self, url: str, members: int, payload: Payload) -> None:
        self.url, self.members, self.payload = url, members, payload
        self.meter = Meter(members)
        self.conns: list[RawWS] = []
        self.last: list[int] = []

    def _receiver(self, i: int) -> Callable[[Any], None]:
        meter, last = self.meter, self.last

        def on_data(data: Any) -> None:
            at = now()
            p = loads(data)["payload"]
            n = p["n"]
            if n != last[i] + 1 and last[i] >= 0:
                meter.order_errors += 1
            last[i] = n
            meter.sample(n, p["t"], at)
            meter.add(1)

        return on_data

    async def setup(self) -> None:
        self.last = [-1] * self.members
        self.conns = list(await asyncio.gather(
            *(RawWS.connect(self.url, self._receiver(i)) for i in range(self.members))))
        self.pub = await RawWS.connect(self.url, lambda data: None)
        await asyncio.sleep(0.2)

    async def publish(self, n: int, t: float) -> None:
        self.pub.send(dumps({"type": "publish", "req": str(n), "group": GROUP, "id": str(n),
                             "view": 1, "order": "fifo", "atomic": False,
                             "payload": self.payload(n, t)}))

    async def teardown(self) -> None:
        await asyncio.gather(*(c.close() for c in [*self.conns, getattr(self, "pub", None)]
                               if c is not None))


class SocketIOLoad(Load):
    def __init__(self, url: str, members: int, payload: Payload) -> None:
        self.url, self.members, self.payload = url, members, payload
        self.meter = Meter(members)
        self.clients: list[Any] = []
        self.last: list[int] = []

    async def _client(self, i: int | None) -> Any:
        import socketio

        c = socketio.AsyncClient(reconnection=False)
        if i is not None:
            meter, last = self.meter, self.last

            @c.on("msg")  # type: ignore[untyped-decorator]
            async def on_msg(p: dict[str, Any]) -> None:
                at = now()
                n = p["n"]
                if n != last[i] + 1 and last[i] >= 0:
                    meter.order_errors += 1
                last[i] = n
                meter.sample(n, p["t"], at)
                meter.add(1)

        await c.connect(self.url, transports=["websocket"], wait_timeout=10)
        await c.call("join", GROUP, timeout=10)
        return c

    async def setup(self) -> None:
        self.last = [-1] * self.members
        self.clients = list(await asyncio.gather(*(self._client(i) for i in range(self.members))))
        self.pub = await self._client(None)
        await asyncio.sleep(0.2)

    async def publish(self, n: int, t: float) -> None:
        await self.pub.emit("pub", self.payload(n, t))

    async def teardown(self) -> None:
        clients = [*self.clients, getattr(self, "pub", None)]
        await asyncio.gather(*(c.disconnect() for c in clients if c is not None),
                             return_exceptions=True)


class NotifyMember:
    """One notify connection speaking protocol v1 (hello, join, flush_ok, ack)."""

    def __init__(self, load: NotifyLoad, name: str, index: int | None) -> None:
        self.load, self.name, self.index = load, name, index
        self.conn: RawWS | None = None
        self.view = 0
        self.members: list[str] = []
        self.welcome: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.installed = asyncio.Event()
        self.pending: dict[int, tuple[int, float]] = {}  # atomic offset -> (n, sent), to confirm
        self.last = -1

    def send(self, frame: dict[str, Any]) -> None:
        assert self.conn is not None
        self.conn.send(dumps(frame))

    def on_data(self, data: Any) -> None:
        at = now()
        f = loads(data)
        frames = f["frames"] if f["type"] == "batch" else (f,)
        load = self.load
        meter = load.meter
        counted = self.index is not None
        k = 0
        acks: list[int] = []
        for f in frames:
            t = f["type"]
            if t == "deliver":
                p = f["payload"]
                n = p["n"]
                if counted:
                    if n != self.last + 1 and self.last >= 0:
                        meter.order_errors += 1
                    self.last = n
                if f["atomic"]:
                    acks.append(f["offset"])
                    if counted:
                        self.pending[f["offset"]] = (n, p["t"])
                elif counted:
                    meter.sample(n, p["t"], at)
                    k += 1
            elif t == "confirm":
                if counted:
                    pend = self.pending
                    for off in f["offsets"]:
                        st = pend.pop(off, None)
                        if st is not None:
                            k += 1
                            meter.sample(st[0], st[1], at)
            elif t == "published" or t == "outcome":
                load.replied(f)
            elif t == "view_change":
                self.send({"type": "flush_ok", "group": f["group"], "view": f["proposed"]})
            elif t == "view_install":
                self.view = f["view"]
                self.members = f["members"]
                self.installed.set()
            elif t == "welcome":
                self.welcome.set_result(f)
            elif t in ("error", "rejected", "abort"):
                meter.errors.append(f)
                if t == "rejected":
                    load.replied(f)
        if acks:
            self.send({"type": "ack", "group": GROUP, "offsets": acks})
        if k:
            meter.add(k)


class NotifyLoad(Load):
    def __init__(self, url: str, members: int, payload: Payload, order: str, atomic: bool,
                 window: int) -> None:
        self.url, self.payload, self.order, self.atomic = url, payload, order, atomic
        self.meter = Meter(members)
        self.window = window
        self.pub = NotifyMember(self, "publisher", None)
        self.recv = [NotifyMember(self, f"m{i:03d}", i) for i in range(members)]
        self.outstanding = 0
        self._room: asyncio.Future[None] | None = None

    def replied(self, f: dict[str, Any]) -> None:
        t = f["type"]
        if self.atomic and t == "published":
            return  # an atomic publish is settled by its outcome
        self.outstanding -= 1
        if self._room is not None and self.outstanding <= self.window * 3 // 4:
            if not self._room.done():
                self._room.set_result(None)
            self._room = None

    def full(self) -> bool:
        return self.outstanding >= self.window

    async def room(self) -> None:
        if self.outstanding >= self.window:
            self._room = asyncio.get_running_loop().create_future()
            await self._room

    async def setup(self) -> None:
        everyone = [self.pub, *self.recv]

        async def hello(m: NotifyMember) -> None:
            m.conn = await RawWS.connect(self.url, m.on_data)
            m.send({"type": "hello", "protocol": 1, "member": m.name})
            async with asyncio.timeout(10):
                await m.welcome

        await asyncio.gather(*(hello(m) for m in everyone))
        self.pub.send({"type": "join", "req": "j", "group": GROUP})
        async with asyncio.timeout(10):
            await self.pub.installed.wait()
        for m in self.recv:
            m.send({"type": "join", "req": "j", "group": GROUP})
        want = len(everyone)
        deadline = time.monotonic() + 30
        while not all(len(m.members) == want for m in everyone):
            if time.monotonic() > deadline:
                raise RuntimeError("notify: members did not all see the full view within 30 s")
            await asyncio.sleep(0.02)
        if len({m.view for m in everyone}) != 1:
            raise RuntimeError("notify: members disagree on the view")
        self.meter.errors.clear()

    async def publish(self, n: int, t: float) -> None:
        self.outstanding += 1
        self.pub.send({"type": "publish", "req": str(n), "group": GROUP, "id": str(n),
                       "view": self.pub.view, "order": self.order, "atomic": self.atomic,
                       "payload": self.payload(n, t)})

    async def teardown(self) -> None:
        await asyncio.gather(*(m.conn.close() for m in [self.pub, *self.recv]
                               if m.conn is not None))


# ------------------------------------------------------------------------------------------------
# the two modes


@dataclass
class Result:
    system: str
    saturation_msgs: float = 0.0  # delivered msg/s, summed over receivers
    saturation_published: float = 0.0  # publisher msg/s
    server_cpu: float = 0.0  # % of one core during the saturation window
    client_cpu: float = 0.0
    publisher_blocked: float = 0.0  # % of the window the publisher waited on its window
    other_cpu: float = 0.0  # % of one core used by other processes on the machine meanwhile
    saturation_latency_ms: dict[str, float] = field(default_factory=dict)
    rate: float = 0.0  # achieved publish rate in the fixed-rate mode
    rate_delivered_msgs: float = 0.0
    rate_latency_ms: dict[str, float] = field(default_factory=dict)
    rate_skipped: str = ""
    saturation_range: tuple[float, float] = (0.0, 0.0)  # min, max over runs
    rate_server_cpu: float = 0.0  # % of one core, fixed-rate mode
    rate_client_cpu: float = 0.0
    lost: int = 0
    order_errors: int = 0
    errors: int = 0
    error_sample: list[Any] = field(default_factory=list)


async def saturation(load: Load, srv: ServerProc, window: int, warmup: float, duration: float,
                     res: Result) -> None:
    m = load.meter
    n_recv = m.receivers
    m.mask = 15  # record the latency of one message in 16
    start_n, d_base = load.sent, m.delivered
    t_begin = now()
    t_measure, t_end = t_begin + warmup, t_begin + warmup + duration
    snap: tuple[float, int, int, float, float, float] | None = None
    n = load.sent
    waited = 0.0
    while True:
        t = now()
        if snap is None and t >= t_measure:
            snap = (t, m.delivered, n, srv.cpu(), time.process_time(), machine_busy())
            m.rec_from = n
            waited = 0.0
        if t >= t_end:
            break
        # the window: at most `window` messages not yet received by the average receiver
        behind = (n - start_n) * n_recv - (m.delivered - d_base)
        if behind > window * n_recv:
            tw = now()
            await m.wait_delivered(m.delivered + (behind - window * n_recv * 3 // 4), 1.0)
            waited += now() - tw
            continue
        if load.full():
            tw = now()
            await load.room()
            waited += now() - tw
        await load.publish(n, now())
        n += 1
        if not n & 31:
            await asyncio.sleep(0)
    assert snap is not None
    t1, d1, c1, s1, p1, b1 = (now(), m.delivered, n, srv.cpu(), time.process_time(),
                              machine_busy())
    m.rec_to = n
    load.sent = n
    t0, d0, c0, s0, p0, b0 = snap
    res.saturation_msgs = (d1 - d0) / (t1 - t0)
    res.saturation_published = (c1 - c0) / (t1 - t0)
    res.server_cpu = 100 * (s1 - s0) / (t1 - t0)
    res.client_cpu = 100 * (p1 - p0) / (t1 - t0)
    res.publisher_blocked = 100 * waited / (t1 - t0)
    res.other_cpu = max(100 * (b1 - b0) / (t1 - t0) - res.server_cpu - res.client_cpu, 0.0)
    await drain(load, res)
    res.saturation_latency_ms = m.percentiles()


async def fixed_rate(load: Load, srv: ServerProc, rate: float, warmup: float, duration: float,
                     res: Result) -> None:
    m = load.meter
    m.lat = array("d")
    m.mask = 0
    m.rec_to = 1 << 62
    n0 = n = load.sent
    t_begin = now()
    m.rec_from = n0 + int(warmup * rate)
    total = int((warmup + duration) * rate)
    d_mark = 0
    t_mark = s_mark = p_mark = 0.0
    for i in range(total):
        due = t_begin + i / rate
        delay = due - now()
        if delay > 0:
            await asyncio.sleep(delay)
        if n == m.rec_from:
            t_mark, d_mark, s_mark, p_mark = now(), m.delivered, srv.cpu(), time.process_time()
        await load.publish(n, due)  # latency from the schedule: no coordinated omission
        n += 1
    t_last = now()
    load.sent = n
    if t_last > t_mark:
        res.rate_server_cpu = 100 * (srv.cpu() - s_mark) / (t_last - t_mark)
        res.rate_client_cpu = 100 * (time.process_time() - p_mark) / (t_last - t_mark)
    res.rate = (n - m.rec_from) / (t_last - t_mark) if t_last > t_mark else 0.0
    res.rate_delivered_msgs = (m.delivered - d_mark) / (t_last - t_mark) if t_last > t_mark else 0
    await drain(load, res)
    res.rate_latency_ms = m.percentiles()


async def drain(load: Load, res: Result, timeout: float = 10.0) -> None:
    m = load.meter
    want = load.sent * m.receivers
    await m.wait_delivered(want, timeout)
    res.lost = max(want - m.delivered, 0)


# ------------------------------------------------------------------------------------------------
# one system, all systems


async def run_system(system: str, a: argparse.Namespace, logdir: Path) -> Result:
    res = Result(system)
    peer = {"relay": "relay", "socketio": "socketio", "durable": "notify-sqlite",
            "durable-normal": "notify-sqlite-normal"}.get(system, "notify")
    payload = Payload(a.payload)
    profile = None
    if a.profile_dir and peer.startswith("notify"):
        profile = Path(a.profile_dir) / f"{system}.prof"
    async with ServerProc(peer, logdir, profile) as srv:
        url = f"ws://127.0.0.1:{srv.port}"
        load: Load
        if system == "relay":
            load = RelayLoad(url, a.members, payload)
        elif system == "socketio":
            load = SocketIOLoad(f"http://127.0.0.1:{srv.port}", a.members, payload)
        else:
            load = NotifyLoad(url, a.members, payload, "total" if system == "total" else "fifo",
                              system == "atomic", a.window)
        try:
            async with asyncio.timeout(60):
                await load.setup()
            if "saturation" in a.modes:
                await saturation(load, srv, a.window, a.warmup, a.duration, res)
            if "rate" in a.modes:
                if res.saturation_published and res.saturation_published < a.rate:
                    # it cannot keep up: its queues would only grow, and so would the latency
                    res.rate_skipped = (f"saturates at {res.saturation_published:,.0f} msg/s "
                                        f"< {a.rate:g}")
                else:
                    await fixed_rate(load, srv, a.rate, a.warmup, a.duration, res)
        finally:
            m = load.meter
            res.order_errors = m.order_errors
            res.errors = len(m.errors)
            res.error_sample = m.errors[:3]
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):
                    await load.teardown()
    return res


def median_result(rs: list[Result]) -> Result:
    """Field by field median of several runs of one system (latency percentile by percentile);
    counts of lost messages and errors are summed."""
    if len(rs) == 1:
        return rs[0]
    out = Result(rs[0].system)
    for f in ("saturation_msgs", "saturation_published", "server_cpu", "client_cpu",
              "publisher_blocked", "other_cpu"):
        setattr(out, f, statistics.median(getattr(r, f) for r in rs))
    rated = [r for r in rs if r.rate_latency_ms]  # runs whose fixed-rate mode ran
    for f in ("rate", "rate_delivered_msgs", "rate_server_cpu", "rate_client_cpu"):
        setattr(out, f, statistics.median(getattr(r, f) for r in rated) if rated else 0.0)
    for f, group in (("saturation_latency_ms", rs), ("rate_latency_ms", rated)):
        have = [getattr(r, f) for r in group if getattr(r, f)]
        keys = set.intersection(*(set(d) for d in have)) if have else set()
        setattr(out, f, {k: statistics.median(d[k] for d in have) for k in sorted(keys)})
    out.lost = sum(r.lost for r in rs)
    out.order_errors = sum(r.order_errors for r in rs)
    out.errors = sum(r.errors for r in rs)
    out.error_sample = [e for r in rs for e in r.error_sample][:3]
    skipped = [r.rate_skipped for r in rs if r.rate_skipped]
    if skipped:
        out.rate_skipped = f"{len(skipped)} of {len(rs)} runs: {skipped[0]}"
    out.saturation_range = (min(r.saturation_msgs for r in rs),
                            max(r.saturation_msgs for r in rs))
    return out


def _fmt(x: float, nd: int = 0) -> str:
    return f"{x:,.{nd}f}"


def report(results: dict[str, Result], a: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    lines = [f"saturation (window {a.window}): delivered msg/s summed over {a.members} receivers; "
             "CPU in % of one core", ""]
    hdr = (f"{'system':<9} {'delivered/s':>12} {'published/s':>12} {'server%':>8} {'client%':>8} "
           f"{'pub-blocked%':>13} {'others%':>8} {'lost':>5} {'order':>6} {'errors':>7}"
           + ("   range over runs" if a.repeat > 1 else ""))
    lines += [hdr, "-" * len(hdr)]
    for r in results.values():
        lines.append(f"{r.system:<9} {_fmt(r.saturation_msgs):>12} "
                     f"{_fmt(r.saturation_published):>12} {r.server_cpu:>8.0f} "
                     f"{r.client_cpu:>8.0f} {r.publisher_blocked:>13.0f} {r.other_cpu:>8.0f} "
                     f"{r.lost:>5} {r.order_errors:>6} {r.errors:>7}"
                     + (f"   {_fmt(r.saturation_range[0])}-{_fmt(r.saturation_range[1])}"
                        if a.repeat > 1 else ""))
    lines += ["", f"fixed rate {a.rate:g} msg/s: end-to-end latency in ms, every message to every "
              "receiver", ""]
    hdr = (f"{'system':<9} {'rate':>7} {'p50':>7} {'p95':>7} {'p99':>7} {'p99.9':>7} {'max':>7} "
           f"{'server%':>8} {'client%':>8}")
    lines += [hdr, "-" * len(hdr)]
    for r in results.values():
        lat = r.rate_latency_ms
        cols = " ".join(f"{lat.get(k, float('nan')):>7.2f}" for k in
                        ("p50", "p95", "p99", "p99.9", "max"))
        lines.append(f"{r.system:<9} {r.rate:>7.0f} {cols} {r.rate_server_cpu:>8.0f} "
                     f"{r.rate_client_cpu:>8.0f}")
    lines.append("")
    for r in results.values():
        if r.rate_skipped:
            lines.append(f"  {r.system}: fixed-rate mode skipped: {r.rate_skipped}")
        if r.other_cpu > 20:
            lines.append(f"  {r.system}: WARNING other processes used {r.other_cpu:.0f}% of a core "
                         "during its saturation window: figures are low")
    ratios: dict[str, Any] = {}

    def ratio(name: str, num: str, den: str, target: float, attr: str = "saturation_msgs",
              higher: bool = True) -> None:
        if num in results and den in results:
            x = getattr(results[num], attr)
            y = getattr(results[den], attr)
            if isinstance(x, dict):
                x, y = x.get("p99", float("nan")), y.get("p99", float("nan"))
            v = x / y if y else float("nan")
            ok = v >= target if higher else v <= target
            ratios[name] = {"value": round(v, 3), "target": target,
                            "op": ">=" if higher else "<=", "met": ok}

    ratio("fifo/relay", "fifo", "relay", 0.7)
    ratio("total/fifo", "total", "fifo", 0.9)
    ratio("atomic/fifo", "atomic", "fifo", 0.5)
    ratio("fifo/socketio", "fifo", "socketio", 2.0)
    ratio("durable/fifo", "durable", "fifo", 0.8)
    ratio("durable-normal/fifo", "durable-normal", "fifo", 0.8)
    ratio("p99 fifo/relay @rate", "fifo", "relay", 2.0, "rate_latency_ms", higher=False)
    lines.append("")
    for k, v in ratios.items():
        lines.append(f"{k:<22} {v['value']:>7.3f}   target {v['op']} {v['target']:<4} "
                     f"{'met' if v['met'] else 'MISSED'}")
    return "\n".join(lines), ratios


async def main_async(a: argparse.Namespace) -> int:
    systems = [s for s in a.systems.split(",") if s]
    for s in systems:
        if s not in SYSTEMS:
            raise SystemExit(f"unknown system {s!r}; choose from {', '.join(SYSTEMS)}")
    if a.profile_dir:
        Path(a.profile_dir).mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[Result]] = {s: [] for s in systems}
    t0 = time.monotonic()
    budget = 60 + 3 * (a.warmup + a.duration) + 30
    with tempfile.TemporaryDirectory(prefix="bench-fanout-") as tmp:
        for rnd in range(a.repeat):  # round-robin, so a disturbance hits one run of each
            for s in systems:
                print(f"[{time.monotonic() - t0:5.1f}s] {s} (run {rnd + 1}/{a.repeat}) ...",
                      file=sys.stderr, flush=True)
                try:
                    async with asyncio.timeout(budget):
                        r = await run_system(s, a, Path(tmp))
                except Exception as e:  # report and go on with the next system
                    print(f"  {s} failed: {type(e).__name__}: {e}", file=sys.stderr)
                    r = Result(s, errors=1, error_sample=[repr(e)])
                runs[s].append(r)
                print(f"  {_fmt(r.saturation_msgs)} delivered/s, p99 @{a.rate:g}/s "
                      f"{r.rate_latency_ms.get('p99', float('nan')):.2f} ms, others "
                      f"{r.other_cpu:.0f}%", file=sys.stderr)
    results = {s: median_result(rs) for s, rs in runs.items()}
    table, ratios = report(results, a)
    elapsed = time.monotonic() - t0
    print(f"\nfan-out: 1 publisher -> {a.members} members, {a.payload} B payload, "
          f"window {a.window}, {a.duration:g}s after {a.warmup:g}s warm-up; rate {a.rate:g}/s; "
          f"{os.cpu_count()} cores; median of {a.repeat} run(s) each; {elapsed:.0f}s\n")
    print(table)
    if not a.no_json:
        out = Path(a.json) if a.json else (
            Path(__file__).parent / "results" / f"fanout-{time.strftime('%Y%m%d-%H%M%S')}.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "args": vars(a), "cores": os.cpu_count(), "python": sys.version.split()[0],
            "elapsed_s": round(elapsed, 1),
            "results": {k: asdict(v) for k, v in results.items()}, "ratios": ratios,
            "runs": {k: [asdict(r) for r in v] for k, v in runs.items()},
        }, indent=2, default=str))
        print(f"\nwritten {out}")
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help=f"comma-separated, in order (default: {','.join(SYSTEMS)})")
    p.add_argument("--members", type=int, default=50, help="receivers (default 50)")
    p.add_argument("--payload", type=int, default=100, help="payload bytes (default 100)")
    p.add_argument("--duration", type=float, default=5.0, help="seconds measured per mode")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds before measuring")
    p.add_argument("--window", type=int, default=1000,
                   help="saturation: max messages in flight (default 1000)")
    p.add_argument("--rate", type=float, default=1000.0, help="fixed-rate mode msg/s")
    p.add_argument("--modes", default="saturation,rate")
    p.add_argument("--repeat", type=int, default=1,
                   help="run every system this many times (round-robin); report medians")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 s per mode, 0.5 s warm-up")
    p.add_argument("--json", default=None, help="write results here (default bench/results/)")
    p.add_argument("--no-json", action="store_true")
    p.add_argument("--profile-dir", default=None,
                   help="run notify servers under cProfile, stats to DIR/<system>.prof")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench fanout", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_args(p)
    a = p.parse_args(argv)
    if a.quick:
        a.duration, a.warmup = 1.0, 0.5
    return asyncio.run(main_async(a))


__all__ = ["main"]
