"""report: one self-contained HTML page (tables + matplotlib PNGs) from the jobs' results.

Works from the collected rows of `JobResult`s (all aggregates, small), so it needs no Spark.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from spark_analysis.common import JobResult
from spark_analysis.schema import SCHEMA_VERSION

_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;
font-size:13px;text-align:right}th{background:#f0f0f0}td.l{text-align:left}
.bad{color:#b00;font-weight:bold}.ok{color:#070;font-weight:bold}img{max-width:100%}
h2{border-bottom:2px solid #ddd;margin-top:2em}"""


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {x}" for k, x in v.items())
    return "" if v is None else str(v)


def table(rows: list[dict[str, Any]], limit: int = 50) -> str:
    if not rows:
        return "<p><i>(no rows)</i></p>"
    cols = list(rows[0])
    out = ["<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>"]
    for r in rows[:limit]:
        out.append("<tr>" + "".join(
            f"<td{' class=l' if isinstance(r[c], str) else ''}>{html.escape(_fmt(r[c]))}</td>"
            for c in cols) + "</tr>")
    out.append("</table>")
    if len(rows) > limit:
        out.append(f"<p><i>{len(rows) - limit:,} more rows in the Parquet table</i></p>")
    return "".join(out)


def _kv(d: dict[str, Any]) -> str:
    return table([{"field": k, "value": v} for k, v in d.items()], 100)


def _save(fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def plot_gaps(churn: JobResult, whatif: JobResult | None, d: Path) -> str | None:
    rows = churn.rows.get("gap_hist") or []
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(9, 4))
    labels = [r["bucket"] for r in rows]
    ax.bar(range(len(rows)), [r["gaps"] for r in rows], color="#4c72b0")
    ax.set_xticks(range(len(rows)), labels, rotation=30, ha="right")
    ax.set_ylabel("disconnect gaps")
    ax.set_xlabel("gap length (disconnect → reconnect)")
    title = f"Disconnect gaps ({churn.summary.get('gap_source')} logs)"
    if whatif and whatif.summary.get("recommended_suspect_timeout_s") is not None:
        rec = whatif.summary["recommended_suspect_timeout_s"]
        title += f" — recommended suspect_timeout {rec:g} s"
    ax.set_title(title)
    for i, r in enumerate(rows):
        ax.annotate(str(r["gaps"]), (i, r["gaps"]), ha="center", va="bottom", fontsize=8)
    return _save(fig, d / "gaps.png")


