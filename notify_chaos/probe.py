"""The prober beside the faults (issue 33): `notify probe` as one more process of the run, its
`/metrics` scraped into the run's output, and its SLIs read per phase of each fault.

Theory of operation. A scenario with a `probe:` section gets one `notify probe` process
(`ProbeProc`), started once the nodes listen and before the clients, so that it has settled by
t=0. It probes every node named in `probe.targets` (default: all), each through a `LinkProxy`
of its own (`probe->node-N`): a link mode on a node target (`node-1`) reaches it as it reaches
the clients, a link mode on `clients` or a client does not. It is its own process group and
stopped by PID with the run, like every other process (`run.json`'s `pids`).

`Sampler` scrapes `http://127.0.0.1:PORT/metrics` every `probe.scrape_every` and appends one
line per scrape to `probe/metrics.jsonl`: the time, and per SLI the `_total` and `_good_total`
counters summed over targets and paths (and per target). Nothing accumulates in memory but
the last scrape's text (`probe/last-metrics.txt` at the end). A scrape that fails is a line
with `error`; a prober that exits on its own is noted in `run.json` (`probe.exit`) and the
sampler stops.

Reading it (`sli_phases`): counters are read at a window's edges, each interpolated linearly
between the scrapes around it. The prober counts an event when it *settles*: a good one when
its answer comes (within the SLI's deadline of the publish, milliseconds while all is well), a
bad one when that deadline passes (`lag`: `latency_threshold` for delivery, `publish_deadline`
for publish, ...; `LAG`). Read as they settle, a fault's bad events would spill a deadline into
the window after it. So an SLI's window [a, b) counts the good events that settled in [a, b)
and the bad ones that settled in [a + lag, b + lag): each event at about the time it was
published. What is left over: a good answer that came late (after a freeze, within its
deadline) counts in the window it came in, up to `lag` after its publish; a publish refused at
once (the prober had no session) is read `lag` early. Ratio = good / (good + bad).

`dropped`: the ratio during the fault is below the one before by more than `probe.tolerance`;
`recovered`: the ratio after is at most `tolerance` below the one before. Both are data for the
report, not assertions: a fault that does not touch the service shows `dropped: false`.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO, Any

from prometheus_client.parser import text_string_to_metric_families

from notify.probe.cli import SLI_SETTINGS, flag
from notify.probe.metrics import SLIS as PROBE_SLIS
from notify_chaos.procs import free_port, stop_process
from notify_chaos.scenario import Probe

#: the SLIs of notify/probe/metrics.py (`notify_probe_<sli>_total`, `_good_total`)
SLIS = tuple(PROBE_SLIS)

#: SLI -> the `Probe` field whose value is the longest an event of it takes to settle
LAG = {"publish": "publish_deadline", "delivery": "latency_threshold",
       "resume": "resume_deadline", "view_change": "view_change_threshold"}


class ProbeProc:
    """`python -m notify.cli probe URL... --metrics-port P` for the run."""

    def __init__(self, spec: Probe, urls: list[str], out: Path) -> None:
        self.spec, self.urls = spec, urls
        self.dir = out / "probe"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._err: IO[bytes] | None = None

    def command(self) -> list[str]:
        s = self.spec
        settings = [x for name in SLI_SETTINGS for x in (flag(name), f"{getattr(s, name):g}")]
        return [sys.executable, "-m", "notify.cli", "probe", *self.urls, "--group", s.group,
                *settings, "--metrics-port", str(self.port), "--log-level", "warning"]

    def start(self) -> None:
        self._err = open(self.dir / "probe.err", "wb")  # noqa: SIM115
        cmd = self.command()
        (self.dir / "command.json").write_text(json.dumps(cmd) + "\n")
        self.proc = subprocess.Popen(cmd, stdout=self._err, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode if self.proc is not None else None

    async def ready(self, timeout: float = 30.0) -> None:
        """Until its `/metrics` answers (the endpoint is up before the first session opens)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise RuntimeError(f"notify probe exited with {self.returncode} at start; see "
                                   f"{self.dir / 'probe.err'}")
            with contextlib.suppress(OSError):
                await asyncio.to_thread(self.scrape, 1.0)
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"notify probe's /metrics did not answer within {timeout:g} s")

    def scrape(self, timeout: float) -> str:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return bytes(r.read()).decode()

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 5)
        if self._err is not None:
            self._err.close()
            self._err = None


