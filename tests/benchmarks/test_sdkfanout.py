"""`bench.sdkfanout` in its smallest form: real processes (a server, 2 subscriber processes, a
publisher), notify FIFO through the SDK, the server API's publisher (`api`) and the bare relay,
a handful of messages. Checks the
shape of the result and that the exactly-once check holds and can fail; times nothing
(STYLE.md: benchmarks measure, tests do not)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from bench.sdkfanout import Harness, main_async, parse_args
from bench.sdkfanout_worker import Tracker

pytestmark = pytest.mark.integration


def _children() -> set[int]:
    """Live processes whose parent is this one."""
    me, out = os.getpid(), set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me and fields[0] != "Z":
            out.add(int(d.name))
    return out


async def test_tracker_counts_duplicates_missing_and_strays() -> None:
    t = Tracker(2)
    t.expect(base=10, count=3, lat=False)
    for n in (10, 11, 12):
        t.on(0, {"n": n, "t": 0})
    assert t.complete.is_set() is False  # member 1 has nothing yet
    t.on(1, {"n": 10, "t": 0})
    t.on(1, {"n": 10, "t": 0})  # a duplicate
    t.on(1, {"n": 99, "t": 0})  # not of this phase
    r = t.report(None)
    assert (r["got"], r["missing"], r["dup"], r["stray"]) == (4, 2, 1, 1)
    assert r["per_member"] == [3, 1]
    t.on(1, {"n": 11, "t": 0})
    t.on(1, {"n": 12, "t": 0})
    assert t.complete.is_set()


@pytest.mark.timeout(90)
async def test_quick_run_fifo_api_and_relay(tmp_path: Path) -> None:
    before = _children()
    a = parse_args(["--systems", "fifo,relay,api", "--api-window", "4", "--members", "4",
                    "--procs", "2", "--messages", "40", "--rates", "50", "--rate-duration", "0.4",
                    "--rounds", "1", "--window", "8", "--no-json", "--logdir", str(tmp_path)])
    res = await asyncio.wait_for(main_async(a), 80)
    assert set(res["runs"]) == {"fifo", "relay", "api"}
    for system, runs in res["runs"].items():
        assert len(runs) == 1
        r = runs[0]
        assert r["ok"], (system, r["failures"])
        assert (r["missing"], r["duplicates"], r["strays"]) == (0, 0, 0)
        b = r["burst"]
        assert b["messages"] == 40
        assert b["deliveries"] == b["expected"] == 40 * 4
        assert b["delivered_per_s"] > 0 and b["span_s"] > 0 and b["published_per_s"] > 0
        for k in ("server_cpu_s", "subs_cpu_s", "pub_cpu_s", "server_us_per_delivery",
                  "subs_us_per_delivery"):
            assert b[k] >= 0
        (rate,) = r["rates"]
        assert rate["rate"] == 50 and not rate["skipped"]
        assert rate["samples"] == rate["messages"] * 4 == 20 * 4
        assert 0 <= rate["p50_ms"] <= rate["p99_ms"] <= rate["p999_ms"] <= rate["max_ms"]
    assert set(res["summary"]) == {"fifo", "relay", "api"}
    assert res["summary"]["api"]["vs"] == "fifo"  # the API beside a member publishing
    assert res["summary"]["api"]["x_member_published_per_s"] > 0
    (api_rate,) = res["runs"]["api"][0]["rates"]
    assert 0 <= api_rate["answer_p50_ms"] <= api_rate["answer_p99_ms"]  # the calls' answers
    assert "fifo" in res["table"] and "relay" in res["table"] and "api " in res["table"]
    assert "api          vs fifo:" in res["table"]
    assert _children() <= before  # every server and worker process is gone


class OneShort(Harness):
    """Publishes one message fewer than the subscribers are told to expect, in every phase."""

    async def _start(self, port: int) -> None:
        await super()._start(port)
        assert self.pub is not None
        send = self.pub.send

        def one_less(obj: dict[str, Any]) -> None:
            if obj.get("cmd") in ("burst", "rate"):
                obj = {**obj, "count": obj["count"] - 1}
            send(obj)

        self.pub.send = one_less  # type: ignore[method-assign]


@pytest.mark.timeout(60)
async def test_a_missing_message_fails_the_run(tmp_path: Path) -> None:
    a = parse_args(["--systems", "relay", "--members", "2", "--procs", "2", "--messages", "10",
                    "--rates", "", "--rounds", "1", "--no-json"])
    before = _children()
    h = OneShort(a, "relay", tmp_path, 1)
    h.phase_timeout = 2.0
    run = await asyncio.wait_for(h.execute(), 50)
    assert not run.ok
    assert run.missing == 2 * 2  # both members lack the last message of both phases
    assert any("not exactly once" in f for f in run.failures)
    assert _children() <= before