def plot_whatif(whatif: JobResult, d: Path) -> str | None:
    rows = whatif.rows.get("candidates") or []
    if not rows:
        return None
    t = [r["timeout_s"] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(t, [r["view_changes"] for r in rows], "o-", color="#c44e52",
            label="view changes the gaps cause")
    ax.set_xscale("log")
    ax.set_xlabel("candidate suspect_timeout (s, log scale)")
    ax.set_ylabel("view changes", color="#c44e52")
    ax2 = ax.twinx()
    ax2.plot(t, [r["ghost_member_s"] for r in rows], "s--", color="#55a868",
             label="ghost member-seconds (members gone x min(delay, seen away))")
    ax2.set_ylabel("ghost member-seconds", color="#55a868")
    rec = whatif.summary.get("recommended_suspect_timeout_s")
    if rec is not None:
        ax.axvline(rec, color="#333", linestyle=":", label=f"recommended {rec:g} s")
    cur = whatif.summary.get("current_suspect_timeout_s")
    if cur is not None:
        ax.axvline(cur, color="#8172b2", linestyle="-.", label=f"current {cur:g} s")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper center")
    ax.set_title("What-if: view changes vs detection delay per suspect_timeout")
    return _save(fig, d / "whatif.png")


def plot_latency(delivery: JobResult, d: Path) -> str | None:
    rows = delivery.rows.get("latency") or []
    if not rows:
        return None
    names = ("p50", "p95", "p99", "p999", "max")
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(rows)
    for i, r in enumerate(rows):
        label = f"{r['order']}{' atomic' if r['atomic'] else ''} (n={r['count']:,})"
        ax.bar([x + i * width for x in range(len(names))],
               [max(r[n] or 0.0, 1e-3) for n in names], width, label=label)
    ax.set_xticks([x + width * (len(rows) - 1) / 2 for x in range(len(names))],
                  ["p50", "p95", "p99", "p99.9", "max"])
    ax.set_yscale("log")
    ax.set_ylabel("end-to-end latency (ms, log scale)")
    ax.set_title("Delivery latency (client recv_ts - sent_ts) by order and atomicity")
    ax.legend(fontsize=8)
    return _save(fig, d / "latency.png")


def plot_throughput(delivery: JobResult, d: Path) -> str | None:
    rows = delivery.rows.get("throughput") or []
    if not rows:
        return None
    t0 = rows[0]["t"]
    b = delivery.summary.get("throughput_bucket_s", 1.0)
    x = [r["t"] - t0 for r in rows]
    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.plot(x, [r["accepted"] / b for r in rows], label="accepted by the server")
    ax.plot(x, [r["delivered"] / b for r in rows], label="delivered at clients", alpha=.8)
    ax.set_xlabel("seconds since the log starts")
    ax.set_ylabel("messages / s")
    ax.set_title("Throughput over time")
    ax.legend(fontsize=8)
    return _save(fig, d / "throughput.png")


def plot_views(churn: JobResult, d: Path) -> str | None:
    rows = churn.rows.get("view_changes") or []
    if not rows:
        return None
    per: dict[str, int] = {}
    for r in rows:
        per[r["group"]] = per.get(r["group"], 0) + r["installs"]
    top = sorted(per.items(), key=lambda kv: -kv[1])[:25]
    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.bar([g for g, _ in top], [n for _, n in top], color="#8172b2")
    ax.set_ylabel("view installs")
    ax.set_title(f"View changes per group (top {len(top)} of {len(per)})")
    ax.tick_params(axis="x", rotation=45, labelsize=8)
    return _save(fig, d / "views.png")


def render(results: dict[str, JobResult], out: str | Path, *, bad_lines: dict[str, int],
           logs: str) -> Path:
    d = Path(out) / "report"
    d.mkdir(parents=True, exist_ok=True)
    churn, deliv = results.get("churn"), results.get("delivery")
    chk, wi = results.get("check"), results.get("whatif")
    parts = ["<!doctype html><meta charset=utf-8><title>notify delivery analysis</title>",
             f"<style>{_STYLE}</style><h1>Delivery analysis</h1>",
             f"<p>Logs: <code>{html.escape(logs)}</code> · schema {SCHEMA_VERSION} · "
             f"bad lines: {sum(bad_lines.values()):,} {html.escape(json.dumps(bad_lines))}</p>"]

    def img(name: str | None, caption: str) -> None:
        if name:
            parts.append(f"<figure><img src='{name}' alt='{html.escape(caption)}'>"
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")

    if chk is not None:
        n = len(chk.rows.get("violations", []))
        cls, word = ("bad", f"{n:,} violation(s)") if n else ("ok", "no violations")
        parts.append(f"<h2>Guarantee check (G2-G8)</h2><p class={cls}>{word}</p>")
        parts.append(_kv(chk.summary))
        parts.append(table(chk.rows.get("violations", []), 200))
    if wi is not None:
        parts.append("<h2>What-if: suspect_timeout</h2>")
        s = wi.summary
        if s.get("server_option"):
            parts.append(f"<p>Recommendation: <code>{html.escape(s['server_option'])}</code> "
                         f"(rule: {html.escape(str(s.get('rule')))})</p>")
        img(plot_whatif(wi, d), f"View changes the logged history would cause "
                                f"(method: {html.escape(str(s.get('method')))}), and the time a "
                                "member that never returns stays in the view, per timeout.")
        parts.append(_kv(s))
        parts.append(table(wi.rows.get("candidates", [])))
    if churn is not None:
        parts.append("<h2>Churn</h2>")
        img(plot_gaps(churn, wi, d), "How long members were away, and how many never came back.")
        img(plot_views(churn, d), "View installs per group over the whole log.")
        parts.append(_kv(churn.summary))
        parts.append("<h3>users</h3><p>Per group and user (issue 29): a user arrives with its "
                     "first instance in the view and leaves with its last, and is present while "
                     "any instance is; the <code>instance_</code> columns count the same per "
                     "instance (tab, device).</p>" + table(churn.rows.get("users", []), 30))
        for name in ("gap_percentiles", "gap_hist", "flapping", "view_changes", "sessions"):
            parts.append(f"<h3>{name}</h3>" + table(churn.rows.get(name, []), 30))
    if deliv is not None:
        parts.append("<h2>Delivery</h2>")
        img(plot_latency(deliv, d), "End-to-end latency percentiles per order and atomicity.")
        img(plot_throughput(deliv, d), "Messages accepted and delivered per second.")
        parts.append(_kv(deliv.summary))
        for name in ("latency", "atomic", "installs"):
            parts.append(f"<h3>{name}</h3>" + table(deliv.rows.get(name, [])))
    timings = {k: round(r.seconds, 2) for k, r in results.items()}
    parts.append(f"<p><small>job seconds: {html.escape(json.dumps(timings))}</small></p>")
    path = d / "index.html"
    path.write_text("\n".join(parts))
    return path
