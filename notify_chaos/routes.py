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
socket of a proxy into it (a route it accepted); and that the proxies moved bytes. A measurement is trusted only with `verify()` ok.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

from notify_chaos.proxy import LinkProxy

#: bytes a route proxy may hold per direction (a client link's 256 KiB would cap a delayed
#: route at 256 KiB per 10 ms)
ROUTE_QUEUE = 8 << 20


class RouteMesh:
    def __init__(self) -> None:
        #: (i, j) -> the proxy server i uses to reach server j (0-based indices)
        self.proxies: dict[tuple[int, int], LinkProxy] = {}
        self.cluster: Any = None
        self.dead_port = 0

    async def start_proxies(self, cluster_ports: list[int]) -> None:
        n = len(cluster_ports)
        for i in range(n):
            for j in range(n):
                if i != j:
                    self.proxies[(i, j)] = await LinkProxy(
                        cluster_ports[j], name=f"nats-{i + 1}->nats-{j + 1}",
                        max_queued_bytes=ROUTE_QUEUE, sock_buf=None).start()

    def plan(self, root: Path, binary: Path, size: int, **kw: Any) -> Any:
        """`natsrun.plan` with the proxies' ports in each server's `routes` (call
        `start_proxies` with `cluster_ports` first)."""
        from notify.cluster.natsrun import config_text, free_ports, plan

        cluster = plan(root, binary=binary, size=size, **kw)
        self.dead_port = free_ports(1)[0]  # reserved then closed: nobody listens there
        for i, node in enumerate(cluster.nodes):
            assert node.store is not None
            routes = [self.proxies[(i, j)].port for j in range(size) if j != i]
            text = config_text(node, node.store, routes, **{
                k: v for k, v in kw.items()
                if k in ("cluster_name", "max_file_store", "max_memory_store")})
            text = re.sub(r"cluster \{ ", "cluster { no_advertise: true, "
                          f"advertise: \"127.0.0.1:{self.dead_port}\", ", text)
            node.config.write_text(text)
        self.cluster = cluster
        return cluster

    def touching(self, i: int) -> list[LinkProxy]:
        return [p for (a, b), p in self.proxies.items() if i in (a, b)]

    def delay_touching(self, i: int, ms: float, jitter_ms: float = 0.0) -> None:
        for p in self.touching(i):
            p.delay(ms, jitter_ms)

    def routez(self, i: int) -> list[dict[str, Any]]:
        node = self.cluster.nodes[i]
        with urllib.request.urlopen(f"{node.monitor}/routez", timeout=2) as r:
            routes: list[dict[str, Any]] = json.loads(r.read()).get("routes") or []
            return routes

    def verify(self) -> dict[str, Any]:
        """Whether every route of every running server goes through a proxy (see the module
        docstring), with the routes that do not and the bytes the proxies moved."""
        bypass: list[str] = []
        count = 0
        for i, node in enumerate(self.cluster.nodes):
            if node.proc is None or node.proc.poll() is not None:
                continue
            mine = {self.proxies[(i, j)].port for j in range(len(self.cluster.nodes)) if j != i}
            theirs = set().union(*(self.proxies[(k, i)].upstream_local_ports
                                   for k in range(len(self.cluster.nodes)) if k != i))
            for r in self.routez(i):
                count += 1
                port = int(r.get("port") or 0)
                # (`did_solicit` is not reliable here: nats-server also sets it on an accepted
                # route whose peer is one of its configured routes)
                if port not in mine | theirs:
                    bypass.append(f"{node.name} {'->' if r.get('did_solicit') else '<-'} "
                                  f"{r.get('remote_name') or r.get('remote_id')} "
                                  f"{r.get('ip')}:{port}")
        moved = sum(p.counters.bytes for p in self.proxies.values())
        return {"ok": not bypass and count > 0 and moved > 0, "routes": count,
                "bypass": bypass, "proxy_bytes": moved}

    def counters(self) -> dict[str, dict[str, int]]:
        return {p.name: {"accepted": p.counters.accepted, "bytes": p.counters.bytes,
                         "chunks": p.counters.chunks} for p in self.proxies.values()}

    async def close(self) -> None:
        for p in self.proxies.values():
            await p.close()
