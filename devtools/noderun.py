"""`notify serve` as a child process, for the cluster tests, `./dev bench cluster` and anything
else that must crash a node for real (SIGKILL) or pause it (SIGSTOP).

`notify_chaos/natsrun.py` does the same for `nats-server`. A node's output goes to a log file
(read back by `tail` when something fails); `/readyz` says when it has joined its cluster, and
`/cluster` what it holds.
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from notify.cluster.shards import SHARDS


@dataclass
class NotifyProcess:
    """One `notify serve` process: a single node, or a cluster node when `nats` is given."""

    name: str
    port: int
    dir: Path
    nats: list[str] | None = None
    extra: list[str] = field(default_factory=list)
    log_level: str = "info"
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.dir / f"{self.name}.log"

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "notify.cli", "serve", "--port", str(self.port),
               "--data-dir", str(self.dir / self.name), "--log-level", self.log_level]
        if self.nats is not None:
            cmd += ["--cluster", ",".join(self.nats), "--node-id", self.name]
        cmd += self.extra
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, env=self.env)

    def http(self, path: str) -> tuple[int, bytes]:
        """(status, body) of a GET on the node's port; (0, b"") if it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=1) as r:
                return int(r.status), bytes(r.read())
        except urllib.error.HTTPError as e:
            return int(e.code), bytes(e.read())
        except OSError:
            return 0, b""

    def ready(self) -> bool:
        return self.http("/readyz")[0] == 200

    def view(self) -> dict[str, Any]:
        """`/cluster`: the node's view of who owns what ({} if it does not answer)."""
        status, body = self.http("/cluster")
        data = json.loads(body) if status == 200 else {}
        return data if isinstance(data, dict) else {}

    def held(self) -> list[int]:
        return list(self.view().get("held", []))

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL (a crash), and reap it."""
        assert self.proc is not None
        self.signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM (graceful: a cluster node hands its shards over), SIGKILL after `grace`.
        A paused node is woken first, or it could not hear the SIGTERM."""
        p = self.proc
        if p is None or p.poll() is not None:
            return
        try:
            os.kill(p.pid, signal.SIGCONT)
            p.terminate()
        except ProcessLookupError:
            pass
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n: int = 20000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def wait_ready(nodes: Sequence[NotifyProcess], *, cluster: bool = True,
               timeout: float = 60.0) -> None:
    """Until every node answers `/readyz`, and (cluster) every shard is held by exactly one of
    them and they all agree on every shard's owner. Raises with the logs of a node that died."""
    deadline = time.monotonic() + timeout
    while True:
        for n in nodes:
            if not n.alive():
                raise RuntimeError(f"{n.name} exited:\n{n.tail(3000)}")
        if all(n.ready() for n in nodes):
            if not cluster:
                return
            views = [n.view() for n in nodes]
            held = [s for v in views for s in v.get("held", [])]
            owners = [v.get("owners") for v in views]
            if len(held) == SHARDS == len(set(held)) and all(o == owners[0] for o in owners) \
                    and len(owners[0] or {}) == SHARDS:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"nodes not ready after {timeout:.0f} s: " + "; ".join(
                f"{n.name} ready={n.ready()} held={len(n.held())}" for n in nodes))
        time.sleep(0.1)
