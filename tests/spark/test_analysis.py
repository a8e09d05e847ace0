"""The Spark jobs on a real fleet run and on hand-built logs with known violations (issue 5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import spark_analysis.whatif as whatif_module
from spark_analysis import cli
from spark_analysis.check import check
from spark_analysis.churn import churn
from spark_analysis.common import job_cache, load_events
from spark_analysis.delivery import delivery
from spark_analysis.whatif import whatif

from . import handmade

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def test_schema_counts_bad_lines_and_keeps_good_ones(spark: SparkSession, tmp_path: Path) -> None:
    junk = ["not json at all", '{"ts": 1.0, "event": "no.such.event", "node": "x"}',
            '{"event": "msg.accept", "node": "server"}',
            '{"ts": 2.0, "event": "msg.accept", "node": "server", "group": "g1"}']
    logs = handmade.write(handmade.clean_history(), tmp_path / "logs", junk=junk)
    ev = load_events(spark, str(logs), str(tmp_path / "out"))
    good = sum(len(v) for v in handmade.clean_history().values())
    assert ev.df.count() == good
    assert ev.bad_lines == {"not_json": 1, "unknown_event": 1,
                            "missing_or_mistyped_common": 1, "missing_offset": 1}
    # the cleaned table was written as Parquet and can be read back as input
    again = load_events(spark, str(tmp_path / "out" / "events"))
    assert again.source == "parquet" and again.df.count() == good


def test_blank_lines_are_skipped_and_not_counted(spark: SparkSession, tmp_path: Path) -> None:
    """Empty lines and lines of spaces are no events and no bad lines (found among the lines
    that did not parse, not by trimming every line); spaces around something that is not
    JSON still make a bad line."""
    junk = ["", "   ", "  nope  ", '  {"ts": 1.0, "node": "x"}  ']
    logs = handmade.write(handmade.clean_history(), tmp_path / "logs", junk=junk)
    ev = load_events(spark, str(logs), str(tmp_path / "out"))
    assert ev.df.count() == sum(len(v) for v in handmade.clean_history().values())
    assert ev.bad_lines == {"not_json": 1, "missing_or_mistyped_common": 1}


def test_check_passes_a_clean_history(spark: SparkSession, tmp_path: Path) -> None:
    logs = handmade.write(handmade.clean_history(), tmp_path / "logs")
    r = check(load_events(spark, str(logs)))
    assert r.rows["violations"] == []
    assert r.summary["deliveries_checked"] == 17
    assert r.summary["survivor_transitions_checked"] == 2


@pytest.mark.parametrize("variant", sorted(handmade.VARIANTS))
def test_check_catches_each_known_violation(spark: SparkSession, tmp_path: Path,
                                            variant: str) -> None:
    build, guarantee = handmade.VARIANTS[variant]
    logs = handmade.write(build(), tmp_path / "logs")
    r = check(load_events(spark, str(logs)))
    found = {v["guarantee"] for v in r.rows["violations"]}
    assert guarantee in found, r.rows["violations"]


def test_cli_check_exits_nonzero_and_lists_violations(spark: SparkSession, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    logs = handmade.write(handmade.reordered_fifo(), tmp_path / "logs")
    a = cli._parser().parse_args(["check", "--logs", str(logs), "--out", str(tmp_path / "o")])
    assert cli.run(a, spark) == 1
    out = capsys.readouterr().out
    assert "VIOLATION G3 FIFO group=g1 member=bob" in out
    assert (tmp_path / "o" / "check" / "violations").is_dir()


def test_fleet_run_passes_check_and_every_job_runs(spark: SparkSession, tmp_path: Path,
                                                   fleet_logs: tuple[Path, dict],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    logs, fleet = fleet_logs
    assert fleet["delivered"] > 100 and fleet["disconnects"] > 0
    ev = load_events(spark, str(logs), str(tmp_path / "out"))
    assert ev.bad_lines == {}
    # every job caches what it reads more than once, for itself only (`job_cache`)
    cached = spark._jsparkSession.sharedState().cacheManager()
    spark.catalog.clearCache()
    c = check(ev)
    assert c.rows["violations"] == [], c.rows["violations"][:20]
    assert c.summary["deliveries_checked"] == fleet["delivered"]
    assert cached.isEmpty()  # its deliveries and its out-of-order rows
    ch = churn(ev)
    assert ch.summary["client_disconnects"] == fleet["disconnects"]
    assert ch.summary["view_installs"] > 0
    assert cached.isEmpty()  # its gaps
    d = delivery(ev)
    assert d.summary["accepted"] == fleet["published"]
    assert {r["order"] for r in d.rows["latency"]} == {"fifo", "total"}
    w = whatif(ev, candidates=(1.0, 3.0))
    assert w.summary["replays"] > 0 and len(w.rows["candidates"]) == 2
    assert cached.isEmpty()  # the replay's input

    def broken(_: object) -> float:
        raise RuntimeError("injected")

    monkeypatch.setattr(whatif_module, "_flush_rtt", broken)  # fails once its input is cached
    with pytest.raises(RuntimeError, match="injected"):
        whatif(ev, candidates=(1.0,))
    assert cached.isEmpty()  # ... and a replay that fails leaves none either
    monkeypatch.undo()
    w = whatif(ev, current=0.15)
    assert w.summary["recommended_suspect_timeout_s"] is not None
    assert w.summary["server_option"].startswith("notify serve --suspect-timeout ")


def test_cli_report_writes_html_plots_and_parquet(spark: SparkSession, tmp_path: Path,
                                                   fleet_logs: tuple[Path, dict]) -> None:
    logs, _ = fleet_logs
    out = tmp_path / "o"
    a = cli._parser().parse_args(["report", "--logs", str(logs), "--out", str(out),
                                  "--current", "0.15"])
    assert cli.run(a, spark) == 0
    html = (out / "report" / "index.html").read_text()
    for png in ("gaps.png", "whatif.png", "latency.png", "throughput.png", "views.png"):
        assert (out / "report" / png).stat().st_size > 5000
        assert png in html
    for job in ("churn", "delivery", "check", "whatif"):
        s = json.loads((out / job / "summary.json").read_text())
        assert s["schema_version"] and s["job"] == job
    assert spark.read.parquet(str(out / "whatif" / "candidates")).count() > 5


def _gap_log(tmp_path: Path, gone_at: float) -> Path:
    """Client logs over 100 s: 20 hand-offs of 0.5 s, 3 sleeps of 8 s, and 5 members that drop at
    `gone_at` and never return (the log ends at 100 s)."""
    t0, hist = handmade.T0, {}
    for i in range(23):
        m, gap = f"r{i:02d}", (0.5 if i < 20 else 8.0)
        hist[m] = [{"ts": t0 + 10 + i, "event": "client.disconnect", "node": m, "member": m,
                    "reason": "handoff"},
                   {"ts": t0 + 10 + i + gap, "event": "client.reconnect", "node": m, "member": m,
                    "gap_ms": gap * 1000, "resumed": gap < 3}]
    for i in range(5):
        m = f"x{i}"
        hist[m] = [{"ts": t0 + gone_at, "event": "client.disconnect", "node": m, "member": m,
                    "reason": "gone"}]
    hist["server"] = [{"ts": t0, "event": "conn.open", "node": "server", "member": "r00"},
                      {"ts": t0 + 100, "event": "conn.open", "node": "server", "member": "r00"}]
    return handmade.write(hist, tmp_path / "logs")


@pytest.mark.parametrize(("gone_at", "expected"), [(10.0, 10.0), (94.0, None)])
def test_whatif_right_censored_gaps_are_not_a_saving(spark: SparkSession, tmp_path: Path,
                                                     gone_at: float,
                                                     expected: float | None) -> None:
    cands = (0.3, 1.0, 5.0, 7.5, 10.0, 15.0)
    # the closed form's censoring (the log has gaps but no group to replay; the replay's
    # censoring is in test_whatif_replay.py)
    w = whatif(load_events(spark, str(_gap_log(tmp_path, gone_at))), candidates=cands,
               method="estimate")
    rows = {r["timeout_s"]: r for r in w.rows["candidates"]}
    ghost = [rows[c]["ghost_member_s"] for c in cands]
    views = [rows[c]["view_changes"] for c in cands]
    # a longer timeout never costs less detection delay, and never causes more view changes
    assert ghost == sorted(ghost) and views == sorted(views, reverse=True)
    if gone_at == 94.0:
        # the 5 gone members were seen away 6 s: T >= 7.5 would detect them after the log ends,
        # which costs at least 6 s each, not 0
        assert rows[10.0]["ghost_member_s"] == pytest.approx(30.0)
        assert rows[5.0]["ghost_member_s"] == pytest.approx(25.0)
        assert rows[10.0]["censored_gaps"] == 5 and rows[5.0]["censored_gaps"] == 0
        # T=10 has no false removal among the returning gaps only because the 5 open gaps are
        # censored (they may come back after 8 s like the sleeps): not a recommendation
        assert rows[10.0]["false_removal_rate"] == 0.0
        assert w.summary["recommended_suspect_timeout_s"] < 6.0
        assert not w.summary["met_target"]
    else:
        # gone 90 s before the end: nothing is censored, T=10 is the honest answer
        assert all(rows[c]["censored_gaps"] == 0 for c in cands)
        assert w.summary["recommended_suspect_timeout_s"] == expected and w.summary["met_target"]


_SESSION_PROBE = """
import json
from spark_analysis.common import spark_session
s = spark_session("local[1]")
jvm = s.sparkContext._jvm
print(json.dumps({
    "gcs": sorted(b.getName()
                  for b in jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()),
    "probe": jvm.java.lang.System.getProperty("notify.probe")}))
