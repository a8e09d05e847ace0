"""Idle connections (issue 34): server memory per idle hello'd connection and the accept rate,
against `notify serve` in its own process.

    ./dev bench idle_conns                              # 18,000 connections (the issue's run)
    ./dev bench idle_conns --connections 9000 --procs 2
    ./dev bench idle_conns --trim-wait 0                # skip waiting for the server's heap trim

`notify serve --store memory` (the default of `bench.catchup.serve`; nothing is published, so
the store does not matter) on a free port, started with its soft open-file limit raised to the
hard one. Once the server is idle (its CPU below 2 % for 3 s) its RSS (`VmRSS` of
/proc/PID/status) is the baseline. `--procs` load processes (`python -m bench.idle_conns worker
...`, JSON lines on stdin/stdout), each under the per-process open-file limit (its soft limit
raised to the hard one; a process's share must fit under it), then open their share of
`--connections` at once when told to: each connection is websockets' sans-I/O client protocol on
an asyncio.Protocol (`bench.fanout.RawWS`: it answers the server's pings), sends `hello` (a
member of its own, development mode) and waits for `welcome`; at most `--concurrency` handshakes
under way per process. The accept rate is the connections over the wall time from "go" to the
last process's last `welcome` (the load processes' CPU included: on a 2-core machine they share
the cores with the server).

Then, with every connection open and idle (heartbeats only): RSS `--settle` seconds after the
last `welcome` (`settled`; not "once idle": N connections' heartbeats keep the server busy), and
again after `--trim-wait` seconds (the server hands the heap's free pages back after each
retention pass, every 60 s: notify/server/heap.py). KiB per connection =
(RSS - baseline) / connections. The server's `notify_connections` must say N. Printed beside the
issue's figures (21.0 KiB per connection at 9,000, 9,000 accepted in 11.3 s, 10,000 shown).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import sys
import time
from typing import Any

from bench.catchup import metric, serve
from bench.idle_memory import cpu_seconds, loadavg, status, wait_idle
from bench.workers import Workers, say, shares

#: the issue's figures (issue 34, measured 2026-11-26)
ISSUE = {"kib": 21.0, "kib_at": 9000, "accepted": 9000, "accept_s": 11.3, "shown": 10000,
         "target_kib": 12.0, "target_rate": 5000.0, "target_shown": 18000}


def raise_nofile() -> int:
    """The soft open-file limit raised to the hard one; returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


# -- the load process ---------------------------------------------------------------------------

async def worker(a: argparse.Namespace) -> None:
    from bench.fanout import RawWS

    class Client(RawWS):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            # (uvloop's transports are not asyncio.Transport subclasses: RawWS asserts that)
            self.transport = transport  # type: ignore[assignment]
            self._ws.send_request(self._ws.connect())
            self._flush()

    limit = raise_nofile()
    if a.count + 50 > limit:
        say({"error": f"{a.count} connections do not fit under {limit} open files"})
        return
    loop = asyncio.get_running_loop()
    say({"ready": limit})
    await loop.run_in_executor(None, sys.stdin.readline)  # "go"
    conns: list[RawWS] = []
    failed: list[str] = []
    todo = iter(range(a.first, a.first + a.count))

    async def one(i: int) -> None:
        welcomed: asyncio.Future[bytes] = loop.create_future()

        def on_data(data: Any) -> None:
            if not welcomed.done():
                welcomed.set_result(bytes(data))

        ws = await Client.connect(a.url, on_data)
        conns.append(ws)
        ws.send(b'{"type":"hello","protocol":1,"member":"idle-%d"}' % i)
        async with asyncio.timeout(30):
            answer = await welcomed
        if b'"type":"welcome"' not in answer:
            raise RuntimeError(answer[:200].decode(errors="replace"))

    async def opener() -> None:
        for i in todo:
            try:
                await one(i)
            except Exception as e:  # counted, the others go on
                failed.append(repr(e))

    t0 = time.monotonic()
    await asyncio.gather(*(opener() for _ in range(a.concurrency)))
    say({"opened": a.count - len(failed), "failed": len(failed), "errors": failed[:3],
         "seconds": time.monotonic() - t0})
    while True:  # stdin off the loop: the connections answer the server's pings meanwhile
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if line.strip() in ("exit", ""):
            break
    lost = sum(ws.lost.done() for ws in conns)
    say({"lost": lost})
    for t in [ws.transport for ws in conns]:
        if t is not None:
            t.abort()


# -- the bench ----------------------------------------------------------------------------------

def load(url: str, a: argparse.Namespace) -> Workers:
    return Workers([[sys.executable, "-m", "bench.idle_conns", "worker", "--url", url,
                     "--first", str(first), "--count", str(count),
                     "--concurrency", str(a.concurrency)]
                    for first, count in shares(a.connections, a.procs)])


