"""`notify probe` against a real `notify serve`: its SLIs count good events on a healthy
server; a stopped (SIGSTOP) or killed-and-restarted server moves the bad counts, which then stop
moving once it is back; the deliberate reconnect resumes with no view change (good), and one
that cannot resume (suspect_timeout 0) is counted bad. Every wait is bounded; the servers are
stopped at teardown and the prober's tasks are cancelled and awaited."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from notify.probe import SLIS, Prober, TargetProbe
from notify_chaos.natsrun import free_ports
from tests.probe.conftest import SECRET, TIMEOUT, Served, prober, running, until


def counts(p: Prober, target: str) -> dict[str, tuple[float, float]]:
    """SLI -> (good, total)."""
    m = p.metrics
    return {sli: (m.count(sli, target, good=True), m.count(sli, target)) for sli in SLIS}


def bad(p: Prober, target: str, sli: str) -> float:
    good, total = counts(p, target)[sli]
    return total - good


def probe_of(p: Prober, target: str) -> TargetProbe:
    return p.probes[target]


def connected(p: Prober, target: str) -> bool:
    """The target's probe has a session with both clients connected."""
    probe = p.probes.get(target)
    return probe is not None and probe.session is not None and probe.session.connected


async def test_a_healthy_server_counts_only_good_events(server: Served) -> None:
    p = prober(server.ws, reconnect_every=0.7, view_change_every=1.1, api_url=server.api,
               api_key=SECRET, api_rate=5.0)
    m, t = p.metrics, server.ws
    async with running(p):
        await until("every SLI counted good events", lambda: all(
            (m.count(sli, t, good=True) >= 3) for sli in SLIS), timeout=25,
            state=lambda: counts(p, t))
        await until("API deliveries", lambda: m.count("delivery", t, good=True, path="api") >= 3,
                    timeout=20, state=lambda: counts(p, t))
    c = counts(p, t)
    for sli, (good, total) in c.items():
        assert good == total, f"{sli}: {total - good} bad of {total} on a healthy server: {c}"
    assert m.count("publish", t, good=True, path="api") >= 3
    assert m.count("restarts", t) == 0


async def test_the_deliberate_reconnect_resumes_without_a_view_change(server: Served) -> None:
    p = prober(server.ws)
    async with running(p):
        await until("a session", lambda: connected(p, server.ws))
        probe = probe_of(p, server.ws)
        s = probe.session
        assert s is not None and s.recv_group.view is not None
        before = s.recv_group.view.version
        for _ in range(3):
            assert await probe.check_resume() is True
        assert s.recv_group.view is not None and s.recv_group.view.version == before
        assert probe.session is s  # the same session: the SDK resumed it
        assert counts(p, server.ws)["resume"] == (3, 3)


class _OneSecond:
    """A reconnect backoff of exactly one second (the SDK's has full jitter)."""

    def delay(self, attempt: int, rng: object) -> float:
        return 1.0


async def test_a_reconnect_the_server_does_not_resume_is_counted_bad(tmp_path: Path) -> None:
    """suspect_timeout 0 and a receiver that comes back a second later: the server removed it
    (a view change installed), so its return is a rejoin, and the resume SLI says so (the SLI
    can fail). (Back before the install, the server would cancel the change: G7, a good
    resume.)"""
    s = Served(tmp_path / "data", "--suspect-timeout", "0", api=False)
    await asyncio.to_thread(s.start)
    try:
        p = prober(s.ws, resume_deadline=5.0)
        async with running(p):
            await until("a session", lambda: connected(p, s.ws))
            session = probe_of(p, s.ws).session
            assert session is not None
            session.receiver.options = dataclasses.replace(session.receiver.options,
                                                           backoff=_OneSecond())
            assert await probe_of(p, s.ws).check_resume() is False
        assert counts(p, s.ws)["resume"] == (0, 1)
    finally:
        await asyncio.to_thread(s.stop)


