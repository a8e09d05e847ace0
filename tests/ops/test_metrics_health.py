"""`/metrics`, `/healthz`, `/readyz` on the WebSocket port (docs/operations.md).

A scripted scenario, then a scrape: the counts are exactly the ones the scenario must produce.
"""

from __future__ import annotations

import asyncio
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from notify.core import CoreConfig, Limits, Timeouts
from notify.server.app import NotifyServer
from tests.integration.conftest import MakeServer, OpenRaw

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


async def scrape(srv: NotifyServer) -> Samples:
    status, ctype, body = await asyncio.to_thread(_get, f"http://127.0.0.1:{srv.port}/metrics")
    assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
    out: Samples = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_after_a_scripted_scenario(make_server: MakeServer,
                                                 open_raw: OpenRaw) -> None:
    srv = await make_server(limits=Limits(publish_rate=1, publish_burst=5))  # 1/s: no refill
    before = await scrape(srv)
    assert value(before, "notify_view_installs_total") == 0
    assert value(before, "notify_up") == 1

    alice = await open_raw(srv, "alice")
    await alice.join("g")  # one join: exactly one view change, one install
    s1 = await scrape(srv)
    assert value(s1, "notify_view_changes_total", reason="join") == 1
    assert value(s1, "notify_view_installs_total") == 1
    assert value(s1, "notify_view_install_seconds_count") == 1
    assert (value(s1, "notify_groups"), value(s1, "notify_members")) == (1, 1)
    assert (value(s1, "notify_connections"), value(s1, "notify_sessions")) == (1, 1)

    bob = await open_raw(srv, "bob")
    alice.auto_flush = True
    await asyncio.gather(bob.join("g"), alice.expect("view_install"))
    for i in range(3):
        await alice.send({"type": "publish", "req": f"p{i}", "group": "g", "id": f"p{i}",
                          "view": 2, "payload": i})
        await alice.expect("published")
    for _ in range(3):
        await bob.expect("deliver")
    await alice.send("{not json")  # one bad frame
    await alice.expect("error")
    await alice.send({"type": "publish", "req": "x", "group": "nowhere", "id": "x", "view": 0,
                      "payload": None})
    await alice.expect("rejected")
    for i in range(6):  # the bucket holds 5 at most, 4 are left: 2 of these are refused
        await alice.send({"type": "publish", "req": f"q{i}", "group": "g", "id": f"q{i}",
                          "view": 2, "payload": i})
    answers = [await alice.expect(lambda f: f["type"] in ("published", "rejected"))
               for _ in range(6)]
    refused = sum(a["type"] == "rejected" for a in answers)

    s2 = await scrape(srv)
    assert value(s2, "notify_view_changes_total", reason="join") == 2
    assert value(s2, "notify_view_installs_total") == 2
    assert value(s2, "notify_messages_total") == 3 + 6 - refused
    assert value(s2, "notify_deliveries_total") == 2 * (3 + 6 - refused)  # both members
    assert value(s2, "notify_errors_total", code="bad_frame") == 1
    assert value(s2, "notify_rejected_total", code="no_group") == 1
    assert value(s2, "notify_rejected_total", code="rate_limited") == refused >= 1
    assert (value(s2, "notify_groups"), value(s2, "notify_members")) == (1, 2)
    assert value(s2, "notify_connections") == 2
    assert value(s2, "notify_sent_bytes_total") > 0
    assert value(s2, "notify_slow_consumers_total") == 0
    assert value(s2, "notify_internal_errors_total") == 0

    # bob leaves: one more view change, by reason leave
    bob.auto_flush = True
    await bob.send({"type": "leave", "req": "l", "group": "g"})
    await asyncio.gather(bob.expect("view_install"), alice.expect("view_install"))
    s3 = await scrape(srv)
    assert value(s3, "notify_view_changes_total", reason="leave") == 1
    assert value(s3, "notify_view_installs_total") == 3
    assert value(s3, "notify_members") == 1


async def test_health_and_readiness_through_a_graceful_stop() -> None:
    srv = NotifyServer(CoreConfig(), port=0, drain_delay=0.5)
    await srv.start()
    base = f"http://127.0.0.1:{srv.port}"
    assert (await asyncio.to_thread(_get, base + "/healthz"))[0] == 200
    assert (await asyncio.to_thread(_get, base + "/readyz"))[0] == 200
    stopping = asyncio.get_running_loop().create_task(srv.stop())
    await asyncio.sleep(0.1)  # within drain_delay: alive, not ready, not taking connections
    assert (await asyncio.to_thread(_get, base + "/readyz"))[0] == 503
    assert (await asyncio.to_thread(_get, base + "/healthz"))[0] == 200
    assert (await asyncio.to_thread(_get, base + "/"))[0] == 503
    assert value(await scrape(srv), "notify_up") == 0
    await asyncio.wait_for(stopping, 10)


async def test_two_servers_in_one_process_keep_separate_counts() -> None:
    a = NotifyServer(CoreConfig(Timeouts()), port=0)
    b = NotifyServer(CoreConfig(Timeouts()), port=0)
    async with a, b:
        a.stats.view_installs = 7
        assert value(await scrape(b), "notify_view_installs_total") == 0
        assert value(await scrape(a), "notify_view_installs_total") == 7
