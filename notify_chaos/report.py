"""The report of a chaos run: `report.json` and `report.html` (seed 004's Table 3 and Fig. 11).

Times are seconds from t=0 (the moment publishers start). For each action three windows:
`before` = [start − L, start), `during` = [start, end), `after` = [end, end + L), with
L = the action's duration, shortened where the run does not have that much time before the
start or after the end (then `before` and `after` are still equal: both are shortened). Each
window has:

- `publisher`: acknowledged publishes per second and MB/s (by the time of the ack), and
  `errors` (publishes that failed: timeouts, refusals, full queues; by the time of the failure);
- `subscriber`: deliveries per second and MB/s summed over subscribers (by receive time), and
  `disconnects` (connections the clients lost);
- `latency_s`: p50 / p99 / max of (receive time − publish call time) of the deliveries in it,
  queueing in the SDK while the server is away included: what the application sees.

`recovery_s`: from the fault's end to the first delivery after it from which the subscribers'
deliveries over the next second reach 90 % of the `before` rate (null if that never happened
before publishing stopped). For `kill` the fault ends when the restart is issued, so the
node's start-up time is part of the recovery. Payload MB are the payload's padding
bytes (`size`), 10^6 bytes per MB.

`takeover` (cluster faults on an owner, issue 32): for every group of the run, the time from
the fault (the `victim` event, just before the SIGKILL or SIGSTOP) until a publish *made after
it* to that group is answered (`published`): when the group serves again, on the new owner for
the groups whose shard the victim held (`owned`). The summary compares the victim's groups
with 2 × `lease_ttl` (DESIGN §9: publishing resumes within 2 × the lease TTL).

`slis` (a scenario with `probe:`, issue 33): per action and per SLI of `notify probe`, the
good/total ratio in each of the three windows (read the SLI's deadline later: the prober
counts a bad event when its deadline passes), whether it `dropped` during the fault and
`recovered` after (`notify_chaos.probe.sli_phases`); `probe` sums it up: `moved` lists the SLIs
that dropped and recovered at every fault, `shows_fault` is true when one did.
"""

from __future__ import annotations

import bisect
import html
import json
import math
from pathlib import Path
from typing import Any

from notify_chaos.probe import SLIS, read_samples, sli_lines, sli_phases
from notify_chaos.scenario import Scenario
from notify_chaos.verdict import RULES, log_files, read_jsonl, view_change_lines

BIN = 0.5  # seconds per timeline bin


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


class Series:
    """Timestamped samples (seconds from t=0), sorted, with range counts."""

    def __init__(self, items: list[tuple[float, float]]) -> None:
        items.sort()
        self.t = [x for x, _ in items]
        self.v = [y for _, y in items]

    def slice(self, a: float, b: float) -> list[float]:
        return self.v[bisect.bisect_left(self.t, a):bisect.bisect_left(self.t, b)]

    def count(self, a: float, b: float) -> int:
        return bisect.bisect_left(self.t, b) - bisect.bisect_left(self.t, a)


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def collect(out: Path) -> dict[str, Any]:
    run = json.loads((out / "run.json").read_text())
    t0 = run["t0"]
    events, _ = read_jsonl(log_files(out / "logs", "events-"))
    acks, _ = read_jsonl(log_files(out / "acks", "acks-"))
    subs = [e for e in events if e.get("event") == "client.deliver"
            and str(e.get("node", "")).startswith("subscriber-")]
    return {
        "t0": t0,
        "acks": acks,
        "acked": Series([(a["ts"] - t0, float(a.get("b", 0) or 0)) for a in acks
                         if "offset" in a]),
        "errors": Series([(a["ts"] - t0, 1.0) for a in acks if "error" in a]),
        "delivered": Series([(d["recv_ts"] - t0, float(d.get("bytes") or 0)) for d in subs]),
        "latency": Series([(d["recv_ts"] - t0, d["recv_ts"] - d["sent_ts"]) for d in subs
                           if d.get("sent_ts") is not None]),
        "disconnects": Series([(e["ts"] - t0, 1.0) for e in events
                               if e.get("event") == "client.disconnect"]),
        "run": run,
    }