s.stop()
"""


def _probe_session(conf_dir: Path, user_options: str) -> dict[str, object]:
    """A new local session (its own process: a JVM of its own) whose spark-defaults.conf sets
    the user's driver options: which collectors its JVM runs, and whether they arrived."""
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.driver.extraJavaOptions {user_options}\n")
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
    r = subprocess.run([sys.executable, "-c", _SESSION_PROBE], capture_output=True, text=True,
                       timeout=120, env={**env, "SPARK_CONF_DIR": str(conf_dir)})
    assert r.returncode == 0, r.stderr[-2000:]
    seen: dict[str, object] = json.loads(r.stdout.strip().splitlines()[-1])
    return seen


def test_a_users_own_driver_options_are_kept_beside_the_collector(tmp_path: Path) -> None:
    """The collector is a default (`spark.driver.defaultJavaOptions`): driver options the user
    set in spark-defaults.conf still reach the JVM; and one that picks its own collector gets
    it (two would stop the JVM from starting)."""
    assert _probe_session(tmp_path, "-Dnotify.probe=kept") == {
        "gcs": ["PS MarkSweep", "PS Scavenge"], "probe": "kept"}
    own = _probe_session(tmp_path, "-Dnotify.probe=g1 -XX:+UseG1GC")
    gcs = own["gcs"]
    assert own["probe"] == "g1" and isinstance(gcs, list) and gcs
    assert all(g.startswith("G1 ") for g in gcs), gcs


