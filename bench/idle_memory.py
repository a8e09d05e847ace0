"""Memory of idle groups (issue 30; DESIGN target: 1,000 idle groups with 10 MB each published
cost about 1 MiB of memory each, at most), against `notify serve` in its own process.

    ./dev bench idle_memory                           # 1,000 groups x 10 MB (10 GB of SQLite)
    ./dev bench idle_memory --groups 1000 --mb 2      # a scaled run
    ./dev bench idle_memory --groups 200 --mb 10 --procs 2 --payload 1024
    ./dev bench idle_memory --retain-bytes 2000000    # the full run in ~2 GB of disk

`notify serve --store sqlite --durability normal --idle-group I` (a fresh data directory under
`--tmp`, deleted at the end, also on failure) starts empty; its RSS (`VmRSS` of
/proc/PID/status) once it is idle is the baseline. `--procs` publisher processes
(`python -m bench.idle_memory worker ...`, JSON lines on stdin/stdout) each hold one SDK
connection, one member in each of their share of the G groups; each publishes S MB of
`--payload`-byte messages into every one of its groups (round-robin over the groups,
`publish_nowait` with `--inflight` publishes unanswered) and takes its own deliveries with a
counting handler. Every published message must come back to its member (checked), and the
server's `notify_groups` must say G.

Then, with every member still joined (so every group stays loaded, each holding its in-memory
window of at most 1,000 messages / 1 MiB), once the server is idle (its CPU below 2 % for 3 s):
RSS, RSS per group, (RSS - baseline) per group: the groups hot. Then, 15 s after
`--quiet-group` (their windows cooled, notify/core/topic.py `cool`, and the server handed the
memory back), RSS again: the groups loaded and quiet. Then every member leaves, `notify_groups` must
reach 0 (nobody is in them: evicted after `--idle-group` seconds) and, idle again, RSS again:
what memory keeps of groups that have left it (the Python allocator may keep freed arenas).
Also printed: the peak RSS (`VmHWM`), the publish rate, and the data directory's size on disk.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from typing import Any

import orjson

from bench.catchup import metric, serve
from bench.workers import Workers, say, shares
from client_sdk import ClientOptions, GroupEvent, Message, connect


def status(pid: int, key: str) -> int:
    """A `kB` line of /proc/PID/status, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def wait_idle(pid: int, limit: float = 120.0) -> float:
    """Until the process used under 2 % of a core for 3 s in a row (at most `limit` s);
    returns how long that took."""
    t0 = time.monotonic()
    quiet, last = 0, cpu_seconds(pid)
    while quiet < 3 and time.monotonic() - t0 < limit:
        time.sleep(1)
        now = cpu_seconds(pid)
        quiet = quiet + 1 if now - last < 0.02 else 0
        last = now
    return time.monotonic() - t0


def disk_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


# -- the publisher process ----------------------------------------------------------------------

