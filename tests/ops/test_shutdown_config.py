"""Graceful shutdown (4003, log flushed) and configuration precedence (docs/operations.md)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from notify.config import Settings
from notify.core import CoreConfig, Timeouts
from notify.core.errors import CloseCode
from notify.server.app import NotifyServer
from notify.storage.sqlite import SqliteLog
from tests.integration.conftest import TIMEOUT, Raw
from tests.security.conftest import token

SECRET = "ops-secret-0123456789-0123456789-0123456789"


async def test_stop_closes_clients_with_4003_and_keeps_what_was_published(
        tmp_path: Path) -> None:
    db = tmp_path / "notify.db"
    srv = NotifyServer(CoreConfig(Timeouts(suspect_timeout=0.4)), port=0, store=SqliteLog(db))
    await srv.start()
    alice = await Raw.open(srv.url, "alice")
    bob = await Raw.open(srv.url, "bob")
    await alice.join("g")
    alice.auto_flush = True
    await asyncio.gather(bob.join("g"), alice.expect("view_install"))
    for i in range(5):
        await alice.send({"type": "publish", "req": f"p{i}", "group": "g", "id": f"p{i}",
                          "view": 2, "payload": i})
        await alice.expect("published")
    codes = asyncio.gather(alice.close_code(), bob.close_code())
    await asyncio.wait_for(srv.stop(), TIMEOUT)
    assert await codes == [CloseCode.SHUTDOWN, CloseCode.SHUTDOWN]
    assert srv.stats.closes.get(int(CloseCode.SHUTDOWN)) == 2

    again = NotifyServer(CoreConfig(), port=0, store=SqliteLog(db))
    async with again:
        assert again.hub.groups["g"].topic.head == 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
           ) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "notify.cli", "serve", "--port", str(port), "--store", "memory",
         "--data-dir", str(tmp_path), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("NOTIFY_")},
             **(env or {})})
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.communicate()[0].decode()
            raise AssertionError(f"server exited {proc.returncode}: {out}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return proc, port
        time.sleep(0.05)
    proc.kill()
    proc.communicate()
    raise AssertionError("server did not start listening")


async def test_sigterm_tells_clients_4003_and_config_precedence_is_flags_env_toml(
        tmp_path: Path) -> None:
    toml = tmp_path / "notify.toml"
    toml.write_text("[limits]\npublish_rate = 123\npublish_burst = 11\nmax_pending_atomic = 9\n"
                    "[timeouts]\nsuspect_timeout = 2.5\n")
    proc, port = _serve(tmp_path, "--config", str(toml), "--publish-burst", "55",
                        env={"NOTIFY_AUTH__HS256_SECRET": SECRET,
                             "NOTIFY_LIMITS__PUBLISH_BURST": "77",
                             "NOTIFY_LIMITS__MAX_PENDING_ATOMIC": "8"})
    try:
        raw = await Raw.open(f"ws://127.0.0.1:{port}")
        await raw.send({"type": "hello", "protocol": 1, "token": token("alice", key=SECRET)})
        welcome = await raw.expect("welcome")
        lim = welcome["limits"]
        # TOML alone / env over TOML / flag over env over TOML
        assert (lim["publish_rate"], lim["max_pending_atomic"], lim["publish_burst"]) == \
            (123, 8, 55)
        assert lim["suspect_timeout_ms"] == 2500
        proc.send_signal(signal.SIGTERM)
        assert await raw.close_code() == CloseCode.SHUTDOWN
        assert await asyncio.to_thread(proc.wait, TIMEOUT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    out = proc.communicate(timeout=TIMEOUT)[0].decode()
    assert "config" in out and "**********" in out
    assert SECRET not in out  # printed masked
    assert "insecure_development_mode" not in out and "kind=hs256" in out
    assert "stopped" in out


async def test_no_key_means_development_mode_and_it_says_so(tmp_path: Path) -> None:
    proc, port = _serve(tmp_path)
    try:
        raw = await Raw.open(f"ws://127.0.0.1:{port}", "anyone")  # no token needed
        assert raw.member == "anyone"
        await raw.close()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, TIMEOUT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    out = proc.communicate(timeout=TIMEOUT)[0].decode()
    assert "insecure_development_mode" in out


def test_settings_validation(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for k in list(os.environ):
        if k.startswith("NOTIFY_"):
            monkeypatch.delenv(k)
    s = Settings.load()
    assert not s.auth.enabled and s.server.port == 8765
    assert s.core().limits.publish_rate == 20_000
    with pytest.raises(ValueError, match="one of"):
        Settings.load(cli={"auth": {"hs256_secret": SECRET, "jwks_file": "x.json"}})
    with pytest.raises(ValueError, match="no key"):
        Settings.load(cli={"auth": {"required": True}})
    with pytest.raises(ValueError, match="go together"):
        Settings.load(cli={"server": {"tls_cert": "c.pem"}})
    bad = tmp_path / "bad.toml"
    bad.write_text("[limits]\nno_such_limit = 1\n")
    with pytest.raises(ValueError, match="no_such_limit"):
        Settings.load(config_file=bad)


def test_cluster_settings_imply_the_jetstream_log_and_refuse_what_does_not_fit() -> None:
    s = Settings.load(config_file=None,
                      cli={"server": {"cluster": ["nats://h1:4222", "nats://h2:4222"],
                                      "node_id": "n1"}})
    assert (s.server.store, s.server.nats) == ("jetstream", ["nats://h1:4222", "nats://h2:4222"])
    bad = [{"cluster": ["nats://h1:4222"]},  # no node id
           {"node_id": "n1"},  # a node id without a cluster
           {"cluster": ["nats://h1:4222"], "node_id": "n.1"},  # not one subject token
           {"cluster": ["nats://h1:4222"], "node_id": "n1", "store": "memory"}]
    for server in bad:
        with pytest.raises(ValueError):
            Settings.load(config_file=None, cli={"server": server})


async def test_retention_by_group_pattern_from_the_config_file(tmp_path: Path) -> None:
    """Issue 30: `[[retention]]` rules by group pattern, first match wins, defaults from
    `[limits]`/`[server]`; the core applies the count, the SQLite log all three at prune."""
    import asyncio

    from notify.core.actions import Append, Message, StoreView, ViewInstall
    from notify.storage.sqlite import SqliteLog

    toml = tmp_path / "notify.toml"
    toml.write_text('[limits]\nretain_messages = 50\n\n[[retention]]\ngroups = "chat:*"\n'
                    'messages = 5\n\n[[retention]]\ngroups = "cursor:*"\nage = 1.0\n'
                    'bytes = 100\n')
    core = Settings.load(config_file=toml).core()
    assert (core.retention_for("chat:1").messages, core.retention_for("chat:1").age) == (5, None)
    cursor = core.retention_for("cursor:x")
    assert (cursor.messages, cursor.bytes, cursor.age) == (50, 100, 1.0)
    assert core.retention_for("doc").messages == 50 and core.retention_for("doc").groups == "*"
    bad = tmp_path / "bad.toml"
    bad.write_text('[[retention]]\ngroups = "x"\nmessages = 0\n')
    with pytest.raises(ValueError):
        Settings.load(config_file=bad)

    log = SqliteLog(tmp_path / "log.db", retention=core.retention_for)
    done: list[str | None] = []
    for g in ("chat:1", "doc"):
        for i in range(1, 21):
            log.write(Append(g, i, (Message(g, i, "fifo:a", i, "a", 1, False, i, 100.0 + i,
                                            f"p{i}"),)), done.append)
        log.write(StoreView(99, ViewInstall(g, 1, ("a",), ("a",), (), 7, 0)), done.append)
    while len(done) < 42:
        await asyncio.sleep(0.01)
    log.prune(now=200.0)
    assert log.read_page("chat:1", 0, 100, 1 << 20).first == 16  # keeps 5
    assert log.read_page("doc", 0, 100, 1 << 20).first == 1  # 50: keeps all 20
    await log.close()
