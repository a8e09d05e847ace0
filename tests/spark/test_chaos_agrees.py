"""The chaos tool's fast verdict (notify_chaos/verdict.py) agrees with the Spark `check` job on
the same logs, rule by rule: duplicates (G7/G8), order (G3, G4), virtual synchrony (G2); on the
hand-made histories with planted violations and on a real chaos run (SIGKILL, SQLite).

Outside its scope by design: across a log reset (memory store restarted) offsets are reused;
the fast verdict keys on the epoch, the Spark job (which knows no epochs) would see duplicates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from notify_chaos.verdict import check as fast_check
from notify_chaos.verdict import check_run, log_files, read_jsonl
from spark_analysis.check import check as spark_check
from spark_analysis.common import load_events

from . import handmade

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

SCENARIO = Path(__file__).parents[1] / "chaos" / "ci_kill_while_away.yaml"


def _spark_counts(spark: SparkSession, logs: Path) -> dict[str, int]:
    rows = spark_check(load_events(spark, str(logs))).rows["violations"]
    n = {g: sum(1 for r in rows if r["guarantee"] == g) for g in
         ("G7/G8 duplicate", "G3 FIFO", "G4 total order", "G2 virtual synchrony")}
    return {"duplicates": n["G7/G8 duplicate"], "G3": n["G3 FIFO"], "G4": n["G4 total order"],
            "G2": n["G2 virtual synchrony"]}


def _fast_counts(v: dict[str, Any]) -> dict[str, int]:
    return {"duplicates": v["duplicates"]["by_rule"].get("offset", 0),
            "G3": v["out_of_order"]["by_rule"].get("G3", 0),
            "G4": v["out_of_order"]["by_rule"].get("G4", 0),
            "G2": v["view_disagreements"]["by_rule"].get("G2", 0)}


def _reordered_total() -> dict[str, list[dict[str, Any]]]:
    """alice delivers bob's total-order seq 2 before seq 1 (G4), and carol gets offset 3 twice."""
    h = handmade.clean_history()
    d = [x for x in h["alice"] if x["event"] == "client.deliver"]
    t1, t2 = d[1], d[3]
    t1["recv_ts"], t2["recv_ts"] = t2["recv_ts"], t1["recv_ts"]
    t1["n"], t2["n"] = t2["n"], t1["n"]
    c = next(x for x in h["carol"] if x["event"] == "client.deliver" and x["offset"] == 3)
    h["carol"].append({**c, "recv_ts": c["recv_ts"] + 0.0005, "n": 50})
    return h


CASES = {"clean": handmade.clean_history, "reordered_total+duplicate": _reordered_total,
         **{k: b for k, (b, _) in handmade.VARIANTS.items()}}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fast_verdict_agrees_with_spark_on_handmade_logs(spark: SparkSession, tmp_path: Path,
                                                         case: str) -> None:
    h = CASES[case]()
    logs = handmade.write(h, tmp_path / "logs")
    events, bad = read_jsonl(log_files(logs, "events-"))
    assert bad == 0
    fast = _fast_counts(fast_check(events))
    assert fast == _spark_counts(spark, logs)
    if case != "clean" and case != "aborted_delivered":  # G5 is Spark's alone
        assert sum(fast.values()) > 0


def test_fast_verdict_agrees_with_spark_on_a_real_chaos_run(spark: SparkSession,
                                                            tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "notify_chaos.cli", "run", str(SCENARIO),
                        "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    v = check_run(out)
    assert v["checked"]["deliveries"] > 1000
    assert _fast_counts(v) == _spark_counts(spark, out / "logs") == dict.fromkeys(
        ("duplicates", "G3", "G4", "G2"), 0)
    # and both see the same deliveries
    c = spark_check(load_events(spark, str(out / "logs")))
    assert c.summary["deliveries_checked"] == v["checked"]["deliveries"]
