"""Churn and presence by user as well as by instance (issue 29: a member is one client
instance of a user, member id `user#instance`). Hand-made logs whose answers are known: counted
by instance, they would be different."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_analysis.churn import churn
from spark_analysis.common import load_events
from spark_analysis.whatif import whatif

from . import handmade

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

T0 = handmade.T0
A1, A2, BOB = "ann#phone", "ann#laptop", "bob"


def _history(*, client_views_only: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Group g1 over 50 s. bob is there throughout (a member naming no instance). ann's phone
    is in the view from 0 to 20 s and from 40 s, her laptop from 10 to 30 s: ann is present
    0-30 s and 40-50 s (40 s), her instances 20 + 10 + 20 = 50 s; ann arrives twice (0 s and
    40 s: the laptop's arrival at 10 s finds her phone there) and leaves once (30 s: the phone
    leaving at 20 s leaves her laptop), where her instances arrive 3 times and leave twice."""
    views = [(0, {BOB, A1}), (10, {BOB, A1, A2}), (20, {BOB, A2}), (30, {BOB}), (40, {BOB, A1})]
    server: list[dict[str, Any]] = []
    clients: dict[str, list[dict[str, Any]]] = {m: [] for m in (A1, A2, BOB)}
    for v, (t, members) in enumerate(views, 1):
        if not client_views_only:
            server.append({"ts": T0 + t, "event": "view.install", "node": "server",
                           "group": "g1", "view": v, "members": sorted(members),
                           "duration_ms": 1.0, "previous": v - 1})
        for m in sorted(members):
            clients[m].append({"ts": T0 + t + 0.001 * len(m), "event": "client.view",
                               "node": m, "group": "g1", "member": m, "view": v,
                               "members": sorted(members)})
    # the phone's link drops at 15 s and is back at 40 s (removed at 20 s, rejoins)
    clients[A1] += [{"ts": T0 + 15, "event": "client.disconnect", "node": A1, "member": A1,
                     "reason": "network"},
                    {"ts": T0 + 40, "event": "client.reconnect", "node": A1, "member": A1,
                     "gap_ms": 25_000.0, "resumed": False}]
    clients[BOB].append({"ts": T0 + 50, "event": "client.view", "node": BOB, "group": "g1",
                         "member": BOB, "view": 5, "members": [BOB, A1]})  # the log's end
    return {**({"server": server} if server else {}), **clients}


@pytest.mark.parametrize("client_views_only", [False, True])
def test_a_user_is_counted_once_however_many_instances(spark: SparkSession, tmp_path: Path,
                                                       client_views_only: bool) -> None:
    logs = handmade.write(_history(client_views_only=client_views_only), tmp_path / "logs")
    ch = churn(load_events(spark, str(logs)))
    s = ch.summary
    assert s["view_source"] == ("client" if client_views_only else "server")
    rows = {r["user"]: r for r in ch.rows["users"]}
    ann, bob = rows["ann"], rows["bob"]
    tol = 0.05 if client_views_only else 1e-6  # (the clients' views are a few ms apart)
    assert (ann["instances"], ann["arrivals"], ann["leaves"]) == (2, 2, 1)
    assert (ann["instance_arrivals"], ann["instance_leaves"]) == (3, 2)
    assert ann["present_s"] == pytest.approx(40, abs=tol)  # the union of her instances' times
    assert ann["instance_present_s"] == pytest.approx(50, abs=tol)  # their sum
    assert (bob["instances"], bob["arrivals"], bob["leaves"]) == (1, 1, 0)
    assert bob["present_s"] == pytest.approx(50, abs=tol) == bob["instance_present_s"]
    assert (s["users"], s["instances"], s["multi_instance_users"]) == (2, 3, 1)
    assert (s["user_arrivals"], s["user_leaves"]) == (3, 1)
    assert (s["instance_arrivals"], s["instance_leaves"]) == (4, 2)
    assert s["user_present_s"] == pytest.approx(90, abs=2 * tol)
    assert s["instance_present_s"] == pytest.approx(100, abs=2 * tol)
    assert ch.rows["users"][0]["user"] == "ann"  # users with most instances first


def test_whatif_replays_instances_as_members_of_their_user(spark: SparkSession,
                                                           tmp_path: Path) -> None:
    """The replay connects each member id as the SDK would (user, instance): an instance id
    is not a user name the server accepts."""
    logs = handmade.write(_history(), tmp_path / "logs")
    w = whatif(load_events(spark, str(logs)), candidates=(5.0, 30.0))
    by_t = {r["timeout_s"]: r for r in w.rows["candidates"]}
    assert w.summary["replays"] > 0 and set(by_t) == {5.0, 30.0}
    # the phone's 25 s gap: removed at 5 s; at 30 s too, by the laptop's leave at 30 s (it
    # has been away longer than flush_timeout then: docs/analysis.md §4)
    assert by_t[5.0]["false_removals"] == by_t[30.0]["false_removals"] == 1
    assert by_t[5.0]["returning_gaps"] == 1


def test_cli_prints_churn_by_user_and_writes_the_table(spark: SparkSession, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    from spark_analysis import cli
    from spark_analysis.report import render

    logs = handmade.write(_history(), tmp_path / "logs")
    out = tmp_path / "o"
    a = cli._parser().parse_args(["churn", "--logs", str(logs), "--out", str(out)])
    assert cli.run(a, spark) == 0
    printed = capsys.readouterr().out
    assert ("churn by user (server views): 2 users in groups, 3 instances (1 users with "
            "several); arrivals 3 by user / 4 by instance, leaves 1 / 2, present 0.03 user-h "
            "/ 0.03 instance-h") in printed
    assert spark.read.parquet(str(out / "churn" / "users")).count() == 2
    ch = churn(load_events(spark, str(logs)))
    html = render({"churn": ch}, tmp_path / "r", bad_lines={}, logs=str(logs)).read_text()
    assert "<h3>users</h3>" in html and "instance_present_s" in html
