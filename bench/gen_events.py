"""Scale generator: a large, consistent delivery event log (DESIGN §6, §8's 10M-event target).

    python -m bench.gen_events --out DIR --events 10000000 [--workers 2] [--seed 1]

Writes server and client JSONL logs for many groups over one hour. The mix and skew follow what
the fleet simulator shows, scaled up: group sizes and message rates are Zipf-skewed (a few big
busy groups, a long tail of small quiet ones); each accepted message fans out to one
`client.deliver` per member (most of the volume); 60 % FIFO, 30 % total order, 10 % atomic
(a few aborted); members disconnect with short hand-offs (~1 s, resumed within the 3 s
`suspect_timeout`), long sleeps (tens of seconds: removed, then rejoined in a new view) or for
good. In groups of 4 or more, two members are instances of one user (`u<G>-0#1`, `u<G>-0#2`:
issue 29). Each member gets its deliveries in order (as over one connection), and the history
is consistent, so `notify-analyze check` finds no violation in it.
"""

from __future__ import annotations

import argparse
import heapq
import math
import multiprocessing as mp
import random
import sys
import time
from pathlib import Path

import orjson

T0 = 1_800_000_000.0
HOUR = 3600.0
SUSPECT = 3.0


def _group(gid: int, rng: random.Random, budget: int, srv, cli) -> int:
    """Write one group's hour; returns the number of events written."""
    k = max(2, min(60, int(2 + rng.paretovariate(1.3))))
    members = [f"u{gid}-{i}" for i in range(k)]
    if k >= 4:
        # one user on two devices (issue 29: member id `user#instance`): members 0 and 1 are
        # instances of user u{gid}-0. Their ids sort where u{gid}-0 and u{gid}-1 did (`#`
        # sorts before the digits), so every draw from `sorted(in_view)`, and the history,
        # is the one the generator made before it had users
        members[0], members[1] = f"u{gid}-0#1", f"u{gid}-0#2"
    rate = max(0.01, min(20.0, rng.paretovariate(1.1) * 0.05))  # messages/s
    g = f"grp-{gid}"
    view = 1
    in_view = set(members)
    away: dict[str, float] = {}  # member -> back at (still in view, resumes)
    seqs: dict[str, int] = {}
    n: dict[str, int] = dict.fromkeys(members, 0)
    last: dict[str, float] = {}  # member -> recv_ts of its last delivery
    heap: list[tuple[float, int, str, str]] = []
    count = 0
    tie = 0

    def w(f, d: dict) -> None:
        nonlocal count
        f.write(orjson.dumps(d))
        f.write(b"\n")
        count += 1

    def install(t: float, reason: str, joined: str | None = None) -> None:
        nonlocal view
        w(srv, {"ts": t - 0.01, "event": "view.propose", "node": "server", "group": g,
                "view": view, "proposed": view + 1, "reason": reason,
                "members": sorted(in_view)})
        view += 1
        w(srv, {"ts": t, "event": "view.install", "node": "server", "group": g, "view": view,
                "members": sorted(in_view), "duration_ms": rng.lognormvariate(1.5, 0.6),
                "previous": view - 1})
        for m in in_view:
            if away.get(m) == math.inf:
                continue  # disconnected and about to be removed: it never sees this install
            w(cli, {"ts": t + 0.002, "event": "client.view", "node": m, "group": g, "member": m,
                    "view": view, "members": sorted(in_view)})

    t0 = T0 + rng.uniform(0, 60)
    for m in members:
        w(srv, {"ts": t0, "event": "conn.open", "node": "server", "member": m, "session": m,
                "resumed": False})
    in_view_list = sorted(in_view)
    w(srv, {"ts": t0, "event": "view.install", "node": "server", "group": g, "view": 1,
            "members": in_view_list, "duration_ms": 1.0, "previous": 0})
    for m in members:
        w(cli, {"ts": t0 + 0.001, "event": "client.view", "node": m, "group": g, "member": m,
                "view": 1, "members": in_view_list})
    t = t0
    off = 0
    while count < budget and t < T0 + HOUR:
        t += rng.expovariate(rate)
        while heap and heap[0][0] <= t:
            te, _, kind, m = heapq.heappop(heap)
            if kind == "remove":
                in_view.discard(m)
                away.pop(m, None)
                w(cli, {"ts": te + 0.002, "event": "client.view", "node": m, "group": g,
                        "member": m, "view": view + 1, "members": [], "removed": True})
                install(te, "suspect")
            else:  # "rejoin:<gap seconds>"
                w(cli, {"ts": te, "event": "client.reconnect", "node": m, "member": m,
                        "gap_ms": float(kind[7:]) * 1000, "resumed": False})
                in_view.add(m)
                install(te + 0.02, "join")
        # a member drops now and then (more often in small, mobile-heavy groups)
        if in_view and rng.random() < 0.02:
            m = rng.choice(sorted(in_view))
            if away.get(m, 0.0) < t:
                u = rng.random()
                gap = (None if u < 0.05 else rng.lognormvariate(0.0, 0.5) if u < 0.75
                       else rng.lognormvariate(math.log(30), 0.6))
                w(cli, {"ts": t, "event": "client.disconnect", "node": m, "member": m,
                        "reason": "network"})
                w(srv, {"ts": t, "event": "conn.close", "node": "server", "member": m,
                        "session": m, "code": 1006, "reason": ""})
                w(srv, {"ts": t, "event": "member.suspect", "node": "server", "group": g,
                        "view": view, "member": m})
                if gap is not None and gap <= SUSPECT:
                    away[m] = t + gap
                    w(cli, {"ts": t + gap, "event": "client.reconnect", "node": m, "member": m,
                            "gap_ms": gap * 1000, "resumed": True})
                    w(srv, {"ts": t + gap, "event": "member.resume", "node": "server",
                            "group": g, "view": view, "member": m, "gap_ms": gap * 1000})
                else:
                    tie += 1
                    heapq.heappush(heap, (t + SUSPECT, tie, "remove", m))
                    away[m] = math.inf
                    if gap is not None:
                        tie += 1
                        heapq.heappush(heap, (t + gap, tie, f"rejoin:{gap}", m))
        if not in_view:
            continue
        sender = rng.choice(sorted(in_view))
        u = rng.random()
        order, atomic = ("fifo", False) if u < 0.6 else ("total", False) if u < 0.9 \
            else ("fifo", True)
        stream = "total" if order == "total" else f"fifo:{sender}"
        seqs[stream] = seq = seqs.get(stream, 0) + 1
        off += 1
        w(srv, {"ts": t, "event": "msg.accept", "node": "server", "group": g, "view": view,
                "member": sender, "offset": off, "stream": stream, "seq": seq, "sender": sender,
                "order": order, "atomic": atomic, "bytes": 100})
        if atomic and (any(away.get(m, 0) > t for m in in_view) and rng.random() < 0.5):
            w(srv, {"ts": t + 0.05, "event": "atomic.abort", "node": "server", "group": g,
                    "view": view, "offset": off, "sender": sender, "reason": "member_failed"})
            continue
        if atomic:
            w(srv, {"ts": t + 0.004, "event": "atomic.commit", "node": "server", "group": g,
                    "view": view, "offset": off, "sender": sender,
                    "duration_ms": rng.lognormvariate(1.2, 0.5)})
        for m in in_view:
            back = away.get(m, 0.0)
            if back == math.inf:
                continue  # about to be removed: it never gets it (it is not a survivor)
            lat = rng.lognormvariate(-6.0, 0.7) + (0.004 if atomic else 0.0)
            # one connection delivers in order: never before this member's previous delivery
            # (independent jitter per message would reorder close messages: false G3/G4/G7/G8)
            recv = max(t + lat, back + lat, last.get(m, 0.0) + 1e-6)
            last[m] = recv
            n[m] += 1
            w(cli, {"ts": recv, "event": "client.deliver", "node": m, "group": g, "member": m,
                    "view": view, "offset": off, "stream": stream, "seq": seq, "sender": sender,
                    "atomic": atomic, "msg_view": view, "sent_ts": t - 0.0005, "recv_ts": recv,
                    "n": n[m]})
    return count


def _worker(args: tuple[int, int, int, str]) -> int:
    wid, workers, budget, out = args
    rng = random.Random(wid * 7919 + 1)
    written, gid = 0, wid
    with open(Path(out) / f"events-server-{wid}.jsonl", "wb") as srv, \
            open(Path(out) / f"events-clients-{wid}.jsonl", "wb") as cli:
        while written < budget:
            written += _group(gid, rng, min(budget - written, 400_000), srv, cli)
            gid += workers
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gen_events", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    per = -(-a.events // a.workers)
    with mp.Pool(a.workers) as pool:
        n = sum(pool.map(_worker, [(w, a.workers, per, str(out)) for w in range(a.workers)]))
    size = sum(f.stat().st_size for f in out.glob("*.jsonl"))
    print(f"{n:,} events, {size / 1e9:.2f} GB in {time.perf_counter() - t0:.1f} s -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
