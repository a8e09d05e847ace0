"""Notify cluster nodes as real processes for the cluster tests: `notify serve --cluster ...`.

Each node is its own process so that SIGKILL is a crash and SIGSTOP a pause (a GC, a VM
migration), with its log in the test's tmp dir (shown when a test fails). `/readyz` says when
a node has joined; `/cluster` says who owns which shard, as that node sees it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from notify.cluster.natsrun import free_ports
from notify.cluster.shards import shard_of

#: lease TTL of the test clusters: failover takes about this long
LEASE_TTL = 2.0


@dataclass
class NotifyNode:
    name: str
    port: int
    nats: list[str]
    dir: Path
    extra: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.dir / f"{self.name}.log"

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "notify.cli", "serve", "--port", str(self.port),
             "--data-dir", str(self.dir / self.name), "--cluster", ",".join(self.nats),
             "--node-id", self.name, "--lease-ttl", str(LEASE_TTL),
             "--suspect-timeout", "8", "--log-level", "info", *self.extra],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()

    def http(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=1) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError:
            return 0, b""

    def ready(self) -> bool:
        return self.http("/readyz")[0] == 200

    def view(self) -> dict[str, Any]:
        status, body = self.http("/cluster")
        return json.loads(body) if status == 200 else {}

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        assert self.proc is not None
        self.signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, grace: float = 10.0) -> None:
        p = self.proc
        if p is None or p.poll() is not None:
            return
        with_cont = True
        try:
            os.kill(p.pid, signal.SIGCONT)  # a paused node must be able to hear SIGTERM
        except ProcessLookupError:
            with_cont = False
        if with_cont:
            p.terminate()
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n: int = 20000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


@dataclass
class NotifyCluster:
    nodes: list[NotifyNode]

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def wait_ready(self, nodes: list[NotifyNode] | None = None, timeout: float = 40.0) -> None:
        """Until every node is ready and they agree on one owner for every shard."""
        nodes = nodes if nodes is not None else self.nodes
        deadline = time.monotonic() + timeout
        while True:
            for n in nodes:
                if not n.alive():
                    raise AssertionError(f"{n.name} exited:\n{n.tail()}")
            views = [n.view() for n in nodes] if all(n.ready() for n in nodes) else []
            if views and all(len(v.get("owners", {})) == 256 for v in views):
                held = [s for v in views for s in v["held"]]
                owners = [v["owners"] for v in views]
                if len(held) == 256 == len(set(held)) and all(o == owners[0] for o in owners):
                    return
            if time.monotonic() > deadline:
                raise AssertionError("the cluster did not settle: " + "; ".join(
                    f"{n.name} ready={n.ready()} held={len(n.view().get('held', []))}"
                    for n in nodes))
            time.sleep(0.1)

    def owner_of(self, group: str, among: list[NotifyNode] | None = None) -> NotifyNode:
        """The node that holds `group`'s shard (as the nodes asked say, all agreeing)."""
        shard = shard_of(group)
        for n in among if among is not None else self.nodes:
            if n.alive() and shard in n.view().get("held", []):
                return n
        raise AssertionError(f"nobody holds shard {shard}")

    def wait_owner(self, group: str, among: list[NotifyNode], timeout: float = 30.0,
                   ) -> NotifyNode:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.owner_of(group, among)
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def logs(self) -> str:
        return "\n".join(f"--- {n.name}\n{n.tail()}" for n in self.nodes)

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


def make_cluster(nats: list[str], tmp: Path, n: int = 3) -> NotifyCluster:
    ports = free_ports(n)
    return NotifyCluster([NotifyNode(f"n{i + 1}", ports[i], nats, tmp)
                          for i in range(n)])