async def test_a_failed_target_probe_counts_what_it_held_bad_and_is_restarted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Supervision (prober.py, G13): a target probe whose loop raises (a prober bug) is counted
    in notify_probe_restarts_total, the events it held are counted bad (never lost), and a new
    probe of the target runs after the backoff while the prober goes on."""
    (port,) = free_ports(1)
    target = f"ws://127.0.0.1:{port}"  # (nobody listens: no session, and none is needed)
    p = prober(target, rate=1.0)
    failed: list[TargetProbe] = []
    expire = TargetProbe._expire_loop

    async def fails_once(self: TargetProbe) -> None:
        if not failed:
            failed.append(self)
            self.publishes.open(10**6, "held", asyncio.get_running_loop().time())
            raise RuntimeError("a prober bug")
        await expire(self)

    monkeypatch.setattr(TargetProbe, "_expire_loop", fails_once)
    async with running(p):
        await until("a new probe", lambda: p.probes.get(target) not in (None, *failed))
        m = p.metrics
        assert m.count("restarts", target) == 1
        assert (m.count("publish", target, path="held"),
                m.count("publish", target, good=True, path="held")) == (1, 0)
        assert len(failed[0].publishes) == 0
        await asyncio.sleep(3 * p.config.backoff)
        assert m.count("restarts", target) == 1  # the new probe runs on
        assert p.probes[target] is not failed[0]


async def _bad_moves_then_recovers(p: Prober, server: Served, fault: object) -> None:
    """Good events first; `fault()` (awaited); then: the publish and delivery bad counts moved,
    and after the server is back, new events are good and the bad counts stop moving."""
    m, t = p.metrics, server.ws
    await until("good deliveries before the fault",
                lambda: m.count("delivery", t, good=True) >= 10, timeout=30)
    assert bad(p, t, "publish") == 0 and bad(p, t, "delivery") == 0
    await fault()  # type: ignore[operator]
    await until("the fault counted as bad publishes and deliveries",
                lambda: bad(p, t, "publish") > 0 and bad(p, t, "delivery") > 0)
    # recovered: good deliveries again, then a quiet stretch with no new bad event
    await until("connected again", lambda: connected(p, t), timeout=30)
    g = m.count("delivery", t, good=True)
    await until("deliveries after the fault", lambda: m.count("delivery", t, good=True) >= g + 10,
                timeout=30)
    await asyncio.sleep(p.config.publish_deadline + 0.5)  # (the last late ones expire)
    bad_pub, bad_del = bad(p, t, "publish"), bad(p, t, "delivery")
    g = m.count("delivery", t, good=True)
    await until("a healthy stretch", lambda: m.count("delivery", t, good=True) >= g + 20,
                timeout=30)
    assert (bad(p, t, "publish"), bad(p, t, "delivery")) == (bad_pub, bad_del), counts(p, t)
    probe = probe_of(p, t)
    assert len(probe.publishes) <= p.config.max_outstanding
    assert len(probe.deliveries) <= p.config.max_outstanding


async def test_a_stopped_server_moves_the_bad_counts_then_they_recover(server: Served) -> None:
    p = prober(server.ws, publish_deadline=1.0, latency_threshold=0.5, max_outstanding=30)

    async def sigstop() -> None:
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(3.0)  # (below the heartbeat timeout: the links stay up)
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)

    async with running(p):
        await _bad_moves_then_recovers(p, server, sigstop)
    # 3 s at 20/s is 60 messages; at most 30 were held: the rest were evicted as bad
    assert p.metrics.count("restarts", server.ws) == 0


async def test_a_killed_and_restarted_server_moves_the_bad_counts_then_they_recover(
        server: Served) -> None:
    p = prober(server.ws, publish_deadline=1.0, latency_threshold=0.5)

    async def kill_and_restart() -> None:
        assert server.proc is not None
        server.proc.kill()
        await asyncio.to_thread(server.proc.wait, TIMEOUT)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(server.start)  # the same port and data directory

    async with running(p):
        await _bad_moves_then_recovers(p, server, kill_and_restart)


async def test_the_cli_serves_the_slis_and_exits_after_its_duration(server: Served) -> None:
    (port,) = free_ports(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOTIFY_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "notify.cli", "probe", server.ws, "--rate", "20",
         "--reconnect-every", "1", "--view-change-every", "0", "--duration", "4",
         "--metrics-port", str(port), "--api", server.api, "--key", SECRET,
         "--api-rate", "5", "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        body = ""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            for _ in range(60):
                await asyncio.sleep(0.1 if body else 0.25)
                try:
                    async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
                        body = await r.text()
                except aiohttp.ClientError:
                    continue
                if "notify_probe_resume_good_total" in body and \
                        'notify_probe_delivery_good_total{path="api"' in body:
                    break
        assert 'notify_probe_publish_good_total{path="sdk",target="' + server.ws in body, body
        assert 'notify_probe_delivery_good_total{path="api"' in body, body
        assert "notify_probe_resume_good_total" in body, body
        out, _ = await asyncio.to_thread(proc.communicate, timeout=TIMEOUT)
        assert proc.returncode == 0, out.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(TIMEOUT)


async def test_the_cli_stops_on_sigterm_and_its_members_leave(server: Served) -> None:
    """SIGTERM, what a service manager sends, stops `notify probe` gracefully: exit 0, and its
    two members have left the probe group by then. (Killed by the signal's default action, it
    left them for the server to suspect, seconds later.)"""
    (port,) = free_ports(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOTIFY_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "notify.cli", "probe", server.ws, "--rate", "20",
         "--reconnect-every", "0", "--view-change-every", "0", "--metrics-port", str(port),
         "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    auth = {"Authorization": f"Bearer {SECRET}"}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:

            async def members() -> list[str]:
                async with http.get(f"{server.api}/api/v1/groups/probe", headers=auth) as r:
                    return list((await r.json()).get("members", []))

            body = ""
            for _ in range(80):
                await asyncio.sleep(0.25)
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
                        body = await r.text()
                if 'notify_probe_delivery_good_total{path="sdk"' in body:
                    break
            assert 'notify_probe_delivery_good_total{path="sdk"' in body, body
            assert len(await members()) == 2
            proc.send_signal(signal.SIGTERM)
            out, _ = await asyncio.to_thread(proc.communicate, timeout=TIMEOUT)
            assert proc.returncode == 0, out.decode(errors="replace")
            assert await members() == [], "the probe's members were left for the server to suspect"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(TIMEOUT)