def test_a_collector_in_a_comment_of_spark_defaults_is_not_the_users(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark ignores a commented-out line of spark-defaults.conf, so the default collector
    stays; an active line picks the user's own."""
    from spark_analysis.common import _user_chose_collector

    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    conf = tmp_path / "spark-defaults.conf"
    conf.write_text("  # spark.driver.extraJavaOptions -XX:+UseG1GC\n")
    assert not _user_chose_collector()
    conf.write_text("spark.driver.extraJavaOptions -XX:+UseG1GC\n")
    assert _user_chose_collector()


def test_a_local_session_runs_the_parallel_collector(spark: SparkSession) -> None:
    """`spark_session` asks for the throughput collector in local mode (common.py: the 10 M
    report is 3 % faster with it); the JVM this suite started must be running it."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    beans = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    assert {b.getName() for b in beans} == {"PS MarkSweep", "PS Scavenge"}


def test_a_cache_outside_a_job_is_refused(spark: SparkSession) -> None:
    """`job_cache` releases what a job cached when the job is over; outside one, nothing
    would, so it refuses instead of leaving the cache in the session."""
    cached = spark._jsparkSession.sharedState().cacheManager()
    spark.catalog.clearCache()
    with pytest.raises(RuntimeError, match="@timed"):
        job_cache(spark.range(3))
    assert cached.isEmpty()