def run(a: argparse.Namespace) -> dict[str, Any]:
    kib = 1024
    n = a.connections
    r: dict[str, Any] = {"connections": n, "procs": a.procs, "concurrency": a.concurrency,
                         "store": "memory"}
    r["nofile"] = raise_nofile()  # the server inherits it
    if n + 100 > r["nofile"]:
        raise SystemExit(f"{n} connections do not fit under the server's {r['nofile']} files")
    with serve("--store", "memory") as (url, proc):
        pid = proc.pid
        wait_idle(pid)
        r["baseline"] = status(pid, "VmRSS")
        print(f"empty server (--store memory): RSS {r['baseline'] / kib / kib:.1f} MiB "
              f"(load {loadavg()})", flush=True)
        workers = load(url, a)
        try:
            workers.answers("ready")
            r["load_open"] = loadavg()
            cpu0 = cpu_seconds(pid), sum(cpu_seconds(p.pid) for p in workers.procs)
            t0 = time.monotonic()
            workers.tell("go")
            done = workers.answers("opened")
            r["open_s"] = time.monotonic() - t0
            r["server_cpu_s"] = cpu_seconds(pid) - cpu0[0]
            r["load_cpu_s"] = sum(cpu_seconds(p.pid) for p in workers.procs) - cpu0[1]
            r["opened"] = sum(d["opened"] for d in done)
            r["failed"] = sum(d["failed"] for d in done)
            r["rate"] = r["opened"] / r["open_s"]
            errors = [e for d in done for e in d["errors"]]
            print(f"opened {r['opened']:,} of {n:,} hello'd connections in {r['open_s']:.2f} s "
                  f"= {r['rate']:,.0f}/s from {len(done)} processes ({r['failed']} failed"
                  f"{': ' + '; '.join(errors) if errors else ''}; load before {r['load_open']}, "
                  f"after {loadavg()})", flush=True)
            print(f"CPU while opening: server {r['server_cpu_s']:.1f} s = "
                  f"{r['server_cpu_s'] / r['opened'] * 1e6:.0f} µs per connection "
                  f"({r['server_cpu_s'] / r['open_s']:.0%} of a core), load processes "
                  f"{r['load_cpu_s']:.1f} s = {r['load_cpu_s'] / r['opened'] * 1e6:.0f} µs per "
                  f"connection; the server alone at that cost: "
                  f"{r['opened'] / r['server_cpu_s']:,.0f}/s per core", flush=True)
            if not r["opened"]:
                raise RuntimeError("no connection opened")
            cpu0 = cpu_seconds(pid)
            time.sleep(a.settle)  # (never under 2 % of CPU: the heartbeats of N connections)
            r["settle_s"] = a.settle
            r["idle_cpu"] = (cpu_seconds(pid) - cpu0) / a.settle
            r["shown"] = metric(url, "notify_connections")
            r["settled"] = status(pid, "VmRSS")
            r["kib_settled"] = (r["settled"] - r["baseline"]) / kib / r["opened"]
            print(f"{r['settle_s']:.0f} s later: notify_connections {r['shown']:,.0f}, RSS "
                  f"{r['settled'] / kib / kib:.1f} MiB = {r['kib_settled']:.2f} KiB per "
                  f"connection over the baseline; the server's CPU meanwhile (heartbeats "
                  f"only): {r['idle_cpu']:.1%} of a core (load {loadavg()})", flush=True)
            if a.trim_wait > 0:
                time.sleep(a.trim_wait)
                r["trimmed"] = status(pid, "VmRSS")
                r["kib_trimmed"] = (r["trimmed"] - r["baseline"]) / kib / r["opened"]
                print(f"{a.trim_wait:.0f} s later (a heap trim passed): RSS "
                      f"{r['trimmed'] / kib / kib:.1f} MiB = {r['kib_trimmed']:.2f} KiB per "
                      f"connection", flush=True)
            r["shown_end"] = metric(url, "notify_connections")
            r["peak"] = status(pid, "VmHWM")
        finally:
            workers.close()
        lost = sum(d.get("lost", 0) for d in workers.rest())
        r["lost"] = lost
    per = r.get("kib_trimmed", r["kib_settled"])
    print(f"\nvs issue 34: {per:.2f} KiB per connection (issue: {ISSUE['kib']} at "
          f"{ISSUE['kib_at']:,}; target <= {ISSUE['target_kib']}); accept rate "
          f"{r['rate']:,.0f}/s (issue: {ISSUE['accepted'] / ISSUE['accept_s']:,.0f}/s; target >= "
          f"{ISSUE['target_rate']:,.0f}/s); shown {r['shown_end']:,.0f} (issue: "
          f"{ISSUE['shown']:,}; target {ISSUE['target_shown']:,}); connections lost while idle: "
          f"{lost}; peak RSS {r['peak'] / kib / kib:.1f} MiB", flush=True)
    return r


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        w = argparse.ArgumentParser(prog="python -m bench.idle_conns worker")
        w.add_argument("--url", required=True)
        w.add_argument("--first", type=int, required=True)
        w.add_argument("--count", type=int, required=True)
        w.add_argument("--concurrency", type=int, required=True)
        with contextlib.suppress(ImportError):
            import uvloop  # as the other benches' load processes

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        asyncio.run(worker(w.parse_args(argv[1:])))
        return 0
    p = argparse.ArgumentParser(prog="python -m bench idle_conns", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--connections", type=int, default=18000)
    p.add_argument("--procs", type=int, default=3, help="load processes")
    p.add_argument("--concurrency", type=int, default=32,
                   help="handshakes under way at once per load process (the listen backlog "
                        "is 100)")
    p.add_argument("--settle", type=float, default=10.0,
                   help="seconds after the last welcome before the RSS is read")
    p.add_argument("--trim-wait", type=float, default=65.0,
                   help="seconds to wait for the server's heap trim (0: skip)")
    p.add_argument("--json", default=None, help="write the figures here")
    a = p.parse_args(argv)
    print(f"idle_conns: {a.connections:,} connections from {a.procs} load processes "
          f"(load {loadavg()})", flush=True)
    r = run(a)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0 if r["opened"] == a.connections and r["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