def window(c: dict[str, Any], a: float, b: float, size: int) -> dict[str, Any]:
    span = max(b - a, 1e-9)
    n_ack = c["acked"].count(a, b)
    n_del = c["delivered"].count(a, b)
    lat = c["latency"].slice(a, b)
    return {
        "from_s": _r(a, 3), "to_s": _r(b, 3),
        "publisher": {"msg_s": _r(n_ack / span, 2), "mb_s": _r(n_ack * size / span / 1e6, 5),
                      "errors": c["errors"].count(a, b)},
        "subscriber": {"msg_s": _r(n_del / span, 2), "mb_s": _r(n_del * size / span / 1e6, 5),
                       "disconnects": c["disconnects"].count(a, b)},
        "latency_s": {"p50": _r(_pct(lat, 0.5)), "p99": _r(_pct(lat, 0.99)),
                      "max": _r(max(lat) if lat else None)},
    }


def recovery(c: dict[str, Any], end: float, before_rate: float, stop: float) -> float | None:
    """From `end` to the first delivery after it that starts a second with ≥ 90 % of the
    `before` rate of deliveries."""
    if before_rate <= 0:
        return 0.0
    d: Series = c["delivered"]
    for t in d.t[bisect.bisect_left(d.t, end):]:
        if t + 1.0 > stop + 1e-9:
            break
        if d.count(t, t + 1.0) >= 0.9 * before_rate:
            return round(t - end, 3)
    return None


def takeover(c: dict[str, Any], victim: dict[str, Any], groups: list[str],
             bound: float) -> dict[str, Any]:
    """Per group: seconds from the fault (`victim["ts"]`) to the answer of the first publish
    made after it; null when no publish made after it was answered."""
    fault = float(victim["ts"])
    first: dict[str, float] = {}
    for a in c["acks"]:
        if "offset" in a and a.get("sent_ts", 0.0) >= fault:
            g = a["group"]
            first[g] = min(first.get(g, math.inf), a["ts"] - fault)
    owned = set(victim.get("groups") or ())
    per = {g: {"owned": g in owned, "serves_again_s": _r(first.get(g), 3)} for g in groups}
    times = [first[g] for g in groups if g in owned and g in first]
    others = [first[g] for g in groups if g not in owned and g in first]
    return {
        "victim": victim.get("node"), "fault_t": _r(fault - c["t0"], 3), "bound_s": bound,
        "owned": len(owned & set(groups)),
        "owned_served_again": len(times),
        "owned_within_bound": sum(1 for t in times if t <= bound),
        "owned_p50_s": _r(_pct(times, 0.5), 3), "owned_max_s": _r(max(times) if times else None, 3),
        "others_max_s": _r(max(others) if others else None, 3),
        "groups": per,
    }


def takeover_lines(rep: dict[str, Any]) -> list[str]:
    out = []
    for a in rep["actions"]:
        t = a.get("takeover")
        if not t:
            continue
        out.append(f"takeover after {a['label']} at t={t['fault_t']} s (victim {t['victim']}): "
                   f"{t['owned_served_again']} of its {t['owned']} groups served again, "
                   f"{t['owned_within_bound']} within 2 x lease TTL = {t['bound_s']:g} s; "
                   f"p50 {t['owned_p50_s']} s, max {t['owned_max_s']} s; the other groups' "
                   f"max {t['others_max_s']} s")
    return out


