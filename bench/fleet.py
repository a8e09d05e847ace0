"""Fleet simulator: flaky mobile clients against a real server, writing the event logs (DESIGN §6).

    python -m bench.fleet --out DIR [--clients 30] [--duration 60] [--compression 20] [--seed 1]
                          [--suspect-timeout 0.15] [--url ws://...]

Starts `notify serve` (its embedded SQLite default, `--event-log DIR/logs`) on a free port, or
uses `--url`. Each client is a real SDK `Connection` (client_sdk/connection.py) that joins a few
groups and then alternates *online* periods (publishing FIFO / total / atomic messages at its
rate, sometimes leaving and rejoining a group) and *offline* gaps, drawn from a connectivity
model:

- a short hand-off (cell or Wi-Fi switch): lognormal around `handoff_mean` (~1 s);
- a long sleep (screen off, tunnel): lognormal around `sleep_mean` (tens of seconds);
- gone for good (`gone_p`): it never reconnects.

Model times are divided by `--compression`, so an hour of churn runs in minutes; the server's
`--suspect-timeout` is given in *wall* seconds (it sees the compressed gaps). Each client logs
what its application sees (`client.deliver`, `client.view`, `client.disconnect`,
`client.reconnect`, and `client.join`/`client.leave` when it asks to join or leave a group) through
`notify.eventlog.EventLog` into `DIR/logs/events-<member>.jsonl`;
the SDK does not log by itself yet. The run is bounded (`--duration` wall seconds plus a short
grace), and the server process is always stopped.

Seeds fix every client's schedule (gaps, publishes, mix, leaves), so two runs with the same seed
and different server options see the same connectivity: the same sequence of online periods,
gaps and leaves (connectivity and traffic draw from separate random streams, so a server that
answers publishes differently does not change the gaps). When they happen still shifts with the
server (a join or a publish waits for its answer), and message interleavings depend on real
timing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from client_sdk.connection import Connection
from client_sdk.events import Message, Removed, ViewInstalled
from notify.eventlog import EventLog


@dataclass
class FleetConfig:
    clients: int = 30
    groups: int = 4
    groups_per_client: int = 2
    duration: float = 60.0          # wall seconds the fleet runs
    compression: float = 20.0       # model seconds per wall second
    seed: int = 1
    # connectivity model (model seconds)
    session_mean: float = 120.0     # online period, exponential
    handoff_p: float = 0.7
    handoff_mean: float = 1.0       # lognormal median
    sleep_mean: float = 40.0
    gone_p: float = 0.05            # of disconnects, never returns
    spread: float = 0.5             # lognormal sigma
    # traffic (model time)
    publish_rate: float = 0.5       # messages per model second per client
    mix: tuple[float, float, float] = (0.6, 0.3, 0.1)  # fifo, total, atomic
    leave_p: float = 0.1            # per online period: leave a group and rejoin it
    # server (wall seconds) when the simulator starts it
    suspect_timeout: float = 0.15
    server_args: list[str] = field(default_factory=list)


@dataclass
class Stats:
    published: int = 0
    rejected: int = 0
    delivered: int = 0
    disconnects: int = 0
    reconnects: int = 0
    gone: int = 0
    errors: int = 0
    leaves: int = 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`notify serve` in a child process (its own process group), stopped on exit."""

    def __init__(self, data_dir: Path, log_dir: Path, suspect_timeout: float,
                 extra: list[str]) -> None:
        self.port = free_port()
        self.url = f"ws://127.0.0.1:{self.port}"
        # --log-level info: below it the server drops its own event log too (EventLog goes through
        # structlog's globally configured filtering logger).
        cmd = [sys.executable, "-c", "import sys; from notify.cli import main; "
               "sys.exit(main(sys.argv[1:]))", "serve", "--port", str(self.port),
               "--data-dir", str(data_dir), "--event-log", str(log_dir),
               "--suspect-timeout", str(suspect_timeout), "--log-level", "info", *extra]
        self._out = open(data_dir / "server.out", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    async def ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}")
            with contextlib.suppress(OSError):
                _, w = await asyncio.open_connection("127.0.0.1", self.port)
                w.close()
                return
            await asyncio.sleep(0.05)
        raise RuntimeError("server did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._out.close()


class SimClient:
    def __init__(self, i: int, cfg: FleetConfig, url: str, log_dir: Path, stats: Stats) -> None:
        self.cfg, self.url, self.stats = cfg, url, stats
        self.member = f"m{i:03d}"
        # Two streams: connectivity (sessions, gaps, leaves) and traffic (publishes). How many
        # publishes fit in an online period depends on the server (a publish waits for its
        # answer, up to 5 s): from one stream, a run whose server rejects or stalls publishes
        # would draw different gaps from the same seed, and a what-if prediction could not be
        # checked against a rerun that changed only the server's options.
        self.rng = random.Random(cfg.seed * 100_003 + i)
        self.traffic = random.Random(cfg.seed * 100_003 + i + 50_000_017)
        names = [f"g{k}" for k in range(cfg.groups)]
        self.groups = self.rng.sample(names, min(cfg.groups_per_client, cfg.groups))
        self.log = EventLog(log_dir, self.member)
        self.conn: Connection | None = None
        self.view: dict[str, int] = {}
        self.n = 0
        self.consumers: list[asyncio.Task[None]] = []

    def _w(self, x: float) -> float:
        """Model seconds -> wall seconds."""
        return x / self.cfg.compression

    def _gap(self) -> tuple[str, float | None]:
        c, r = self.cfg, self.rng
        u = r.random()
        if u < c.gone_p:
            return "gone", None
        if u < c.gone_p + (1 - c.gone_p) * c.handoff_p:
            return "handoff", r.lognormvariate(math.log(c.handoff_mean), c.spread)
        return "sleep", r.lognormvariate(math.log(c.sleep_mean), c.spread)

    async def _consume(self, group: str) -> None:
        assert self.conn is not None
        q = self.conn.events(group)
        while True:
            e = await q.get()
            now = time.time()
            if isinstance(e, Message):
                self.n += 1
                self.stats.delivered += 1
                sent = e.payload.get("sent_ts") if isinstance(e.payload, dict) else None
                self.log.write("client.deliver", now, group=group, member=self.member,
                               view=self.view.get(group), offset=e.offset, stream=e.stream,
                               seq=e.seq, sender=e.sender, atomic=e.atomic, msg_view=e.view,
                               sent_ts=sent, recv_ts=now, n=self.n)
            elif isinstance(e, ViewInstalled):
                self.view[group] = e.view
                self.log.write("client.view", now, group=group, member=self.member, view=e.view,
                               members=list(e.members))
            elif isinstance(e, Removed):
                self.log.write("client.view", now, group=group, member=self.member, view=e.view,
                               members=[], removed=True)

    async def _join(self, group: str) -> None:
        assert self.conn is not None
        # The request's time, not the install's: what the application asked for does not
        # depend on the server's timeouts (`whatif --method replay` replays it).
        self.log.write("client.join", time.time(), group=group, member=self.member)
        async with asyncio.timeout(10):
            await self.conn.join(group)

    async def _publish(self, group: str) -> None:
        assert self.conn is not None
        fifo, total, _ = self.cfg.mix
        u = self.traffic.random()
        order, atomic = ("fifo", False) if u < fifo else ("total", False) \
            if u < fifo + total else ("fifo", True)
        try:
            async with asyncio.timeout(5):
                await self.conn.publish(
                    group, {"sent_ts": time.time(), "from": self.member}, order=order,
                    atomic=atomic)
            self.stats.published += 1
        except TimeoutError:
            self.stats.errors += 1
        except Exception:
            self.stats.rejected += 1

    async def run(self, deadline: float) -> None:
        c = self.cfg
        self.conn = await Connection.connect(self.url, self.member)
        for g in self.groups:
            self.consumers.append(asyncio.create_task(self._consume(g)))
            await self._join(g)
        while time.monotonic() < deadline:
            online_until = min(deadline, time.monotonic()
                               + self._w(self.rng.expovariate(1 / c.session_mean)))
            while True:
                wait = self._w(self.traffic.expovariate(c.publish_rate))
                if time.monotonic() + wait >= online_until:
                    break
                await asyncio.sleep(wait)
                await self._publish(self.traffic.choice(self.groups))
            await asyncio.sleep(max(0.0, online_until - time.monotonic()))
            if time.monotonic() >= deadline:
                break
            if self.rng.random() < c.leave_p:
                g = self.rng.choice(self.groups)
                with contextlib.suppress(Exception):
                    self.log.write("client.leave", time.time(), group=g, member=self.member)
                    async with asyncio.timeout(5):
                        await self.conn.leave(g)
                    self.stats.leaves += 1
                    await asyncio.sleep(self._w(self.rng.uniform(1, 5)))
                    await self._join(g)
            kind, gap = self._gap()
            t_drop = time.time()
            self.log.write("client.disconnect", t_drop, member=self.member, reason=kind)
            self.stats.disconnects += 1
            await self.conn.drop()
            if gap is None:
                self.stats.gone += 1
                await asyncio.sleep(max(0.0, deadline - time.monotonic()))
                return
            await asyncio.sleep(self._w(gap))
            if time.monotonic() >= deadline:
                return  # still away when the run ends: its gap stays open in the log
            await self.conn.reconnect()
            resumed = bool(self.conn.welcome.get("resumed"))
            now = time.time()
            self.log.write("client.reconnect", now, member=self.member,
                           gap_ms=round((now - t_drop) * 1000, 3), resumed=resumed)
            self.stats.reconnects += 1

    async def close(self) -> None:
        for t in self.consumers:
            t.cancel()
        if self.consumers:  # (wait, not await under suppress: a cancel of ours goes on)
            await asyncio.wait(self.consumers)
        for t in self.consumers:  # (what one raised is no news at the close)
            if not t.cancelled():
                t.exception()
        if self.conn is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await self.conn.close()
        self.log.close()


async def run_fleet(cfg: FleetConfig, out: Path, url: str | None = None) -> dict[str, Any]:
    """Run the fleet; logs in `out/logs`. Returns a summary (also written to out/fleet.json)."""
    out.mkdir(parents=True, exist_ok=True)
    log_dir = out / "logs"
    server = None
    if url is None:
        data = out / "server-data"
        data.mkdir(exist_ok=True)
        server = Server(data, log_dir, cfg.suspect_timeout, cfg.server_args)
        url = server.url
    stats = Stats()
    clients: list[SimClient] = []
    t0 = time.monotonic()
    try:
        if server is not None:
            await server.ready()
        deadline = time.monotonic() + cfg.duration
        clients = [SimClient(i, cfg, url, log_dir, stats) for i in range(cfg.clients)]

        async def guarded(c: SimClient) -> None:
            try:
                await c.run(deadline)
            except Exception:
                stats.errors += 1

        tasks = [asyncio.create_task(guarded(c)) for c in clients]
        _, pending = await asyncio.wait(tasks, timeout=cfg.duration + 10)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.sleep(0.3)  # let last deliveries land before closing
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        if server is not None:
            await asyncio.to_thread(server.stop)
    summary = {"config": asdict(cfg), "url": url, "wall_s": round(time.monotonic() - t0, 2),
               **asdict(stats)}
    (out / "fleet.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    d = FleetConfig()
    p = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--url", default=None, help="use this server instead of starting one")
    for name in ("clients", "groups", "groups_per_client", "seed"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    for name in ("duration", "compression", "session_mean", "handoff_p", "handoff_mean",
                 "sleep_mean", "gone_p", "spread", "publish_rate", "leave_p",
                 "suspect_timeout"):
        p.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(d, name))
    p.add_argument("--mix", default=",".join(map(str, d.mix)), help="fifo,total,atomic shares")
    p.add_argument("--server-arg", action="append", default=[],
                   help="extra `notify serve` argument (repeatable): --server-arg=--store=memory")
    a = p.parse_args(argv)
    kw = {k: getattr(a, k) for k in asdict(d) if k not in ("mix", "server_args")}
    mix = tuple(float(x) for x in a.mix.split(","))
    cfg = FleetConfig(**kw, mix=mix, server_args=a.server_arg)  # type: ignore[arg-type]
    summary = asyncio.run(run_fleet(cfg, Path(a.out), a.url))
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
