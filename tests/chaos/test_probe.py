"""The prober beside the faults (issue 33): the `probe:` section, the reading of its scraped
counters per phase, and the shipped scenario end to end — its SLIs drop while node-1 is frozen
and recover after, and the same run with a fault that touches nothing shows no drop (the check
can fail)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from notify_chaos.probe import Sampler, parse, ratio, sli_phases
from notify_chaos.scenario import Probe, ScenarioError, loads
from tests.chaos.conftest import assert_all_stopped

SHIPPED = Path(__file__).parents[2] / "notify_chaos" / "scenarios" / "probe-pause-node.yaml"
CMD = [sys.executable, "-m", "notify_chaos.cli"]

BASE = """\
duration: 20s
clients:
  publishers: {count: 1, group: g1}
  subscribers: {count: 1, group: g1}
"""


def test_the_probe_section_parses_with_units_and_defaults() -> None:
    s = loads(BASE + "probe: {rate: 20, latency_threshold: 500ms, targets: [node-1]}\n")
    assert s.probe is not None
    assert (s.probe.rate, s.probe.latency_threshold, s.probe.publish_deadline) == (20, 0.5, 1.0)
    assert (s.probe.reconnect_every, s.probe.view_change_every) == (0.0, 0.0)
    assert loads(BASE).probe is None


@pytest.mark.parametrize(("probe", "where", "says"), [
    ("{rate: 0}", ":5: probe.rate", "greater than 0"),
    ("{targets: [subscriber-1]}", ":5: probe.targets", "not a node"),
    ("{targets: [node-2]}", ":5: probe.targets", "node-2 does not exist (1 nodes)"),
    ("{group: g1}", ":5: probe.group", "a group of the scenario's clients"),
    ("{scrape_every: 0s}", ":5: probe.scrape_every", "greater than or equal to 0.1"),
    ("{rate: 5, colour: red}", ":5: probe.colour", "Extra inputs"),
])
def test_a_bad_probe_section_is_refused_with_its_line(probe: str, where: str,
                                                      says: str) -> None:
    with pytest.raises(ScenarioError) as e:
        loads(BASE + f"probe: {probe}\n", "s.yaml")
    assert where in str(e.value) and says in str(e.value)


EXPOSITION = """\
# TYPE notify_probe_publish counter
notify_probe_publish_total{path="sdk",target="ws://a"} 10.0
notify_probe_publish_created{path="sdk",target="ws://a"} 1.7e9
notify_probe_publish_total{path="sdk",target="ws://b"} 5.0
# TYPE notify_probe_publish_good counter
notify_probe_publish_good_total{path="sdk",target="ws://a"} 9.0
notify_probe_publish_good_total{path="sdk",target="ws://b"} 5.0
# TYPE notify_probe_resume counter
notify_probe_resume_total{target="ws://a"} 2.0
"""


def test_parse_sums_each_sli_over_targets_and_paths() -> None:
    p = parse(EXPOSITION)
    assert p["slis"]["publish"] == [15.0, 14.0]
    assert p["slis"]["resume"] == [2.0, 0.0]
    assert p["slis"]["delivery"] == [0.0, 0.0]
    assert p["by_target"]["ws://b"]["publish"] == [5.0, 5.0]


def _rows(events: list[tuple[float, bool]], every: float, end: float
          ) -> list[tuple[float, dict[str, list[float]]]]:
    """Scrapes every `every` s of a delivery counter fed `(settle time, good)` events."""
    rows = []
    t = 0.0
    while t <= end:
        done = [g for s, g in events if s <= t]
        rows.append((t, {"delivery": [float(len(done)), float(sum(done))]}))
        t += every
    return rows


def test_bad_events_are_read_a_deadline_late_so_a_fault_shows_in_its_own_window() -> None:
    # 10 events/s published 0-30 s; those published in [10, 20) are not answered and are
    # counted bad when their deadline (1 s) passes; the others are good at once
    # (each at i/10 + 0.05 s: no event on a window's edge)
    events = [(i / 10 + 0.05 + (1.0 if 100 <= i < 200 else 0.0), not 100 <= i < 200)
              for i in range(300)]
    rows = _rows(events, 0.5, 32)
    spec = Probe(latency_threshold=1.0)
    d = sli_phases(rows, spec, {"before": (5, 10), "during": (10, 20), "after": (20, 25)})
    d = d["delivery"]
    assert (d["before"]["ratio"], d["during"]["ratio"], d["after"]["ratio"]) == (1.0, 0.0, 1.0)
    assert d["dropped"] is True and d["recovered"] is True
    # read as they settle, the fault's last second of bad events would fall into `after`
    assert ratio(rows, "delivery", 20, 25)["ratio"] == pytest.approx(50 / 60, abs=1e-3)
    # no fault: nothing dropped
    ok = _rows([(i / 10 + 0.05, True) for i in range(300)], 0.5, 32)
    d = sli_phases(ok, spec, {"before": (5, 10), "during": (10, 20), "after": (20, 25)})
    assert d["delivery"]["dropped"] is False and d["delivery"]["recovered"] is True
    assert d["resume"]["dropped"] is None  # (no such events: neither)


class _Prober:
    """A `ProbeProc` stand-in: each scrape answers `answers`' next item (raised if an
    exception); it runs until they are used up, then has exited with code 3."""

    def __init__(self, d: Path, answers: list[str | Exception]) -> None:
        self.dir, self.answers = d, answers

    def scrape(self, timeout: float) -> str:
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    def running(self) -> bool:
        return bool(self.answers)

    returncode = 3


async def test_the_sampler_writes_a_line_per_scrape_and_stops_when_the_prober_exits(
        tmp_path: Path) -> None:
    notes: list[tuple[str, dict[str, Any]]] = []
    proc = _Prober(tmp_path, [EXPOSITION, ConnectionRefusedError("refused")])
    sampler = Sampler(proc, 0.1, lambda what, **kw: notes.append((what, kw)))  # type: ignore[arg-type]
    async with asyncio.timeout(5):
        await sampler.run()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [sorted(x) for x in lines] == [["by_target", "slis", "ts"], ["error", "ts"]]
    assert lines[0]["slis"]["publish"] == [15.0, 14.0]
    assert lines[1]["error"] == "ConnectionRefusedError: refused"
    assert (sampler.samples, sampler.errors) == (1, 1)
    assert notes == [("probe.exit", {"code": 3})]


async def test_a_sampler_that_fails_says_so_before_the_error_escapes(tmp_path: Path) -> None:
    notes: list[tuple[str, dict[str, Any]]] = []
    proc = _Prober(tmp_path, [EXPOSITION, RuntimeError("a sampler bug"), EXPOSITION])
    sampler = Sampler(proc, 0.1, lambda what, **kw: notes.append((what, kw)))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        async with asyncio.timeout(5):
            await sampler.run()
    assert notes == [("probe.sampler_failed", {"error": "RuntimeError: a sampler bug"})]


# -- end to end ---------------------------------------------------------------------------


def _run(scenario: Path, out: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    started = time.monotonic()
    r = subprocess.run([*CMD, "run", str(scenario), "--out", str(out)], capture_output=True,
                       text=True, timeout=80)
    elapsed = time.monotonic() - started
    run = json.loads((out / "run.json").read_text())
    probe_pid = run["probe"]["pid"]
    assert probe_pid in run["pids"]
    assert_all_stopped(out)  # the prober stopped with the run
    assert r.returncode == 0, r.stdout + r.stderr
    assert elapsed < 60, elapsed
    return r, json.loads((out / "report.json").read_text())


@pytest.mark.integration
@pytest.mark.timeout(100)
def test_the_slis_drop_while_the_node_is_frozen_and_recover_after(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r, rep = _run(SHIPPED, out)
    (action,) = rep["actions"]
    assert action["mode"] == "pause"
    for sli in ("delivery", "publish"):
        s = action["slis"][sli]
        before, during, after = (s[w]["ratio"] for w in ("before", "during", "after"))
        assert before > 0.9 and after > 0.9, (sli, s)
        assert during < before - 0.3, (sli, s)
        assert s["dropped"] is True and s["recovered"] is True
    assert rep["probe"]["shows_fault"] is True
    assert {"delivery", "publish"} <= set(rep["probe"]["moved"])
    lines = (out / "probe" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) >= 30  # every 0.5 s from before t=0 to the end of the drain
    assert "SLIs: dropped during every fault and recovered after" in r.stdout


@pytest.mark.integration
@pytest.mark.timeout(100)
def test_with_a_fault_that_touches_nothing_the_slis_do_not_drop(tmp_path: Path) -> None:
    """The control: the same scenario with the pause made a 0 ms delay on node-1's links
    (the prober's included). The assertion above fails on it: nothing dropped."""
    text = SHIPPED.read_text()
    assert "mode: pause}" in text
    control = tmp_path / "control.yaml"
    control.write_text(text.replace("mode: pause}", "mode: delay, params: {ms: 0}}"))
    r, rep = _run(control, tmp_path / "out")
    (action,) = rep["actions"]
    for sli in ("delivery", "publish"):
        s = action["slis"][sli]
        assert s["dropped"] is False, (sli, s)
        assert s["during"]["ratio"] > 0.9, (sli, s)
    assert rep["probe"]["shows_fault"] is False
    assert "did NOT drop and recover at every fault" in r.stdout
