"""Catch-up rate and state-transfer time (issues 4 and 30), against `notify serve` in its own
process.

    ./dev bench catchup                 # 50,000 missed messages of ~100 B and ~1 KiB, from
                                        # memory and from the log; 10 MB and 100 MB snapshots
    ./dev bench catchup --messages 200000 --sizes 10,100
    ./dev bench catchup --only catchup --repeat 3 --payloads 100,1024

catch-up: member `a` publishes N messages while `b` is away (removed); `b` rejoins from its
resume point and the time from its join to `CaughtUp` gives messages replayed per second. Each
payload size runs on two SQLite servers that differ only in their in-memory window (a fresh
data directory each time, `--durability` as given): **memory**, a window holding all N missed
messages (`--window-messages N+1000`, `--window-bytes` 4 GiB), so the replay comes from memory;
**log**, the default window (1,000 messages / 1 MiB), so all but the last window's worth comes
as `catchup_log` plus `history` pages the SDK reads from the log. `b`'s application must see
every message once and in order (asserted), and the server's `notify_history_pages_total`
(from `/metrics`, before and after the rejoin) must be 0 for memory and > 0 for the log.
Reported: msg/s and payload MB/s from join to `CaughtUp`, pages, and log/memory (DESIGN
target: >= 0.5). `--profile DIR`: the bench process (the SDK) under cProfile during each log
catch-up, to DIR/catchup-log-<payload>-<run>.prof.
state transfer: member `a` holds a snapshot of S MB (half random, half repetitive JSON-like
text, so compression does some work); `c` joins with `want_state=True`; the time from its join
to `StateReceived` (restored, sha256-checked) is the transfer time.
checkpoint: on the SQLite log, member `d` stores an S MB checkpoint (upload, server-side check,
commit: timed), publishes 100 more messages and leaves; `c` joins the empty group with
`want_state=True` and gets the checkpoint from storage plus those 100 messages (timed to
`StateReceived`; the state and the 100 messages are checked).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import itertools
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

import orjson

from client_sdk import CaughtUp, Message, StateReceived, connect


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(*args: str) -> Any:
    """`notify serve` on a free port with `args` (default: the memory store), in its own
    process: yields (url, process); terminated (then killed) at the end."""
    port = free_port()
    store = list(args) or ["--store", "memory"]
    proc = subprocess.Popen([sys.executable, "-m", "notify.cli", "serve", "--port", str(port),
                             "--log-level", "warning", *store],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port),
                                                                        timeout=0.2):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"notify serve {' '.join(store)} exited: {proc.returncode}")
            time.sleep(0.05)
        yield f"ws://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def server(*args: str) -> Any:
    with serve(*args) as (url, _):
        yield url


def metric(url: str, name: str) -> float:
    """One unlabelled sample of the server's `/metrics` (same port as the WebSocket)."""
    with urllib.request.urlopen(url.replace("ws://", "http://") + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise KeyError(name)


async def catchup(url: str, n: int, payload: int = 100,
                  profile: str | None = None) -> dict[str, float]:
    """`b` away while `a` publishes `n` messages of about `payload` bytes (JSON), then `b`
    rejoins: from its join to `CaughtUp`. Every message must reach `b` once, in order."""
    pad = "x" * max(0, payload - len(orjson.dumps({"i": n, "pad": ""})))
    async with connect(url, member="a") as a:  # stays: the rejoin's flush needs its answer
        ga = await a.join("g")
        async with connect(url, member="b") as b:
            gb = await b.join("g")
            saved = gb.resume_point()
            await gb.leave()

        async def drain() -> None:  # a's application keeps reading its own group (its own
            async for _ in ga:      # messages too: an unread group stops the SDK's reader)
                pass

        reading = asyncio.get_running_loop().create_task(drain())
        batch = 500
        for start in range(0, n, batch):
            await asyncio.gather(*(ga.publish_nowait({"i": i, "pad": pad})
                                   for i in range(start, min(start + batch, n))))
        pages = metric(url, "notify_history_pages_total")
        got: list[Message] = []
        prof = cProfile.Profile() if profile else None
        async with connect(url, member="b") as b:
            if prof:
                prof.enable()
            t0 = time.perf_counter()
            gb = await b.join("g", resume_from=saved)
            while True:
                e = await gb.next_event(120)
                if isinstance(e, Message):
                    got.append(e)
                elif isinstance(e, CaughtUp):
                    count = e.count
                    break
            dt = time.perf_counter() - t0
            if prof:
                prof.disable()
                prof.dump_stats(profile)
        reading.cancel()
        pages = metric(url, "notify_history_pages_total") - pages
    assert [m.payload["i"] for m in got] == list(range(n)), "b missed, repeated or reordered"
    assert all(x.offset < y.offset for x, y in itertools.pairwise(got)), "offsets"
    size = len(orjson.dumps({"i": n // 2, "pad": pad}))
    # CaughtUp.count: every message handed over in the catch-up, the pages' included
    assert count == len(got), f"CaughtUp.count {count}, {len(got)} handed over"
    return {"messages": len(got), "seconds": dt, "msgs_per_s": len(got) / dt,
            "mb_per_s": len(got) * size / dt / 1e6, "payload": size, "pages": pages}


class Blob:
    def __init__(self, size: int) -> None:
        half = size // 2
        self.data = os.urandom(half) + (b'{"k":"v","n":12345},' * (size // 40 + 1))[:size - half]

    def snapshot(self) -> bytes:
        return self.data

    def restore(self, data: bytes) -> None:
        self.data = data


async def transfer(url: str, mb: int) -> dict[str, float]:
    size = mb * 1_000_000
    donor_state = Blob(size)
    async with connect(url, member=f"d{mb}") as a:
        ga = await a.join(f"s{mb}", state=donor_state)

        async def serve() -> None:
            async for _ in ga:
                pass

        serving = asyncio.get_running_loop().create_task(serve())
        joiner_state = Blob(0)
        async with connect(url, member=f"j{mb}") as c:
            t0 = time.perf_counter()
            gc = await c.join(f"s{mb}", want_state=True, state=joiner_state)
            while True:
                e = await gc.next_event(300)
                if isinstance(e, StateReceived):
                    break
            dt = time.perf_counter() - t0
        serving.cancel()
    assert joiner_state.data == donor_state.data, "restored state differs"
    return {"mb": mb, "seconds": dt, "mb_per_s": mb / dt}


async def checkpoint(url: str, mb: int) -> dict[str, float]:
    size = mb * 1_000_000
    state = Blob(size)
    async with connect(url, member=f"d{mb}") as d:
        gd = await d.join(f"k{mb}", state=state)
        t0 = time.perf_counter()
        stored = await gd.checkpoint()
        store_s = time.perf_counter() - t0
        await asyncio.gather(*(gd.publish(i) for i in range(100)))
        await gd.leave()
    joiner = Blob(0)
    async with connect(url, member=f"c{mb}") as c:
        t0 = time.perf_counter()
        gc = await c.join(f"k{mb}", want_state=True, state=joiner)
        e = await gc.next_event(300)
        while not isinstance(e, StateReceived):
            e = await gc.next_event(300)
        serve_s = time.perf_counter() - t0
        completion = [(await gc.next_event(60)) for _ in range(100)]
    assert joiner.data == state.data, "restored state differs"
    assert sorted(m.payload for m in completion if isinstance(m, Message)) == list(range(100))
    return {"mb": mb, "store_s": store_s, "serve_s": serve_s, "bytes": stored.bytes}


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


async def compare(a: argparse.Namespace) -> list[dict[str, Any]]:
    """Catch-up from memory and from the log, each payload size, `a.repeat` rounds (the order
    of the two modes alternates between rounds); a fresh SQLite server for every run."""
    runs: list[dict[str, Any]] = []
    windows = {"memory": ["--window-messages", str(a.messages + 1000),
                          "--window-bytes", str(4 << 30)],
               "log": []}  # the defaults: 1,000 messages / 1 MiB
    durability = ["--durability", a.durability] if a.durability else []
    for rnd in range(a.repeat):
        for payload in (int(x) for x in a.payloads.split(",")):
            modes = ["memory", "log"] if rnd % 2 == 0 else ["log", "memory"]
            for mode in modes:
                profile = None
                if a.profile and mode == "log":
                    os.makedirs(a.profile, exist_ok=True)
                    profile = os.path.join(a.profile, f"catchup-log-{payload}-{rnd}.prof")
                with tempfile.TemporaryDirectory() as data, \
                        server("--store", "sqlite", "--data-dir", data, *durability,
                               *windows[mode]) as url:
                    before = loadavg()
                    r = await catchup(url, a.messages, payload, profile)
                r.update(round=rnd, mode=mode, load=before, load_after=loadavg())
                assert (r["pages"] > 0) == (mode == "log"), f"{mode}: {r['pages']} pages"
                runs.append(r)
                print(f"catch-up round {rnd + 1} {mode:>6}: {r['messages']:,} x "
                      f"{r['payload']} B in {r['seconds']:.2f} s = {r['msgs_per_s']:,.0f} "
                      f"msg/s, {r['mb_per_s']:.1f} MB/s, {r['pages']:.0f} history pages "
                      f"(load {r['load']} -> {r['load_after']})", flush=True)
    for payload in sorted({r["payload"] for r in runs}):
        mine = [r for r in runs if r["payload"] == payload]
        rate = {m: statistics.median(r["msgs_per_s"] for r in mine if r["mode"] == m)
                for m in ("memory", "log")}
        mb = {m: statistics.median(r["mb_per_s"] for r in mine if r["mode"] == m)
              for m in ("memory", "log")}
        ratios = [lg["msgs_per_s"] / mem["msgs_per_s"] for lg, mem in zip(
            (r for r in mine if r["mode"] == "log"), (r for r in mine if r["mode"] == "memory"),
            strict=True)]
        print(f"catch-up, {a.messages:,} x {payload} B, medians over {a.repeat}: memory "
              f"{rate['memory']:,.0f} msg/s ({mb['memory']:.1f} MB/s), log "
              f"{rate['log']:,.0f} msg/s ({mb['log']:.1f} MB/s); log/memory per round "
              f"{', '.join(f'{x:.2f}' for x in ratios)} (target >= 0.5)")
    return runs


async def main_async(a: argparse.Namespace) -> None:
    if a.only in ("all", "catchup"):
        await compare(a)
    if a.only == "catchup":
        return
    with server() as url:
        for mb in (int(x) for x in a.sizes.split(",")):
            t = await transfer(url, mb)
            print(f"state transfer: {t['mb']} MB snapshot restored in {t['seconds']:.2f} s "
                  f"= {t['mb_per_s']:.1f} MB/s")
    with tempfile.TemporaryDirectory() as data, \
            server("--store", "sqlite", "--data-dir", data) as url:
        for mb in (int(x) for x in a.sizes.split(",")):
            k = await checkpoint(url, mb)
            print(f"checkpoint: {k['mb']} MB stored in {k['store_s']:.2f} s ({k['bytes']:,} "
                  f"bytes on the wire); served to a joiner of the empty group, plus 100 "
                  f"messages, in {k['serve_s']:.2f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench catchup", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--payloads", default="100,1024",
                   help="catch-up payload sizes in bytes (JSON), comma-separated")
    p.add_argument("--repeat", type=int, default=1, help="catch-up rounds")
    p.add_argument("--durability", default=None, help="the servers' --durability (default: "
                   "notify serve's own, full)")
    p.add_argument("--profile", default=None, metavar="DIR",
                   help="cProfile the bench process (the SDK) during each log catch-up")
    p.add_argument("--sizes", default="10,100", help="snapshot sizes in MB, comma-separated")
    p.add_argument("--only", choices=["all", "catchup", "state"], default="all")
    asyncio.run(main_async(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    main()
