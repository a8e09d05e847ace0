"""`whatif --method replay` (issue 15): hand-built logs whose replay through the real core is known
exactly, merged concurrent changes included, and agreement with the closed-form estimate where
nothing can merge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_analysis import cli
from spark_analysis.common import load_events
from spark_analysis.whatif import whatif

from . import handmade

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

T0 = handmade.T0


def _client(m: str, *events: tuple[float, str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"ts": T0 + t, "event": e, "node": m, "member": m, **f} for t, e, f in events]


def _log(tmp_path: Path, members: dict[str, list[tuple[float, str, dict[str, Any]]]],
         end: float = 100.0) -> Path:
    """Client logs: each member joins `g1` at its index (seconds), then `members[m]`'s events;
    the server log only marks the end of the log."""
    hist = {m: _client(m, (float(i), "client.join", {"group": "g1"}), *evs)
            for i, (m, evs) in enumerate(members.items())}
    hist["server"] = [{"ts": T0 + end, "event": "conn.open", "node": "server", "member": "zz"}]
    return handmade.write(hist, tmp_path / "logs")


def _gone(t: float) -> tuple[float, str, dict[str, Any]]:
    return (t, "client.disconnect", {"reason": "gone"})


def _gap(t: float, gap: float) -> list[tuple[float, str, dict[str, Any]]]:
    return [(t, "client.disconnect", {"reason": "handoff"}),
            (t + gap, "client.reconnect", {"gap_ms": gap * 1000, "resumed": True})]


def test_replay_merges_two_removals_into_one_view_change(spark: SparkSession,
                                                         tmp_path: Path) -> None:
    # a and b drop 1 s apart and never return. a's removal (due at 13 s) proposes; b, still
    # suspect, holds that flush until its own removal (at 14 s) joins it: ONE install removes
    # both. The closed form counts 2 view changes and 3 s of delay each.
    logs = _log(tmp_path, {"a": [_gone(10.0)], "b": [_gone(11.0)], "c": [], "d": []})
    ev = load_events(spark, str(logs))
    w = whatif(ev, candidates=(3.0,), flush_rtt=0.01)
    r = w.rows["candidates"][0]
    assert w.summary["method"] == "replay" and w.summary["gap_source"] == "client"
    assert r["view_changes"] == 4 + 1  # four joins (one a second), one merged removal
    assert r["removals"] == 2 and r["never_returned"] == 2 and r["censored_gaps"] == 0
    assert r["detection_delay_s"] == pytest.approx(((14 - 10) + (14 - 11)) / 2)
    assert r["ghost_member_s"] == pytest.approx(7.0)
    assert r["installs"] == 1 + 2 + 3 + 4 + 2
    e = whatif(ev, candidates=(3.0,), method="estimate").rows["candidates"][0]
    assert e["view_changes"] == 2 and e["detection_delay_s"] == 3.0  # each gap alone


CANDS = (0.5, 3.0, 10.0, 30.0)


def test_replay_agrees_with_the_estimate_where_nothing_can_merge(spark: SparkSession,
                                                                 tmp_path: Path) -> None:
    # One group; gaps 20 s apart, each shorter than the next gap is far: every change is alone.
    members = {f"m{i}": _gap(20.0 + 20 * i, gap) for i, gap in enumerate((0.3, 2.0, 5.0, 8.0))}
    members["x"] = [_gone(110.0)]  # seen away 61 s before the log ends
    members["y"] = [_gone(150.0)]  # seen away 21 s: censored for T >= 21
    logs = _log(tmp_path, members, end=171.0)
    ev = load_events(spark, str(logs))
    rep = {r["timeout_s"]: r for r in whatif(ev, CANDS, flush_rtt=0.0).rows["candidates"]}
    est = {r["timeout_s"]: r for r in whatif(ev, CANDS, method="estimate").rows["candidates"]}
    for t in CANDS:
        r, e = rep[t], est[t]
        for k in ("false_removals", "returning_gaps", "never_returned", "censored_gaps",
                  "false_removal_rate", "false_removal_rate_hi"):
            assert r[k] == e[k], (t, k, r[k], e[k])
        assert r["ghost_member_s"] == pytest.approx(e["ghost_member_s"]), t
        # the estimate leaves out the six joins (one view change each, a second apart), and
        # counts a removal that would come after the end of the log, which the replay does not
        assert r["view_changes"] == e["view_changes"] + 6 - r["censored_gaps"], t
        if r["censored_gaps"] < r["never_returned"]:
            assert r["detection_delay_s"] == pytest.approx(t)
    assert [rep[t]["false_removals"] for t in CANDS] == [3, 2, 0, 0]
    assert [rep[t]["censored_gaps"] for t in CANDS] == [0, 0, 0, 1]


def test_cli_prints_the_rule_and_the_predicted_numbers(spark: SparkSession, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    logs = _log(tmp_path, {"a": [_gone(10.0)], "b": _gap(20.0, 4.0), "c": _gap(40.0, 1.0)})
    for method in ("replay", "estimate"):
        a = cli._parser().parse_args(["whatif", "--logs", str(logs), "--out",
                                      str(tmp_path / method), "--current", "3",
                                      "--candidates", "1,3,5", "--method", method])
        assert cli.run(a, spark) == 0
        out = capsys.readouterr().out
        assert f"whatif ({method}): rule: smallest suspect_timeout whose worst-case " \
               "false-removal rate is <= 0.05 and whose detection delay is <= 30 s" in out
        assert "recommended suspect_timeout: 5.0 s -> notify serve --suspect-timeout 5" in out
        lines = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines()
                 if ln.startswith(("  current", "  recommended"))}
        if method == "replay":  # 3 joins; at 3 s: a's removal, b's removal and rejoin
            assert lines["current"][:4] == ["3", "6", str(1 + 2 + 3 + 2 + 1 + 2), "1"]
            assert lines["recommended"][:4] == ["5", "4", str(1 + 2 + 3 + 2), "0"]