async def worker(a: argparse.Namespace) -> None:
    names = [f"idle-{i}" for i in range(a.first, a.first + a.count)]
    pad = "x" * max(0, a.payload - len(orjson.dumps({"g": names[-1], "i": 10**9, "pad": ""})))
    per_group = -(-a.mb * 1_000_000 // a.payload)
    received = 0

    def count(e: GroupEvent) -> None:
        nonlocal received
        if isinstance(e, Message):
            received += 1

    options = ClientOptions(max_pending_publishes=2 * a.inflight, request_timeout=120.0)
    async with connect(a.url, member=a.member, options=options) as client:
        groups = []
        for name in names:
            g = await client.join(name)
            g.on_event(count)
            groups.append(g)
        say({"joined": len(groups)})
        t0 = time.perf_counter()
        pending: list[asyncio.Future[Any]] = []
        for i in range(per_group):
            for g in groups:
                pending.append(g.publish_nowait({"g": g.name, "i": i, "pad": pad}))
                if len(pending) >= a.inflight:
                    await asyncio.gather(*pending)
                    pending.clear()
        await asyncio.gather(*pending)
        published = per_group * len(groups)
        deadline = time.monotonic() + 120
        while received < published and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        size = len(orjson.dumps({"g": names[0], "i": per_group // 2, "pad": pad}))
        say({"published": published, "received": received, "bytes": published * size,
             "seconds": time.perf_counter() - t0})
        loop = asyncio.get_running_loop()
        while True:  # stdin off the loop: the connection's heartbeats go on meanwhile
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if line.strip() == "leave":
                for k in range(0, len(groups), 50):
                    await asyncio.gather(*(g.leave() for g in groups[k:k + 50]))
                say({"left": len(groups)})
            elif line.strip() in ("exit", ""):
                break


# -- the bench ----------------------------------------------------------------------------------

def publishers(url: str, a: argparse.Namespace) -> Workers:
    """The publisher processes, each told what to do by a line on stdin and answering one."""
    return Workers([[sys.executable, "-m", "bench.idle_memory", "worker", "--url", url,
                     "--member", f"w{k}", "--first", str(first), "--count", str(count),
                     "--mb", str(a.mb), "--payload", str(a.payload),
                     "--inflight", str(a.inflight)]
                    for k, (first, count) in enumerate(shares(a.groups, a.procs))],
                   name="a publisher")


def wait_groups(url: str, want: int, limit: float) -> float:
    t0 = time.monotonic()
    while metric(url, "notify_groups") != want:
        if time.monotonic() - t0 > limit:
            raise RuntimeError(f"notify_groups is {metric(url, 'notify_groups'):.0f}, not {want}")
        time.sleep(0.5)
    return time.monotonic() - t0


def run(a: argparse.Namespace) -> dict[str, Any]:
    mib = 1 << 20
    r: dict[str, Any] = {"groups": a.groups, "mb": a.mb, "payload": a.payload}
    with tempfile.TemporaryDirectory(dir=a.tmp, prefix="idle_memory-",
                                     ignore_cleanup_errors=True) as data, \
            serve("--store", "sqlite", "--durability", "normal", "--data-dir", data,
                  "--idle-group", str(a.idle_group), "--quiet-group", str(a.quiet_group),
                  *(["--retain-bytes", str(a.retain_bytes)] if a.retain_bytes else [])) \
            as (url, proc):
        pid = proc.pid
        wait_idle(pid)
        r["baseline"] = status(pid, "VmRSS")
        print(f"empty server: RSS {r['baseline'] / mib:.1f} MiB (load {loadavg()})", flush=True)
        workers = publishers(url, a)
        try:
            workers.answers("joined")
            assert metric(url, "notify_groups") == a.groups
            t0 = time.monotonic()
            done = workers.answers("published")
            r["publish_s"] = time.monotonic() - t0
            published = sum(d["published"] for d in done)
            r["bytes"] = sum(d["bytes"] for d in done)
            assert all(d["received"] == d["published"] for d in done), done
            print(f"published {published:,} messages, {r['bytes'] / 1e9:.2f} GB, in "
                  f"{r['publish_s']:.0f} s = {r['bytes'] / 1e6 / r['publish_s']:.1f} MB/s "
                  f"(load {loadavg()})", flush=True)
            r["idle_s"] = wait_idle(pid)
            assert metric(url, "notify_groups") == a.groups
            r["joined"] = status(pid, "VmRSS")
            r["load_joined"] = loadavg()
            print(f"{a.groups:,} groups, members joined, idle after {r['idle_s']:.0f} s: RSS "
                  f"{r['joined'] / mib:.1f} MiB = {r['joined'] / a.groups / mib:.3f} MiB per "
                  f"group, {(r['joined'] - r['baseline']) / a.groups / mib:.3f} MiB per group "
                  f"over the baseline (load {r['load_joined']})", flush=True)
            # quiet: every group's window cools after --quiet-group, and the server hands
            # what that freed back to the system within seconds (malloc_trim, TRIM_INTERVAL)
            time.sleep(a.quiet_group + 15)
            wait_idle(pid)
            r["quiet"] = status(pid, "VmRSS")
            print(f"quiet for {a.quiet_group + 15:.0f} s (--quiet-group {a.quiet_group:g}): RSS "
                  f"{r['quiet'] / mib:.1f} MiB = "
                  f"{(r['quiet'] - r['baseline']) / a.groups / mib:.3f} MiB per group over the "
                  f"baseline (load {loadavg()})", flush=True)
            workers.tell("leave")
            workers.answers("left")
            r["evicted_s"] = wait_groups(url, 0, a.idle_group + 120)
            wait_idle(pid)
            r["left"] = status(pid, "VmRSS")
            r["peak"] = status(pid, "VmHWM")
            r["load_left"] = loadavg()
            print(f"everyone left, groups evicted {r['evicted_s']:.0f} s later "
                  f"(--idle-group {a.idle_group:g}): RSS {r['left'] / mib:.1f} MiB = "
                  f"{(r['left'] - r['baseline']) / a.groups / mib:.3f} MiB per group over the "
                  f"baseline; peak RSS {r['peak'] / mib:.1f} MiB (load {r['load_left']})",
                  flush=True)
        finally:
            workers.close()
        r["disk"] = disk_bytes(data)
        print(f"data directory: {r['disk'] / 1e9:.2f} GB on disk for {r['bytes'] / 1e9:.2f} GB "
              f"of payloads (deleted now)", flush=True)
    return r


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        w = argparse.ArgumentParser(prog="python -m bench.idle_memory worker")
        w.add_argument("--url", required=True)
        w.add_argument("--member", required=True)
        w.add_argument("--first", type=int, required=True)
        w.add_argument("--count", type=int, required=True)
        w.add_argument("--mb", type=int, required=True)
        w.add_argument("--payload", type=int, required=True)
        w.add_argument("--inflight", type=int, required=True)
        asyncio.run(worker(w.parse_args(argv[1:])))
        return 0
    p = argparse.ArgumentParser(prog="python -m bench idle_memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--mb", type=int, default=10, help="MB published per group")
    p.add_argument("--payload", type=int, default=1024, help="bytes per message (JSON)")
    p.add_argument("--procs", type=int, default=2, help="publisher processes")
    p.add_argument("--inflight", type=int, default=500, help="publishes unanswered per process")
    p.add_argument("--idle-group", type=float, default=5.0)
    p.add_argument("--quiet-group", type=float, default=10.0,
                   help="a group's window cools after this long without a message")
    p.add_argument("--retain-bytes", type=int, default=None,
                   help="what the log keeps per group (bounds the disk a large run takes; "
                        "memory does not depend on it)")
    p.add_argument("--tmp", default=None, help="where the data directory goes (default: TMPDIR)")
    a = p.parse_args(argv)
    print(f"idle_memory: {a.groups:,} groups x {a.mb} MB of {a.payload} B messages, "
          f"{a.procs} publisher processes (load {loadavg()})", flush=True)
    run(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
