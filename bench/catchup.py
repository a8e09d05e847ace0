"""Catch-up rate and state-transfer time (issue 4), against `notify serve` in its own process.

    ./dev bench catchup                 # 50,000 missed messages; 10 MB and 100 MB snapshots
    ./dev bench catchup --messages 200000 --sizes 10,100

catch-up: member `a` publishes N messages while `b` is away (removed); `b` rejoins from its
resume point and the time from its join to `CaughtUp` gives messages replayed per second.
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
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from client_sdk import CaughtUp, Message, StateReceived, connect


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server(*args: str) -> Any:
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
            time.sleep(0.05)
        yield f"ws://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def catchup(url: str, n: int) -> dict[str, float]:
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
            await asyncio.gather(*(ga.publish({"i": i, "pad": "x" * 80})
                                   for i in range(start, min(start + batch, n))))
        async with connect(url, member="b") as b:
            t0 = time.perf_counter()
            gb = await b.join("g", resume_from=saved)
            while True:
                e = await gb.next_event(120)
                if isinstance(e, CaughtUp):
                    count = e.count
                    break
            dt = time.perf_counter() - t0
        reading.cancel()
    return {"messages": count, "seconds": dt, "msgs_per_s": count / dt}


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


async def main_async(a: argparse.Namespace) -> None:
    with server() as url:
        r = await catchup(url, a.messages)
        print(f"catch-up: {r['messages']:,} messages replayed in {r['seconds']:.2f} s "
              f"= {r['msgs_per_s']:,.0f} msg/s")
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
    p = argparse.ArgumentParser(prog="python -m bench catchup", description=__doc__)
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--sizes", default="10,100", help="snapshot sizes in MB, comma-separated")
    asyncio.run(main_async(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    main()