def build(out: Path, scenario: Scenario, verdict: dict[str, Any],
          failure: str | None = None) -> dict[str, Any]:
    c = collect(out)
    size = scenario.clients.publishers.size
    dur = scenario.duration
    actions = []
    victims: dict[str, list[dict[str, Any]]] = {}
    for e in c["run"].get("events") or []:
        if e.get("event") == "victim" and e.get("node") is not None and "groups" in e:
            victims.setdefault(e["label"], []).append(e)
    groups = list(dict.fromkeys(scenario.clients.publishers.groups))
    samples = read_samples(out, c["t0"]) if scenario.probe is not None else []
    for i, a in enumerate(scenario.actions):
        L = min(a.duration, a.start, max(0.0, dur - a.end))
        if L <= 0:  # no room after: the window after the fault is the drain
            L = min(a.duration, a.start)
        before = window(c, a.start - L, a.start, size)
        during = window(c, a.start, a.end, size)
        after = window(c, a.end, a.end + L, size)
        actions.append({
            "index": i, "label": a.label, "target": a.target, "mode": a.mode,
            "params": a.params, "start_s": a.start, "duration_s": a.duration,
            "window_s": round(L, 3), "before": before, "during": during, "after": after,
            "recovery_s": recovery(c, a.end, before["subscriber"]["msg_s"] or 0.0, dur),
        })
        if scenario.probe is not None:
            actions[-1]["slis"] = sli_phases(samples, scenario.probe, {
                "before": (a.start - L, a.start), "during": (a.start, a.end),
                "after": (a.end, a.end + L)})
        if a.mode in ("kill-owner", "pause-owner") and victims.get(a.label):
            actions[-1]["takeover"] = takeover(c, victims[a.label].pop(0), groups,
                                               2 * scenario.system.lease_ttl)
    report = {
        "scenario": scenario.name, "description": scenario.description,
        "store": scenario.system.store, "duration_s": dur,
        "clients": {"publishers": scenario.clients.publishers.count,
                    "subscribers": scenario.clients.subscribers.count,
                    "rate_per_publisher": scenario.clients.publishers.rate, "size": size,
                    "order": scenario.clients.publishers.order,
                    "atomic": scenario.clients.publishers.atomic},
        "whole_run": window(c, 0.0, dur, size),
        "actions": actions,
        "verdict": verdict,
        "nodes": c["run"].get("nodes"),
        "links": c["run"].get("links"),
        "events": c["run"].get("events"),
        "failure": failure,
        **({"probe": probe_summary(actions, c["run"], len(samples))}
           if scenario.probe is not None else {}),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.html").write_text(render_html(report, c, scenario))
    return report


def probe_summary(actions: list[dict[str, Any]], run: dict[str, Any],
                  scrapes: int) -> dict[str, Any]:
    """The SLIs that dropped during every fault and recovered after it (`moved`)."""
    moved = []
    for sli in SLIS:
        if actions and all(a["slis"][sli]["dropped"] and a["slis"][sli]["recovered"]
                           for a in actions):
            moved.append(sli)
    info = run.get("probe") or {}
    return {"moved": moved, "shows_fault": bool(moved), "scrapes": scrapes,
            "scrape_errors": info.get("scrape_errors"), "targets": info.get("targets")}


# -- HTML -----------------------------------------------------------------------------------------


def _timeline(c: dict[str, Any], scenario: Scenario) -> list[dict[str, float | None]]:
    end = scenario.duration + scenario.drain
    last = max([*c["delivered"].t[-1:], *c["acked"].t[-1:], scenario.duration])
    end = min(end, last + BIN)
    rows = []
    t = -min(scenario.warmup, 1.0)
    while t < end:
        lat = c["latency"].slice(t, t + BIN)
        rows.append({"t": t, "pub": c["acked"].count(t, t + BIN) / BIN,
                     "sub": c["delivered"].count(t, t + BIN) / BIN,
                     "p50": _pct(lat, 0.5), "p99": _pct(lat, 0.99)})
        t += BIN
    return rows


def _svg(rows: list[dict[str, float | None]], scenario: Scenario) -> str:
    W, H, PAD = 900, 190, 50
    t_lo, t_hi = rows[0]["t"] or 0.0, (rows[-1]["t"] or 0.0) + BIN

    def x(t: float) -> float:
        return PAD + (t - t_lo) / max(t_hi - t_lo, 1e-9) * (W - 2 * PAD)

    def panel(keys: list[tuple[str, str, str]], title: str, unit: str, log: bool) -> str:
        vals = [r[k] for r in rows for k, _, _ in keys if r[k] is not None]
        hi = max([v for v in vals if v is not None] or [1.0]) or 1.0
        lo = min([v for v in vals if v is not None and v > 0] or [hi / 10]) if log else 0.0
        if log:
            lo = min(lo, hi / 10)

        def y(v: float) -> float:
            if log:
                v = max(v, lo)
                f = (math.log10(v) - math.log10(lo)) / max(math.log10(hi) - math.log10(lo), 1e-9)
            else:
                f = v / hi
            return H - 25 - f * (H - 45)

        parts = [f'<svg width="{W}" height="{H}" xmlns="http://www.w3.org/2000/svg" '
                 'style="font:11px sans-serif">']
        for a in scenario.actions:
            parts.append(f'<rect x="{x(a.start):.1f}" y="15" width="{x(a.end) - x(a.start):.1f}" '
                         f'height="{H - 40}" fill="#f4a6a6" opacity="0.35">'
                         f'<title>{html.escape(a.label)}</title></rect>')
        parts.append(f'<rect x="{x(scenario.duration):.1f}" y="15" '
                     f'width="{max(0.0, W - PAD - x(scenario.duration)):.1f}" height="{H - 40}" '
                     'fill="#ddd" opacity="0.4"><title>drain</title></rect>')
        parts.append(f'<line x1="{PAD}" y1="{H - 25}" x2="{W - PAD}" y2="{H - 25}" '
                     'stroke="#333"/>')
        tick = 5 if t_hi - t_lo <= 60 else 10
        t = math.ceil(t_lo / tick) * tick
        while t <= t_hi:
            parts.append(f'<text x="{x(t):.1f}" y="{H - 10}" text-anchor="middle">{t:g}s</text>')
            t += tick
        parts.append(f'<text x="{PAD}" y="11">{html.escape(title)} (max {hi:.4g} {unit}'
                     f'{", log scale" if log else ""})</text>')
        for k, color, name in keys:
            segs: list[list[str]] = []
            cur: list[str] = []
            for r in rows:
                v = r[k]
                if v is None:
                    if cur:
                        segs.append(cur)
                    cur = []
                else:
                    cur.append(f"{x((r['t'] or 0.0) + BIN / 2):.1f},{y(v):.1f}")
            if cur:
                segs.append(cur)
            for s in segs:
                parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                             f'points="{" ".join(s)}"/>')
            parts.append(f'<text x="{W - PAD}" y="{11 + 12 * keys.index((k, color, name))}" '
                         f'text-anchor="end" fill="{color}">{html.escape(name)}</text>')
        parts.append("</svg>")
        return "".join(parts)

    return (panel([("pub", "#1f77b4", "publisher acks/s"), ("sub", "#2ca02c",
                                                              "subscriber deliveries/s")],
                  "throughput", "msg/s", False)
            + "<br>" + panel([("p50", "#9467bd", "latency p50"), ("p99", "#d62728",
                                                                   "latency p99")],
                             "latency", "s", True))


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return html.escape(str(v))


