"""Cluster scaling shown by cost (issue 33, seed 000): server CPU-seconds per delivery with 1, 2
and 3 notify nodes, in one run, and a cost model fitted to it.

    python -m bench cluster_cost                       # 1, 2, 3 nodes; 200 groups x 5 a node
    python -m bench cluster_cost --nodes 1,2,2s --groups 100 --rate 1 --duration 20
    python -m bench cluster_cost --scaling strong --procs 6 --groups 600

Why cost and not throughput: on a 2-core machine the clients take most of the CPU, so
deliveries/s with 2 nodes cannot show what twice the cores would give (the groups bench
measured 0.99x: client-bound). What scaling needs is that a node's work per delivery does not
grow much with the number of nodes: with n nodes on n times the cores, capacity is
n / (cost(n) / cost(1)) times one node's, so "2 nodes >= 1.5x one node" needs
cost(2) <= 1.33 x cost(1).

What runs, for n in 1, 2, 3 (a fresh 3-node NATS JetStream cluster each time, `sync_interval:
always`, R3): n `notify serve --cluster` nodes; `--groups` groups x `--members` members per
node (weak scaling, the default: each node owns and serves what one node did alone, as it
would at capacity on n times the cores; `--scaling strong` keeps the total instead, so each
node gets 1/n of it and batches less), every member an SDK client in one of `--procs` client
processes per node (process j connects to node j mod n, and holds the members of groups j,
j+procs, ...: a group's members share one edge, which is its owner for 1/n of the groups).
Every member publishes `--rate` messages a second (one in flight). Over the `--duration` s
window: the CPU seconds (user + system, /proc/<pid>/stat) of every notify node and every
nats-server, the client processes' own (reported apart), and the deliveries the members
counted.

The model (seed 000's, in its spirit: a per-message cost plus what the sync between replicas
adds). Per delivery, a node spends `a` (the owner's core, its fenced append per batch, the
edge's socket write) whatever n is; a group whose members sit on an edge that is not its owner
adds `b` per delivery (the relay hop: the publish crosses edge -> owner, the deliveries cross
owner -> edge in one batch per edge, each side encoding and decoding the link). With members
on a uniformly chosen edge, that is a fraction f(n) = (n-1)/n of the groups, so

    cost(n) = a + b * (n - 1) / n

`a` comes from n=1, `b` from n=2; n=3 is predicted and compared with the measurement (the
model's error), and 10 and 50 nodes are predicted (f -> 1: the ratio tends to 1 + b/a).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cluster import (
    bench_node,
    client_proc,
    client_result,
    nats_cluster,
    nodes_running,
    pct,
    reap,
)

TICK = os.sysconf("SC_CLK_TCK")
now = time.monotonic


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14, 15)


def run(tmp: Path, n_nodes: int, names: list[str], members: int, procs: int, rate: float,
        duration: float, idle: float, standby: bool = False) -> dict[str, Any]:
    """One configuration; `standby`: the last node is a hot standby (`--standby`), so one
    node owns every group and the other only relays (seed 000's active-standby)."""
    from notify_chaos.natsrun import free_ports

    root = tmp / f"cost-{n_nodes}{'s' if standby else ''}"
    with nats_cluster(root) as nats:
        ports = free_ports(n_nodes)
        nodes = [bench_node(f"n{i + 1}", ports[i], root, nats.urls,
                            ["--standby"] if standby and i == n_nodes - 1 else None)
                 for i in range(n_nodes)]
        with nodes_running(nodes, cluster=True):
            # what the nodes and NATS spend with no client at all (leases, heartbeats, ticks)
            pids = {n.name: n.proc.pid for n in nodes if n.proc is not None}
            nats_pids = [nats.pid(i) for i in range(len(nats.nodes))]
            time.sleep(2.0)
            t0, i0 = now(), sum(cpu_seconds(p) for p in pids.values())
            n0 = sum(cpu_seconds(p) for p in nats_pids)
            time.sleep(idle)
            idle_s = now() - t0
            idle_notify = (sum(cpu_seconds(p) for p in pids.values()) - i0) / idle_s
            idle_nats = (sum(cpu_seconds(p) for p in nats_pids) - n0) / idle_s
            setup = 20.0 + len(names) * members * 0.01
            start = now() + setup
            ps = []
            try:
                for j in range(procs):
                    node = nodes[j % n_nodes]
                    ps.append(client_proc("client-members", node.url, ",".join(names[j::procs]),
                                          str(members), str(start), str(duration), f"p{j}",
                                          str(rate)))
                time.sleep(max(0.0, start - now()))
                t0 = now()
                before = {k: cpu_seconds(p) for k, p in pids.items()}
                nats_before = [cpu_seconds(p) for p in nats_pids]
                time.sleep(max(0.0, start + duration - now()))
                window = now() - t0
                node_cpu = {k: round(cpu_seconds(p) - before[k], 3) for k, p in pids.items()}
                nats_cpu = round(sum(cpu_seconds(p) for p in nats_pids) - sum(nats_before), 3)
                load = os.getloadavg()[0]
                rs = [client_result(p_, setup + duration + 90) for p_ in ps]
            finally:
                reap(ps)
    received = sum(r["received"] for r in rs)
    out = {"nodes": n_nodes, "standby": standby, "config": f"{n_nodes}{'s' if standby else ''}",
           "deliveries": received,
           "deliveries_per_s": round(received / duration),
           "published_per_s": round(sum(r["published"] for r in rs) / duration),
           "node_cpu_s": node_cpu, "notify_cpu_s": round(sum(node_cpu.values()), 3),
           "nats_cpu_s": nats_cpu,
           "client_cpu_s": round(sum(r["cpu_s"] or 0.0 for r in rs), 3),
           "window_s": round(window, 2), "load1": round(load, 2),
           "idle_notify_cpu_per_s": round(idle_notify, 4),
           "idle_nats_cpu_per_s": round(idle_nats, 4),
           "joined": sum(r["joined"] for r in rs),
           "errors": sum(r["n_errors"] for r in rs), "stuck": sum(r["stuck"] for r in rs),
           "error_samples": [e for r in rs for e in r["errors"]][:3]}
    d = max(received, 1)
    out["notify_us_per_delivery"] = round(out["notify_cpu_s"] / d * 1e6, 2)
    # the work the deliveries caused: what the nodes spent beyond their idle rate
    out["notify_work_us_per_delivery"] = round(
        (out["notify_cpu_s"] - idle_notify * window) / d * 1e6, 2)
    out["nats_us_per_delivery"] = round(nats_cpu / d * 1e6, 2)
    out["latency_ms"] = pct([x for r in rs for x in r.get("latencies", [])])
    out["client_us_per_delivery"] = round(out["client_cpu_s"] / d * 1e6, 2)
    print(json.dumps(out), flush=True)
    return out


def _ratio(cost: dict[Any, float], n: Any) -> str:
    return f"{cost[n] / cost[1]:.3f}" if cost.get(1) else "-"


def model(cost: dict[int, float]) -> dict[str, Any]:
    """Fit `a + b (n-1)/n` on n=1 and n=2; predict n=3 (and 10, 50)."""
    a = cost[1]
    b = (cost[2] - a) * 2
    predict = {n: a + b * (n - 1) / n for n in (2, 3, 10, 50)}
    out: dict[str, Any] = {"a_us": round(a, 2), "b_us": round(b, 2),
                           "predicted_us": {str(n): round(v, 2) for n, v in predict.items()},
                           "predicted_ratio": {str(n): round(v / a, 3)
                                               for n, v in predict.items()}}
    if 3 in cost:
        out["measured_3_us"] = round(cost[3], 2)
        out["error_3"] = round((predict[3] - cost[3]) / cost[3], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench cluster_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=200)
    p.add_argument("--members", type=int, default=5)
    p.add_argument("--procs", type=int, default=2,
                   help="client processes (per active node with weak scaling; with strong "
                        "scaling a multiple of 6 spreads them evenly on 1-3 nodes)")
    p.add_argument("--rate", type=float, default=0.5, help="publishes a second per member")
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--nodes", default="1,2,3",
                   help="configurations, in order: a node count, or e.g. 2s for 2 nodes of "
                        "which the last is a hot standby (seed 000's active-standby)")
    p.add_argument("--scaling", choices=("weak", "strong"), default="weak",
                   help="weak: --groups and --procs per active node, so each node serves the "
                        "same load whatever n (what capacity on n x the cores needs); strong: "
                        "the same groups for every n")
    p.add_argument("--idle", type=float, default=8.0,
                   help="s of measuring the nodes' CPU with no client, before the clients")
    p.add_argument("--json", type=Path, help="also write the results here")
    a = p.parse_args(argv)
    names = [f"g{i}" for i in range(a.groups)]
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "cpus": os.cpu_count(), "groups": a.groups,
                               "members": a.members, "rate": a.rate, "duration": a.duration,
                               "scaling": a.scaling,
                               "runs": []}
    with tempfile.TemporaryDirectory(prefix="notify-bench-cost-") as d:
        for token in a.nodes.split(","):
            n = int(token.rstrip("s"))
            serving = n - 1 if token.endswith("s") else n  # (a standby owns nothing)
            strong = a.scaling == "strong"
            groups = names if strong else [f"g{i}" for i in range(a.groups * serving)]
            results["runs"].append(run(Path(d), n, groups, a.members,
                                       a.procs if strong else a.procs * serving,
                                       a.rate, a.duration, a.idle,
                                       standby=token.endswith("s")))
    active = [r for r in results["runs"] if not r["standby"]]
    raw = {r["nodes"]: r["notify_us_per_delivery"] for r in active}
    work = {r["nodes"]: r["notify_work_us_per_delivery"] for r in active}
    per = " per active node" if a.scaling == "weak" else ""
    print(f"\n{a.scaling} scaling: {a.groups} groups x {a.members} members{per}, {a.rate:g} "
          f"publishes/s per member, {a.procs} client processes{per}, {a.duration:g} s "
          f"windows, {results['date']}")
    print("| notify nodes | deliveries/s | notify CPU µs/delivery (ratio) | of which beyond "
          "idle (ratio) | idle CPU/s of all nodes | nats-server µs/delivery | clients "
          "µs/delivery | p50 / p99 ms | load1 | errors |\n"
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results["runs"]:
        n, c, lat = r["nodes"], r["config"], r["latency_ms"]
        name = f"{n}, n{n} standby" if r["standby"] else str(n)
        here = {**raw, c: r["notify_us_per_delivery"]}
        here_work = {**work, c: r["notify_work_us_per_delivery"]}
        print(f"| {name} | {r['deliveries_per_s']:,} | {here[c]} ({_ratio(here, c)}) | "
              f"{here_work[c]} ({_ratio(here_work, c)}) | {r['idle_notify_cpu_per_s']} | "
              f"{r['nats_us_per_delivery']} | {r['client_us_per_delivery']} | "
              f"{lat.get('p50')} / {lat.get('p99')} | {r['load1']} | {r['errors']} |")
    for name, cost in (("all CPU", raw), ("beyond idle", work)):
        if 1 in cost and 2 in cost:
            m = results.setdefault("model", {})[name] = model(cost)
            print(f"\nmodel ({name}): cost(n) = a + b (n-1)/n, a = {m['a_us']} µs, "
                  f"b = {m['b_us']} µs")
            if "error_3" in m:
                print(f"  n=3: predicted {m['predicted_us']['3']} µs, measured "
                      f"{m['measured_3_us']} µs, error {m['error_3']:+.1%}")
            print("  predicted ratio to 1 node: " + ", ".join(
                f"{n} nodes {v}" for n, v in m["predicted_ratio"].items()))
            print(f"  2 nodes / 1 node: {cost[2] / cost[1]:.3f} (target ≤ 1.33)")
    if a.json:
        a.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
