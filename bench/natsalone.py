"""NATS alone under seed 004's Table 3 fault (issue 33): what a 10 ms delay on the stream
leader's route links costs JetStream itself, without notify.

    python -m bench.natsalone [--rate 400] [--size 4000] [--phase 20] \
        [--mode each|group-commit|group-commit-plain] [--no-fence] \
        [--pub-on follower|leader] [--sub-on follower|leader] [--ms 10] [--from-leader] \
        [--out bench/results/natsalone-<time>.json]

The same NATS cluster as `notify-chaos`'s `cluster-table3-delay`: 3 nats-servers from
`notify_chaos.natsrun` (JetStream, `sync_interval: always`) whose routes all go through the
route proxies of `notify_chaos.routes` (checked with `RouteMesh.verify`, as the runner does),
and an R3 stream with the settings of notify's log (`notify/storage/jetstream.py`:
`allow_atomic`, `allow_direct`, `duplicate_window` 120 s, subjects `nlog.>`). One publisher
connection publishes `size`-byte payloads on `nlog.g1.m` at `rate` msg/s; one subscriber
connection reads them through an ordered push consumer (delivered once the stream leader has
committed them). Phase `before` for `phase` seconds, then phase `during` for `phase` seconds
with `ms` on every route link touching the stream leader (`RouteMesh.delay_touching`, both
directions, to each replica), exactly the chaos action `delay-stream-leader`; with
`--from-leader` only the bytes the leader sends (its `params: {from_leader: true}`, seed 004's
"from the leader towards the replicas").

Modes:

- `each`: every message its own `js.publish` (a request: publish → ack), each its own task, so
  acknowledgements never hold back the rate (how seed 004's clients publish);
- `group-commit`: notify's owner (notify/core/writes.py): ONE write in flight; messages that
  arrive meanwhile wait and become the next write, sent as one JetStream atomic batch
  (`Nats-Batch-Id/-Sequence/-Commit`, the first record fenced with
  `Nats-Expected-Last-Subject-Sequence`, unless `--no-fence`), answered when its commit is
  acknowledged;
- `group-commit-plain`: the same one write in flight, but a write is its messages as plain
  `js.publish`es sent together (no atomic batch, no fence), answered when all are acknowledged:
  what the discipline costs without JetStream's atomic batch.

Reported per phase: the write time (from a write's first byte sent to its ack), publish -> ack
and publish -> receive p50 / p99 / mean (send time = when the message was due at its rate, so
waiting for the write in flight counts), messages and writes (and messages per write), the
stream leader and which servers the two connections are on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

import nats
from nats.js.api import DeliverPolicy, StreamConfig

from notify_chaos.natsrun import free_ports, nats_server_binary
from notify_chaos.routes import RouteMesh


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summary(xs: list[float]) -> dict[str, Any]:
    return {"n": len(xs), "p50": pct(xs, 0.5), "p99": pct(xs, 0.99),
            "mean": statistics.fmean(xs) if xs else None}


async def make_stream(nc: Any) -> None:
    js = nc.jsm()
    cfg = StreamConfig(name="NOTIFY", subjects=["nlog.>"], num_replicas=3, allow_atomic=True,
                       allow_direct=True, duplicate_window=120.0)
    for attempt in range(30):  # a new cluster's meta layer may still be settling
        try:
            await js.add_stream(cfg)
            break
        except Exception:
            if attempt == 29:
                raise
            await asyncio.sleep(1.0)
    for _ in range(100):
        info = await js.stream_info("NOTIFY")
        if info.cluster is not None and info.cluster.leader:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("the stream has no leader")


async def measure(a: argparse.Namespace, mesh: RouteMesh, cluster: Any) -> dict[str, Any]:
    admin = await nats.connect(cluster.urls[0], connect_timeout=5)
    await make_stream(admin)
    info = await admin.jsm().stream_info("NOTIFY")
    assert info.cluster is not None
    leader_name = info.cluster.leader
    names = [n.name for n in cluster.nodes]
    leader = names.index(leader_name)
    followers = [i for i in range(len(names)) if i != leader]
    pub_i = leader if a.pub_on == "leader" else followers[0]
    sub_i = leader if a.sub_on == "leader" else followers[-1]
    await admin.close()
    pub = await nats.connect(cluster.urls[pub_i], connect_timeout=5, name="pub")
    sub = await nats.connect(cluster.urls[sub_i], connect_timeout=5, name="sub")
    js = pub.jetstream()
    # the stream's interest may not have reached the publisher's server yet: warm it up
    for _ in range(100):
        try:
            await js.publish("nlog.warm.m", b"", timeout=10)
            break
        except Exception:
            await asyncio.sleep(0.1)
    check = await asyncio.to_thread(mesh.verify)
    if not check["ok"]:
        raise RuntimeError(f"the routes bypass the proxies: {check}")

    phases = ["before", "during"]
    acks: dict[str, list[float]] = {p: [] for p in phases}
    recvs: dict[str, list[float]] = {p: [] for p in phases}
    writes: dict[str, int] = {p: 0 for p in phases}
    write_s: dict[str, list[float]] = {p: [] for p in phases}
    msgs: dict[str, int] = {p: 0 for p in phases}
    errors: list[str] = []
    t0 = time.perf_counter() + 1.0
    end = t0 + a.phase * len(phases)

    def phase_of(t: float) -> str | None:
        k = int((t - t0) // a.phase)
        return phases[k] if 0 <= k < len(phases) else None

    async def on_msg(msg: Any) -> None:
        now = time.perf_counter()
        if len(msg.data) >= 8:
            (sent,) = struct.unpack("d", msg.data[:8])
            p = phase_of(sent)
            if p is not None:
                recvs[p].append(now - sent)

    for attempt in range(10):  # a cluster just started may time out the consumer's creation
        try:
            await sub.jetstream().subscribe("nlog.g1.m", cb=on_msg, ordered_consumer=True,
                                            deliver_policy=DeliverPolicy.NEW)
            break
        except nats.errors.TimeoutError:
            if attempt == 9:
                raise
            await asyncio.sleep(1.0)
    await asyncio.sleep(0.5)
    pad = b"x" * max(0, a.size - 8)
    tasks: set[asyncio.Task[None]] = set()

    async def one(payload: bytes, sent: float) -> None:
        started = time.perf_counter()
        try:
            await js.publish("nlog.g1.m", payload, timeout=10)
        except Exception as e:
            errors.append(repr(e))
            return
        p = phase_of(sent)
        if p is not None:
            acks[p].append(time.perf_counter() - sent)
            msgs[p] += 1
            writes[p] += 1
            write_s[p].append(time.perf_counter() - started)

    queue: list[tuple[float, bytes]] = []
    wake = asyncio.Event()
    last_seq = 0
    counter = 0

    async def atomic_batch(bid: str, bodies: list[bytes]) -> int:
        """One JetStream atomic batch (as notify/storage/jetstream.py `_batch_once`)."""
        reply = None
        for i, body in enumerate(bodies, 1):
            h = {"Nats-Batch-Id": bid, "Nats-Batch-Sequence": str(i),
                 "Nats-Msg-Id": f"{bid}:{i}"}
            if i == 1 and not a.no_fence:
                h["Nats-Expected-Last-Subject-Sequence"] = str(last_seq)
                h["Nats-Expected-Last-Subject-Sequence-Subject"] = "nlog.g1.>"
            if i < len(bodies):
                await pub.publish("nlog.g1.m", body, headers=h)
            else:
                h["Nats-Batch-Commit"] = "1"
                reply = await pub.request("nlog.g1.m", body, headers=h, timeout=10)
        assert reply is not None
        ack = json.loads(reply.data)
        if "seq" not in ack:
            raise RuntimeError(str(ack))
        return int(ack["seq"])

    async def writer() -> None:  # group commit: one write in flight
        nonlocal last_seq, counter
        while True:
            await wake.wait()
            wake.clear()
            while queue:
                batch, queue[:] = queue[:1000], queue[1000:]
                counter += 1
                bid = f"b{counter}"
                started = time.perf_counter()
                try:
                    if a.mode == "group-commit-plain":  # no atomic batch, no fence
                        acked = await asyncio.gather(*(js.publish("nlog.g1.m", body, timeout=10)
                                                       for _sent, body in batch))
                        last_seq = max(x.seq for x in acked)
                    else:
                        last_seq = await atomic_batch(bid, [body for _sent, body in batch])
                except Exception as e:
                    errors.append(repr(e))
                    continue
                now = time.perf_counter()
                ps = phase_of(batch[0][0])
                if ps is not None:
                    writes[ps] += 1
                    write_s[ps].append(now - started)
                for sent, _body in batch:
                    p = phase_of(sent)
                    if p is not None:
                        acks[p].append(now - sent)
                        msgs[p] += 1

    wtask = asyncio.create_task(writer()) if a.mode != "each" else None
    delayed_at = None
    i = 0
    while True:
        due = t0 + i / a.rate
        if due >= end:
            break
        if delayed_at is None and due >= t0 + a.phase:
            await asyncio.to_thread(lambda: mesh.delay_touching(leader, a.ms,
                                                                from_only=a.from_leader))
            delayed_at = time.perf_counter() - t0
        now = time.perf_counter()
        if due > now:
            await asyncio.sleep(due - now)
        payload = struct.pack("d", due) + pad
        if wtask is None:
            t = asyncio.create_task(one(payload, due))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        else:
            queue.append((due, payload))
            wake.set()
        i += 1
    # answers still due
    for _ in range(200):
        if not tasks and not queue:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(2.0)
    if wtask is not None:
        wtask.cancel()
    check_end = await asyncio.to_thread(mesh.verify)
    await asyncio.to_thread(mesh.delay_touching, leader, 0)
    await pub.close()
    await sub.close()
    return {
        "args": vars(a), "leader": leader_name, "pub_on": names[pub_i], "sub_on": names[sub_i],
        "delayed_at_s": delayed_at, "routes_check": {"start": check, "end": check_end},
        "errors": len(errors), "first_errors": errors[:5],
        "phases": {p: {"ack": summary(acks[p]), "receive": summary(recvs[p]),
                       "messages": msgs[p], "writes": writes[p],
                       "per_write": msgs[p] / writes[p] if writes[p] else None,
                       "write": summary(write_s[p])}
                   for p in phases}}


async def main_async(a: argparse.Namespace) -> dict[str, Any]:
    binary = nats_server_binary()
    if binary is None:
        raise SystemExit("needs the nats-server binary (the cluster extra)")
    mesh = RouteMesh()
    ports = free_ports(3)
    await mesh.start_proxies(ports)
    with tempfile.TemporaryDirectory(prefix="natsalone-") as tmp:
        cluster = mesh.plan(Path(tmp), binary, 3, cluster_ports=ports,
                            cluster_name="natsalone")
        try:
            for i in range(3):
                cluster.start(i)
            await asyncio.to_thread(cluster.wait_ready, timeout=30.0)
            return await measure(a, mesh, cluster)
        finally:
            await asyncio.to_thread(cluster.stop_all)
            await mesh.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=400.0, help="msg/s")
    ap.add_argument("--size", type=int, default=4000, help="payload bytes")
    ap.add_argument("--phase", type=float, default=20.0, help="seconds per phase")
    ap.add_argument("--mode", choices=["each", "group-commit", "group-commit-plain"],
                    default="each")
    ap.add_argument("--no-fence", action="store_true",
                    help="group-commit without Nats-Expected-Last-Subject-Sequence")
    ap.add_argument("--pub-on", choices=["follower", "leader"], default="follower")
    ap.add_argument("--sub-on", choices=["follower", "leader"], default="follower")
    ap.add_argument("--ms", type=float, default=10.0, help="delay during the second phase")
    ap.add_argument("--from-leader", action="store_true",
                    help="delay only what the leader sends (seed 004's leader -> replicas)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    res = asyncio.run(main_async(a))
    text = json.dumps(res, indent=1, default=str)
    out = a.out or Path("bench/results") / f"natsalone-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