def table3(report: dict[str, Any]) -> list[list[str]]:
    """Seed 004's Table 3 layout, one row per action: publisher MB/s, subscriber MB/s and
    latency (p50, p99) normal (before) / faulty (during) / after, and recovery."""
    rows = []
    for a in report["actions"]:
        b, d, af = a["before"], a["during"], a["after"]
        rows.append([a["label"],
                     *(_fmt(w["publisher"]["mb_s"]) for w in (b, d, af)),
                     *(_fmt(w["subscriber"]["mb_s"]) for w in (b, d, af)),
                     *(f'{_fmt(w["latency_s"]["p50"])} / {_fmt(w["latency_s"]["p99"])}'
                       for w in (b, d, af)),
                     _fmt(a["recovery_s"])])
    return rows


def markdown_rows(report: dict[str, Any]) -> list[str]:
    """The docs' results table (docs/chaos.md): one Markdown row per action."""
    v = report["verdict"]
    storm = (v.get("view_changes") or {}).get("unexplained", {}).get("count", 0)
    verdict = "ok" if v["ok"] else "**fails**: " + ", ".join(
        [f"{k} {v[k]['count']}" for k in RULES if v.get(k, {}).get("count")]
        + ([f"unexplained view changes {storm}"] if storm else []))
    rows = []
    for a in report["actions"]:
        b, d, af = a["before"], a["during"], a["after"]
        pub = " → ".join(_fmt(w["publisher"]["mb_s"]) for w in (b, d, af))
        sub = " → ".join(_fmt(w["subscriber"]["mb_s"]) for w in (b, d, af))
        lat = [f'{_fmt(w["latency_s"]["p50"])} / {_fmt(w["latency_s"]["p99"])}'
               for w in (b, d, af)]
        rows.append(f'| {report["scenario"]} | {a["label"]} | {pub} | {sub} | {lat[0]} | '
                    f'{lat[1]} | {lat[2]} | {_fmt(a["recovery_s"])} | '
                    f'{d["publisher"]["errors"]} | {verdict} |')
    return rows


