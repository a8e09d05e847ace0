"""Route proxies: the NATS cluster's server-to-server traffic through `LinkProxy`s.

`RouteMesh` puts one proxy on every directed server pair (i, j): server i's `routes` list holds
only its proxies to the others, each forwarding to j's real cluster port. Whichever side
solicits a route connection, it crosses exactly one proxy, and that proxy's name says which
pair it joins, so a fault on "the links touching server L" is a fault on every proxy with L at
either end (`delay_touching`).

nats-server also learns routes by gossip (a server it already knows tells it about a new
peer's advertised address) and would then connect to the real port, bypassing the proxies. The
mesh tells every server to advertise a cluster address that refuses connections (a port
reserved and closed): an implicit route to it fails, the explicit routes through the proxies
carry the cluster. `verify()` checks that from the servers' own `/routez`: the peer address of
every route is either one of the server's own proxies (a route it dialled) or the upstream
socket of a proxy into it (a route it accepted); and that the proxies moved bytes. A
measurement is trusted only with `verify()` ok.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

from notify_chaos.proxy import LinkProxy

#: bytes a route proxy may hold per direction (a client link's 256 KiB would cap a delayed
#: route at 256 KiB per 10 ms)
ROUTE_QUEUE = 8 << 20


class RouteMesh:
    """The runner's handle on the route proxies' process."""

    def __init__(self) -> None:
        #: (i, j) -> the port of the proxy server i uses to reach server j (0-based indices)
        self.ports: dict[tuple[int, int], int] = {}
        self.cluster: Any = None
        self.dead_port = 0
        #: the servers' real cluster ports (what the proxies forward to)
        self.cluster_ports: list[int] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    async def start_proxies(self, cluster_ports: list[int]) -> None:
        self.cluster_ports = list(cluster_ports)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "notify_chaos.routes", *map(str, cluster_ports)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        first = await asyncio.to_thread(self._readline)
        self.ports = {(int(k.split(",")[0]), int(k.split(",")[1])): v
                      for k, v in first["ports"].items()}

    def _readline(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the route proxies' process exited")
        out: dict[str, Any] = json.loads(line)
        return out

    def _ask(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write(json.dumps(cmd).encode() + b"\n")
            self.proc.stdin.flush()
            return self._readline()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def plan(self, root: Path, binary: Path, size: int, **kw: Any) -> Any:
        """`natsrun.plan` with the proxies' ports in each server's `routes` (call
        `start_proxies` with `cluster_ports` first)."""
        from notify_chaos.natsrun import config_text, free_ports, plan

        cluster = plan(root, binary=binary, size=size, **kw)
        self.dead_port = free_ports(1)[0]  # reserved then closed: nobody listens there
        for i, node in enumerate(cluster.nodes):
            assert node.store is not None
            routes = [self.ports[(i, j)] for j in range(size) if j != i]
            text = config_text(node, node.store, routes, **{
                k: v for k, v in kw.items()
                if k in ("cluster_name", "max_file_store", "max_memory_store")})
            text = re.sub(r"cluster \{ ", "cluster { no_advertise: true, "
                          f"advertise: \"127.0.0.1:{self.dead_port}\", ", text)
            node.config.write_text(text)
        self.cluster = cluster
        return cluster

    def touching(self, i: int) -> list[str]:
        return [f"nats-{a + 1}->nats-{b + 1}" for (a, b) in self.ports if i in (a, b)]

    def delay_touching(self, i: int, ms: float, jitter_ms: float = 0.0, *,
                       from_only: bool = False) -> None:
        """Delay every link with server `i` at either end, both directions; with `from_only`,
        only the bytes server `i` sends (i -> each peer: seed 004's "leader to replicas")."""
        self._ask(cmd="delay", server=i, ms=ms, jitter_ms=jitter_ms, from_only=from_only)

    def counters(self) -> dict[str, dict[str, Any]]:
        return self._ask(cmd="stats")["stats"]  # type: ignore[no-any-return]

    def routez(self, i: int) -> list[dict[str, Any]]:
        node = self.cluster.nodes[i]
        with urllib.request.urlopen(f"{node.monitor}/routez", timeout=2) as r:
            routes: list[dict[str, Any]] = json.loads(r.read()).get("routes") or []
            return routes

    def verify(self) -> dict[str, Any]:
        """Whether every route of every running server goes through a proxy (see the module
        docstring), with the routes that do not and the bytes the proxies moved."""
        stats = self.counters()
        n = len(self.cluster.nodes)
        bypass: list[str] = []
        count = 0
        for i, node in enumerate(self.cluster.nodes):
            if node.proc is None or node.proc.poll() is not None:
                continue
            mine = {self.ports[(i, j)] for j in range(n) if j != i}
            theirs = {p for k in range(n) if k != i
                      for p in stats[f"nats-{k + 1}->nats-{i + 1}"]["upstream_local_ports"]}
            for r in self.routez(i):
                count += 1
                port = int(r.get("port") or 0)
                # (`did_solicit` is not reliable here: nats-server also sets it on an accepted
                # route whose peer is one of its configured routes)
                if port not in mine | theirs:
                    bypass.append(f"{node.name} {'->' if r.get('did_solicit') else '<-'} "
                                  f"{r.get('remote_name') or r.get('remote_id')} "
                                  f"{r.get('ip')}:{port}")
        moved = sum(x["bytes"] for x in stats.values())
        return {"ok": not bypass and count > 0 and moved > 0, "routes": count,
                "bypass": bypass, "proxy_bytes": moved}

    def bytes(self) -> int:
        return sum(x["bytes"] for x in self.counters().values())

    async def close(self) -> None:
        p = self.proc
        if p is None:
            return
        try:
            if p.poll() is None and p.stdin is not None:
                p.stdin.close()  # end of commands: it closes its proxies and exits
                await asyncio.to_thread(p.wait, 5)
        except (OSError, subprocess.TimeoutExpired):
            p.kill()
            await asyncio.to_thread(p.wait, 5)
        finally:
            for f in (p.stdin, p.stdout):
                if f is not None:
                    f.close()


async def _serve(cluster_ports: list[int]) -> None:
    """The proxies' process: one `LinkProxy` per directed pair; commands on stdin."""
    n = len(cluster_ports)
    proxies: dict[tuple[int, int], LinkProxy] = {}
    for i in range(n):
        for j in range(n):
            if i != j:
                proxies[(i, j)] = await LinkProxy(
                    cluster_ports[j], name=f"nats-{i + 1}->nats-{j + 1}",
                    max_queued_bytes=ROUTE_QUEUE, sock_buf=None).start()

    def say(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    say({"ports": {f"{i},{j}": p.port for (i, j), p in proxies.items()}, "pid": os.getpid()})
    loop = asyncio.get_running_loop()
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            cmd = json.loads(line)
            if cmd["cmd"] == "delay":
                for (a, b), p in proxies.items():
                    if cmd["server"] in (a, b):
                        # proxy (a, b) is dialled by a: its `up` bytes are a's, `down` b's
                        only = cmd.get("from_only", False)
                        p.delay(cmd["ms"], cmd.get("jitter_ms", 0),
                                up=not only or a == cmd["server"],
                                down=not only or b == cmd["server"])
                say({"ok": True})
            elif cmd["cmd"] == "stats":
                say({"stats": {p.name: {"accepted": p.counters.accepted,
                                        "bytes": p.counters.bytes, "chunks": p.counters.chunks,
                                        "delay_ms": p.faults.delay_s * 1000,
                                        "delay_up": p.faults.delay_up,
                                        "delay_down": p.faults.delay_down,
                                        "upstream_local_ports": sorted(p.upstream_local_ports)}
                               for p in proxies.values()}})
            else:
                say({"error": f"unknown command {cmd['cmd']!r}"})
    finally:
        for p in proxies.values():
            await p.close()


if __name__ == "__main__":
    asyncio.run(_serve([int(x) for x in sys.argv[1:]]))
