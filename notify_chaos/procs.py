"""The processes a run starts: `notify serve` nodes and chaos clients. Each is its own process
group (`start_new_session`), so a Ctrl-C on the terminal reaches only the runner, which then
stops every one of them by PID. Every wait is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen[bytes], grace: float) -> int | None:
    """SIGTERM, then SIGKILL after `grace` seconds; SIGCONT first in case it is paused."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
    return proc.returncode


class Node:
    """One `notify serve` on a fixed port (kept across restarts, so links keep pointing at it)."""

    def __init__(self, name: str, root: Path, store: str, server_args: list[str], *,
                 cluster: list[str] | None = None, lease_ttl: float = 2.0) -> None:
        self.name, self.store, self.server_args = name, store, list(server_args)
        #: cluster mode: the NATS URLs (`notify serve --cluster`); the node id is the name
        self.cluster, self.lease_ttl = cluster, lease_ttl
        self.port = free_port()
        self.data_dir = root / name
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.event_dir = root.parent / "logs" / name
        self.proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None
        self.starts = 0
        self.pids: list[int] = []
        self.paused = False
        #: (time, returncode) of exits nobody asked for (fail-stop, crash)
        self.unexpected_exits: list[tuple[float, int]] = []
        self.expect_down = False

    @property
    def db(self) -> Path:
        return self.data_dir / "notify.db"

    def start(self) -> None:
        self._out = open(self.data_dir / f"server-{self.starts}.out", "wb")  # noqa: SIM115
        mode = (["--cluster", ",".join(self.cluster), "--node-id", self.name,
                 "--lease-ttl", str(self.lease_ttl)] if self.cluster
                else ["--store", self.store])
        cmd = [sys.executable, "-m", "notify.cli", "serve", "--port", str(self.port),
               "--data-dir", str(self.data_dir), *mode,
               "--event-log", str(self.event_dir), "--log-level", "info", *self.server_args]
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.starts += 1
        self.pids.append(self.proc.pid)
        self.expect_down = False

    async def ready(self, timeout: float = 20.0) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} at start; "
                                   f"see {self.data_dir}/server-{self.starts - 1}.out")
            if self.cluster:  # joined the cluster: /readyz
                if (await asyncio.to_thread(self.http, "/readyz"))[0] == 200:
                    return
            else:
                with contextlib.suppress(OSError):
                    _, w = await asyncio.open_connection("127.0.0.1", self.port)
                    w.close()
                    return
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{self.name} did not listen within {timeout:g} s")

    def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        assert self.proc is not None
        self.expect_down = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10 if sig == signal.SIGTERM else 5)
        if self.proc.poll() is None:  # TERM not obeyed in time
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        self._close_out()

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def http(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=1) as r:
                return int(r.status), bytes(r.read())
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError:
            return 0, b""

    def view(self) -> dict[str, Any]:
        """Cluster mode: this node's `/cluster` (`held` shards, `owners`), {} if no answer."""
        if not self.running() or self.paused:
            return {}
        status, body = self.http("/cluster")
        with contextlib.suppress(ValueError):
            if status == 200:
                v = json.loads(body)
                return v if isinstance(v, dict) else {}
        return {}

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 10)
        self._close_out()

    def _close_out(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None

    # -- storage fault switch (a disk that fills) -------------------------------------------------

    def disk_full(self, on: bool) -> None:
        """A storage fault switch on the node's SQLite log: while on, every message insert fails
        as on a full disk (the server answers `rejected{storage_failed}`); view installs are left
        alone (a failed one would stop the server, G13: `system.restart_on_exit` covers that)."""
        if self.store != "sqlite":
            raise RuntimeError("disk_full needs store: sqlite")
        db = sqlite3.connect(self.db, timeout=10)
        try:
            if on:
                db.execute("CREATE TRIGGER IF NOT EXISTS chaos_disk_full BEFORE INSERT ON "
                           "messages BEGIN SELECT RAISE(ABORT, 'chaos: disk full'); END")
            else:
                db.execute("DROP TRIGGER IF EXISTS chaos_disk_full")
            db.commit()
        finally:
            db.close()


class ClientProc:
    """A chaos client (`python -m notify_chaos.client CONFIG`)."""

    def __init__(self, name: str, config: Path, out: Path) -> None:
        self.name, self.config = name, config
        self._out = open(out, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "notify_chaos.client", str(config)],
            stdout=subprocess.PIPE, stderr=self._out, start_new_session=True)
        self.paused = False
        self.killed = False

    async def ready(self, timeout: float = 30.0) -> None:
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        async with asyncio.timeout(timeout):
            line = await asyncio.to_thread(stdout.readline)
        if line.strip() != b"ready":
            await asyncio.to_thread(self.proc.wait, 5)
            raise RuntimeError(f"{self.name} did not get ready (exit {self.proc.returncode}); "
                               f"see {self._out.name}")

    async def line(self, expect: bytes, timeout: float) -> bool:
        """Wait for this line on the client's stdout (`ready`, `published`)."""
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        try:
            async with asyncio.timeout(timeout):
                got = await asyncio.to_thread(stdout.readline)
        except TimeoutError:
            return False
        return bool(got.strip() == expect)

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def kill(self) -> None:
        self.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)

    async def wait(self, timeout: float) -> int | None:
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.to_thread(self.proc.wait)
        except TimeoutError:
            return None

    def stop(self) -> None:
        stop_process(self.proc, 5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._out.close()