MARKDOWN_HEAD = ("| scenario | action | publisher MB/s before → during → after | subscriber MB/s "
                 "before → during → after | latency p50 / p99 s, before | during | after | "
                 "recovery s | publish errors during | verdict |\n"
                 "|---|---|---|---|---|---|---|---|---|---|")

TABLE3_HEAD = ["action", "pub MB/s before", "during", "after", "sub MB/s before", "during",
               "after", "latency p50/p99 s before", "during", "after", "recovery s"]


def render_html(report: dict[str, Any], c: dict[str, Any], scenario: Scenario) -> str:
    v = report["verdict"]
    rows = _timeline(c, scenario)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in TABLE3_HEAD)
    body = "".join("<tr>" + "".join(f"<td>{x}</td>" for x in r) + "</tr>"
                   for r in table3(report))
    detail = []
    for a in report["actions"]:
        for wname in ("before", "during", "after"):
            w = a[wname]
            detail.append(
                f"<tr><td>{html.escape(a['label'])}</td><td>{wname}</td>"
                f"<td>{_fmt(w['from_s'])}-{_fmt(w['to_s'])}</td>"
                f"<td>{_fmt(w['publisher']['msg_s'])}</td><td>{_fmt(w['subscriber']['msg_s'])}</td>"
                f"<td>{_fmt(w['latency_s']['p50'])}</td><td>{_fmt(w['latency_s']['p99'])}</td>"
                f"<td>{_fmt(w['latency_s']['max'])}</td><td>{w['publisher']['errors']}</td>"
                f"<td>{w['subscriber']['disconnects']}</td></tr>")
    cats = []
    for k in RULES:
        ex = "".join(f"<li>{html.escape(e)}</li>" for e in v[k]["examples"])
        cats.append(f"<tr><td>{k}</td><td>{v[k]['count']}</td><td><ul>{ex}</ul></td></tr>")
    views = ("<pre>" + html.escape("\n".join(view_change_lines(v["view_changes"])))
             + "</pre>") if "view_changes" in v else ""
    taken = takeover_lines(report) + sli_lines(report)
    if taken:
        views += "<pre>" + html.escape("\n".join(taken)) + "</pre>"
    status = "OK" if v["ok"] else "VIOLATIONS"
    color = "#2ca02c" if v["ok"] else "#d62728"
    fail = (f"<p style='color:#d62728'>run failed: {html.escape(report['failure'])}</p>"
            if report.get("failure") else "")
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>notify-chaos: {html.escape(str(report['scenario']))}</title>
<style>body{{font:14px sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right;vertical-align:top}}
td:first-child{{text-align:left}} ul{{margin:0;padding-left:1.2em;text-align:left}}</style>
</head><body>
<h1>notify-chaos: {html.escape(str(report['scenario']))}</h1>
<p>{html.escape(report['description'])}</p>
<p>store {report['store']}, {report['clients']['publishers']} publishers x
{report['clients']['rate_per_publisher']:g} msg/s x {report['clients']['size']} B
({report['clients']['order']}{', atomic' if report['clients']['atomic'] else ''}),
{report['clients']['subscribers']} subscribers, {report['duration_s']:g} s.</p>
{fail}
<h2>Verdict: <span style="color:{color}">{status}</span></h2>
<table><tr><th>check</th><th>count</th><th>examples</th></tr>{''.join(cats)}</table>
<p>checked: {html.escape(json.dumps(v['checked']))}</p>
{views}
<h2>Timeline</h2>
<p>Fault windows shaded red, the drain after publishing grey (seed 004, Fig. 11).</p>
{_svg(rows, scenario) if rows else ''}
<h2>Before / during / after each fault (seed 004, Table 3)</h2>
<table><tr>{head}</tr>{body}</table>
<h3>Windows</h3>
<table><tr><th>action</th><th>window</th><th>t (s)</th><th>pub msg/s</th><th>sub msg/s</th>
<th>p50 s</th><th>p99 s</th><th>max s</th><th>publish errors</th><th>disconnects</th></tr>
{''.join(detail)}</table>
</body></html>
"""
