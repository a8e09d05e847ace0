"""Watch a running `notify-chaos` cluster run from the side (issue 33, Table 3 explained).

    python -m bench.chaoswatch OUT [--every 2] [--for 120]

Polls, every `--every` seconds until the run's processes are gone (or `--for` seconds):

- each notify node's `/metrics` (its port read from the `notify serve --port` command line of
  the processes whose data directory is under OUT): `notify_write_seconds` (count, sum,
  buckets) and `notify_messages`, so that a window's writes, messages per write and mean write
  time are differences of two samples;
- each nats-server's `/connz` (its monitor port read from OUT/nats/nN.conf) with the stream
  leader from `/jsz`: which server every notify process's NATS connections are on (matched to
  the process by `ss -tnp`, the connection's local port), to count which hops of a message
  cross a route touching the stream leader.

Writes JSON lines (one sample each, `wall` = time.time()) to OUT-watch.jsonl beside OUT.

    python -m bench.chaoswatch --report OUT [OUT ...]

After the run: for each OUT, the stream leader and where everything was (each client's edge,
from run.json's links; each node's two NATS connections: `notify-node-N` carries the
edge <-> owner traffic, the unnamed one the log's appends), which hops of g1's messages cross a
route touching the leader, and per window (before [2, 22) s, during [22, 42), after [42, 62),
as the report's): publish -> ack p50 / p99 (acks/), and on the owner the writes, messages per
write and mean write time (`notify_write_seconds`: differences of the samples nearest to the
window's ends).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=2) as r:
        return str(r.read().decode())


def _nodes(out: Path) -> dict[str, tuple[int, int]]:
    """node name -> (pid, port) of the `notify serve` processes of this run."""
    ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    found: dict[str, tuple[int, int]] = {}
    for line in ps.splitlines():
        if "notify.cli serve" not in line or str(out) not in line:
            continue
        pid = int(line.split()[0])
        port = re.search(r"--port (\d+)", line)
        node = re.search(r"--node-id (\S+)", line)
        if port and node:
            found[node.group(1)] = (pid, int(port.group(1)))
    return found


def _nats(out: Path) -> dict[str, int]:
    """server name -> monitor port."""
    ports = {}
    for conf in sorted((out / "nats").glob("n*.conf")):
        m = re.search(r"http: 127\.0\.0\.1:(\d+)", conf.read_text())
        if m:
            ports[conf.stem] = int(m.group(1))
    return ports


def _metrics(port: int) -> dict[str, float]:
    want = ("notify_write_seconds_", "notify_messages_total", "notify_deliveries_total")
    vals: dict[str, float] = {}
    for line in _get(f"http://127.0.0.1:{port}/metrics").splitlines():
        if line.startswith(want):
            k, _, v = line.rpartition(" ")
            vals[k] = float(v)
    return vals


def _owners_of_ports() -> dict[int, int]:
    """local TCP port -> pid, from `ss -tnp` (our own processes)."""
    ss = subprocess.run(["ss", "-tnpH"], capture_output=True, text=True).stdout
    owners: dict[int, int] = {}
    for line in ss.splitlines():
        parts = line.split()
        if len(parts) < 6:
            continue
        local = parts[3]
        m = re.search(r"pid=(\d+)", line)
        if m and local.startswith("127.0.0.1:"):
            owners[int(local.rsplit(":", 1)[1])] = int(m.group(1))
    return owners


def sample(out: Path) -> dict[str, Any]:
    s: dict[str, Any] = {"wall": time.time(), "nodes": {}, "nats": {}}
    nodes = _nodes(out)
    for name, (_pid, port) in nodes.items():
        try:
            s["nodes"][name] = _metrics(port)
        except OSError as e:
            s["nodes"][name] = {"error": str(e)}
    owners = _owners_of_ports()
    by_pid = {pid: name for name, (pid, _port) in nodes.items()}
    for server, port in _nats(out).items():
        try:
            connz = json.loads(_get(f"http://127.0.0.1:{port}/connz?limit=1024"))
            jsz = json.loads(_get(f"http://127.0.0.1:{port}/jsz?accounts=true&streams=true"))
        except OSError:
            continue
        conns = [{"name": c.get("name"), "port": c.get("port"),
                  "node": by_pid.get(owners.get(int(c.get("port") or 0), -1))}
                 for c in connz.get("connections") or []]
        leader = None
        for acc in jsz.get("account_details") or []:
            for st in acc.get("stream_detail") or []:
                if st.get("name") == "NOTIFY":
                    leader = (st.get("cluster") or {}).get("leader")
        s["nats"][server] = {"conns": conns, "notify_leader": leader}
    return s


WINDOWS = {"before": (2.0, 22.0), "during": (22.0, 42.0), "after": (42.0, 62.0)}


def _pct(xs: list[float], q: float) -> float | None:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 4) if xs else None


def report(out: Path) -> dict[str, Any]:
    run = json.loads((out / "run.json").read_text())
    t0 = run["t0"]
    ev = {e["event"]: e for e in run["events"]}
    leader = ev.get("victim", {}).get("nats")
    edges = {k.split("->")[0]: k.split("->")[1] for k, v in run["links"].items()
             if v.get("accepted")}
    samples = [json.loads(x) for x in
               (out.parent / f"{out.name}-watch.jsonl").read_text().splitlines()]
    # where each node's connections were (the last sample taken while all were up)
    where: dict[str, dict[str, str]] = {}
    for s in samples:
        w: dict[str, dict[str, str]] = {}
        for server, info in s["nats"].items():
            for c in info["conns"]:
                if c["node"]:
                    kind = "link" if c["name"] else "log"
                    w.setdefault(c["node"], {})[kind] = server
        if len(w) == 3 and all(len(v) == 2 for v in w.values()):
            where = w
        if leader is None:
            leader = next((i["notify_leader"] for i in s["nats"].values()), None)
    most: dict[str, float] = {}
    for s in samples:
        for n, m in s["nodes"].items():
            most[n] = max(most.get(n, 0.0), m.get("notify_messages_total", 0.0))
    owner = max(most, key=lambda n: most[n])
    samples_ok = [s for s in samples if "notify_write_seconds_count" in s["nodes"].get(owner, {})]
    hops: dict[str, Any] = {}
    if where:
        own = where[owner]

        def delayed(a: str, b: str) -> bool:
            return a != b and leader in (a, b)
        up = sorted({edges[c] for c in edges if c.startswith("publisher")})
        down = sorted({edges[c] for c in edges})
        hops = {
            "edge->owner (uplink)": {e: delayed(where[e]["link"], own["link"])
                                     for e in up if e != owner},
            "owner log -> leader, and the ack back": delayed(own["log"], leader),
            "leader <-> replica (replication)": True,
            "owner->edge (downlink)": {e: delayed(own["link"], where[e]["link"])
                                       for e in down if e != owner},
        }

    def at(t: float) -> dict[str, float]:
        s = min(samples_ok, key=lambda s: abs(s["wall"] - (t0 + t)))
        return dict(s["nodes"].get(owner, {}), _off=s["wall"] - (t0 + t))

    acks = []
    for f in sorted((out / "acks").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            a = json.loads(line)
            if "ts" in a and "sent_ts" in a and a.get("offset") is not None:
                acks.append((a["sent_ts"] - t0, a["ts"] - a["sent_ts"]))
    windows = {}
    for name, (lo, hi) in WINDOWS.items():
        a, b = at(lo), at(hi)
        writes = b.get("notify_write_seconds_count", 0) - a.get("notify_write_seconds_count", 0)
        secs = b.get("notify_write_seconds_sum", 0) - a.get("notify_write_seconds_sum", 0)
        msgs = b.get("notify_messages_total", 0) - a.get("notify_messages_total", 0)
        ack = [d for (t, d) in acks if lo <= t < hi]
        windows[name] = {
            "ack_p50": _pct(ack, 0.5), "ack_p99": _pct(ack, 0.99),
            "writes": writes, "messages": msgs,
            "per_write": round(msgs / writes, 2) if writes else None,
            "write_mean_s": round(secs / writes, 4) if writes else None,
            "write_busy": round(secs / (hi - lo), 3),
            "sample_offsets_s": [round(a["_off"], 2), round(b["_off"], 2)]}
    return {"out": str(out), "leader": leader, "owner": owner, "edges": edges,
            "nats_conns": where, "hops_touching_leader": hops, "windows": windows}


def main() -> None:
    import sys
    if sys.argv[1:2] == ["--report"]:
        for o in sys.argv[2:]:
            print(json.dumps(report(Path(o).resolve()), indent=1))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--for", dest="limit", type=float, default=300.0)
    a = ap.parse_args()
    out = a.out.resolve()
    dest = out.parent / f"{out.name}-watch.jsonl"
    end = time.time() + a.limit
    seen = False
    with dest.open("w") as f:
        while time.time() < end:
            nodes = _nodes(out)
            if nodes:
                seen = True
                f.write(json.dumps(sample(out)) + "\n")
                f.flush()
            elif seen:
                break
            time.sleep(a.every)


if __name__ == "__main__":
    main()