def parse(text: str) -> dict[str, Any]:
    """Per SLI `[total, good]` summed over targets and paths, and per target."""
    sums = {sli: [0.0, 0.0] for sli in SLIS}
    per: dict[str, dict[str, list[float]]] = {}
    names = {f"notify_probe_{sli}{suffix}_total": (sli, k)
             for sli in SLIS for k, suffix in ((0, ""), (1, "_good"))}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            hit = names.get(s.name)
            if hit is None:
                continue
            sli, k = hit
            sums[sli][k] += s.value
            target = s.labels.get("target", "")
            per.setdefault(target, {x: [0.0, 0.0] for x in SLIS})[sli][k] += s.value
    return {"slis": sums, "by_target": per}


class Sampler:
    """Scrapes the prober every `every` seconds into `probe/metrics.jsonl` until cancelled."""

    def __init__(self, proc: ProbeProc, every: float, note: Any) -> None:
        self.proc, self.every, self.note = proc, every, note
        self.path = proc.dir / "metrics.jsonl"
        self.samples = 0
        self.errors = 0
        self._last: str | None = None

    async def run(self) -> None:
        """Scrape until cancelled, or until the prober exits (noted `probe.exit`). An error the
        loop does not expect is noted (`probe.sampler_failed`: the report's later windows have
        no scrapes) before it escapes to the runner, which only gathers this task."""
        try:
            await self._scrape()
        except Exception as e:
            self.note("probe.sampler_failed", error=f"{type(e).__name__}: {e}")
            raise

    async def _scrape(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        with open(self.path, "a") as f:
            while True:
                ts = time.time()
                line: dict[str, Any] = {"ts": ts}
                try:
                    text = await asyncio.to_thread(self.proc.scrape, max(0.5, self.every))
                    line.update(parse(text))
                    self._last = text
                    self.samples += 1
                except (OSError, ValueError) as e:
                    line["error"] = f"{type(e).__name__}: {e}"
                    self.errors += 1
                f.write(json.dumps(line) + "\n")
                f.flush()
                if not self.proc.running():
                    self.note("probe.exit", code=self.proc.returncode)
                    return
                due += self.every
                await asyncio.sleep(max(0.0, due - loop.time()))

    def finish(self) -> None:
        if self._last is not None:
            (self.proc.dir / "last-metrics.txt").write_text(self._last)


# -- reading: the SLIs per phase -------------------------------------------------------------


def read_samples(out: Path, t0: float) -> list[tuple[float, dict[str, list[float]]]]:
    """(seconds from t=0, per SLI [total, good]) of every scrape that answered, in time order."""
    path = out / "probe" / "metrics.jsonl"
    rows: list[tuple[float, dict[str, list[float]]]] = []
    if not path.exists():
        return rows
    for line in path.read_bytes().splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            r = json.loads(line)
            if "slis" in r:
                rows.append((float(r["ts"]) - t0, r["slis"]))
    rows.sort(key=lambda x: x[0])
    return rows


def _at(rows: list[tuple[float, dict[str, list[float]]]], sli: str,
        t: float) -> tuple[float, float] | None:
    """The (total, good) counters of `sli` at time t, interpolated between the scrapes around
    it; None outside the scraped span."""
    i = bisect.bisect_right(rows, t, key=lambda r: r[0])
    if i == 0 or t > rows[-1][0]:
        return None
    a_t, row = rows[i - 1]
    a = row.get(sli, [0.0, 0.0])  # (an SLI not in a scrape has counted nothing yet)
    if i == len(rows) or a_t == t:
        return a[0], a[1]
    b_t, row = rows[i]
    b = row.get(sli, [0.0, 0.0])
    f = (t - a_t) / (b_t - a_t)
    return a[0] + f * (b[0] - a[0]), a[1] + f * (b[1] - a[1])


def ratio(rows: list[tuple[float, dict[str, list[float]]]], sli: str, a: float, b: float,
          lag: float = 0.0) -> dict[str, Any]:
    """The SLI over [a, b): the good events that settled in it, the bad ones that settled in
    [a + lag, b + lag), and good / (good + bad); null when there were none, or when the window
    is not inside the scraped span."""
    lo, hi = _at(rows, sli, a), _at(rows, sli, b)
    lo_bad, hi_bad = _at(rows, sli, a + lag), _at(rows, sli, b + lag)
    if lo is None or hi is None or lo_bad is None or hi_bad is None:
        return {"from_s": round(a, 3), "to_s": round(b, 3), "good": None, "bad": None,
                "ratio": None}
    good = max(0.0, hi[1] - lo[1])  # (counters only grow; interpolation may go -1e-15)
    bad = max(0.0, (hi_bad[0] - hi_bad[1]) - (lo_bad[0] - lo_bad[1]))
    total = good + bad
    return {"from_s": round(a, 3), "to_s": round(b, 3), "good": round(good, 1),
            "bad": round(bad, 1), "ratio": round(good / total, 4) if total >= 0.5 else None}


def sli_phases(rows: list[tuple[float, dict[str, list[float]]]], spec: Probe,
               windows: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """Per SLI: its ratio in each of the action's windows (the bad events read `lag` later),
    `dropped` and `recovered` (null when a window has no events)."""
    out: dict[str, Any] = {}
    for sli in SLIS:
        lag = float(getattr(spec, LAG[sli]))
        phases = {name: ratio(rows, sli, a, b, lag) for name, (a, b) in windows.items()}
        r = {name: p["ratio"] for name, p in phases.items()}
        dropped = recovered = None
        if r["before"] is not None and r["during"] is not None:
            dropped = r["during"] < r["before"] - spec.tolerance
        if r["before"] is not None and r["after"] is not None:
            recovered = r["after"] >= r["before"] - spec.tolerance
        out[sli] = {"lag_s": lag, **phases, "dropped": dropped, "recovered": recovered}
    return out


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def sli_lines(report: dict[str, Any]) -> list[str]:
    """The SLIs per fault in words, and the overall line (`probe.shows_fault`)."""
    p = report.get("probe")
    if not p:
        return []
    out = []
    for a in report["actions"]:
        slis = a.get("slis")
        if not slis:
            continue
        parts = []
        for sli, s in slis.items():
            if s["before"]["ratio"] is None and s["during"]["ratio"] is None:
                continue  # (no events: e.g. resume with no deliberate reconnects)
            word = ("dropped" if s["dropped"] else "held" if s["dropped"] is False else "?")
            word += (", recovered" if s["recovered"] else ", not recovered"
                     if s["recovered"] is False else ", ?")
            parts.append(f"{sli} {_f(s['before']['ratio'])} -> {_f(s['during']['ratio'])} -> "
                         f"{_f(s['after']['ratio'])} ({word})")
        out.append(f"SLIs good/total before -> during -> after {a['label']}: "
                   + ("; ".join(parts) or "no probe events"))
    shown = p.get("shows_fault")
    moved = ", ".join(p.get("moved") or []) or "none"
    out.append("SLIs: " + ("dropped during every fault and recovered after" if shown
                           else "did NOT drop and recover at every fault")
               + f" (SLIs that did at every fault: {moved}; scrapes {p['scrapes']}, "
               f"failed {p['scrape_errors']})")
    return out
