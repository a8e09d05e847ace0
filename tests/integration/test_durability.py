"""G10 and G1 across a crash: a real `notify serve` process on the SQLite log, killed with SIGKILL
in the middle of a publish stream, then restarted on the same data directory."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_sdk import CaughtUp, Connection, Message, ViewInstalled, ViewResumed
from tests.integration.conftest import TIMEOUT, events_until, pending_events


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """`notify serve` as its own process, so that SIGKILL is a real crash."""

    def __init__(self, data_dir: Path, port: int, *extra: str) -> None:
        self.data_dir, self.port, self.extra = data_dir, port, list(extra)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "notify.cli", "serve", "--port", str(self.port),
             "--data-dir", str(self.data_dir), "--suspect-timeout", "0.5",
             "--log-level", "warning", *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise AssertionError(f"server exited {self.proc.returncode}: {err}")
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.2):
                return
            time.sleep(0.05)
        raise AssertionError("server did not start listening")

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(TIMEOUT)
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(TIMEOUT)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@pytest.fixture
def server_process(tmp_path: Path) -> Iterator[ServerProcess]:
    sp = ServerProcess(tmp_path / "data", _free_port())
    try:
        yield sp
    finally:
        sp.stop()


async def test_G10_G1_sigkill_mid_stream_loses_no_published_message(
        server_process: ServerProcess) -> None:
    server_process.start()
    a = await Connection.connect(server_process.url, "a")
    b = await Connection.connect(server_process.url, "b")
    try:
        await a.join("g")
        assert (await b.join("g")).view == 2
        published: dict[str, int] = {}

        async def pump() -> None:
            for i in range(100_000):
                r = await a.publish("g", {"i": i}, publish_id=f"p{i}", atomic=i % 10 == 0)
                published[r.id] = r.offset

        task = asyncio.get_running_loop().create_task(pump())
        deadline = time.monotonic() + TIMEOUT
        while len(published) < 300 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(published) >= 300 and not task.done()
        server_process.kill()  # in the middle of the stream
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await a.drop()
        await b.drop()
        before = [e for e in pending_events(b, "g") if isinstance(e, Message)]

        server_process.start()  # same data directory
        # Back within the recovery window: b resumes its place in view 2 with its resume point,
        # like after any lost connection (no view change), and gets exactly what it lacks.
        await b.reconnect()
        evs = await events_until(b, "g", lambda e: isinstance(e, CaughtUp))
        assert [e for e in evs if isinstance(e, ViewInstalled)] == []
        assert any(isinstance(e, ViewResumed) and e.view == 2 for e in evs)
        seen = before + [e for e in evs if isinstance(e, Message)]
        offsets = [m.offset for m in seen]
        assert len(offsets) == len(set(offsets)), "a message was delivered twice"
        assert b.protocol.groups["g"].duplicates == 0
        by_i = {m.payload["i"]: m.offset for m in seen}
        for pid, offset in published.items():  # G10: every `published` is there, same offset
            assert by_i.get(int(pid[1:])) == offset, pid
        assert sorted(offsets) == list(range(1, max(offsets) + 1))  # nothing else is missing

        # The log goes on above the old head, and an id published before the crash, retried
        # after it, is answered with its first offset and not delivered again.
        head = max(offsets)
        await a.reconnect()
        await events_until(a, "g", lambda e: isinstance(e, CaughtUp))
        retried = await a.publish("g", {"i": 0}, publish_id="p0")
        assert retried.offset == published["p0"]
        fresh = await b.publish("g", "after restart")
        assert fresh.offset == head + 1
        evs = await events_until(b, "g", lambda e: isinstance(e, Message) and e.offset == head + 1)
        assert [e.offset for e in evs if isinstance(e, Message)] == [head + 1]
        await b.leave("g")  # G1: the next view is the stored version + 1
        evs = await events_until(a, "g", lambda e: isinstance(e, ViewInstalled))
        assert (evs[-1].view, evs[-1].members) == (3, ("a",))
    finally:
        for c in (a, b):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(c.close(), TIMEOUT)


async def test_G7_after_a_crash_members_back_within_the_recovery_window_resume_others_go(
        tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", _free_port(), "--recovery-window", "1.5")
    server.start()
    clients = [await Connection.connect(server.url, m) for m in "abc"]
    a, b, _c = clients
    try:
        for x in clients:
            await x.join("g")
        await events_until(a, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 3)
        await a.publish("g", "before")
        for x in clients:
            await events_until(x, "g", lambda e: isinstance(e, Message))
        server.kill()
        for x in clients:
            await x.drop()
        server.start()
        started = time.monotonic()
        for x in (a, b):  # c never comes back
            await x.reconnect()
            evs = await events_until(x, "g", lambda e: isinstance(e, CaughtUp))
            assert [e for e in evs if isinstance(e, ViewInstalled)] == []
            assert any(isinstance(e, ViewResumed) and e.view == 3 for e in evs)
        await a.publish("g", "resumed")
        evs = await events_until(b, "g", lambda e: isinstance(e, Message))
        assert [e.payload for e in evs if isinstance(e, Message)] == ["resumed"]
        evs = await events_until(b, "g", lambda e: isinstance(e, ViewInstalled))
        assert time.monotonic() - started >= 1.0  # not before the window closed
        assert (evs[-1].view, evs[-1].members, evs[-1].left) == (4, ("a", "b"), ("c",))
    finally:
        for x in clients:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(x.close(), TIMEOUT)
        server.stop()
