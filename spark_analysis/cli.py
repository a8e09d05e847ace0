"""`notify-analyze`: the Spark jobs over the delivery event logs (DESIGN §7).

    notify-analyze JOB --logs DIR --out DIR [--master URL]

JOB is `ingest` (validate and write the cleaned `events` Parquet table), `churn`, `delivery`,
`check` (exit 1 and list each violation if any guarantee is broken), `whatif` (recommend a
`suspect_timeout`), or `report` (all of them, and one HTML page with tables and plots).
`--logs` is a directory of JSONL event logs, or an `events` Parquet table from an earlier run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOBS = ("ingest", "churn", "delivery", "check", "whatif", "report")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="notify-analyze", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job", choices=JOBS)
    p.add_argument("--logs", required=True, help="JSONL log directory or events Parquet table")
    p.add_argument("--out", required=True, help="where Parquet tables, summaries, report go")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--shuffle-partitions", type=int, default=8)
    p.add_argument("--driver-memory", default=None, help="e.g. 4g (local mode: the whole JVM)")
    p.add_argument("--py-files", default=None,
                   help="comma-separated .whl/.zip/.py shipped to the executors (a cluster: "
                        "`whatif --method replay` runs the project's code there)")
    p.add_argument("--no-parquet", action="store_true",
                   help="do not write the cleaned events table (analyse the JSON directly)")
    g = p.add_argument_group("churn")
    g.add_argument("--flap-window", type=float, default=600.0, help="seconds (default 600)")
    g.add_argument("--flap-count", type=int, default=3, help="disconnects in the window")
    g = p.add_argument_group("delivery")
    g.add_argument("--bucket", type=float, default=1.0, help="throughput bucket, seconds")
    g = p.add_argument_group("whatif")
    g.add_argument("--candidates", default=None,
                   help="comma-separated suspect_timeout candidates in seconds")
    g.add_argument("--target", type=float, default=0.05,
                   help="acceptable share of returning gaps that cause a removal (default 0.05)")
    g.add_argument("--max-delay", type=float, default=30.0,
                   help="longest acceptable detection delay, seconds (default 30)")
    g.add_argument("--current", type=float, default=None,
                   help="the server's current suspect_timeout, for comparison")
    g.add_argument("--method", choices=("replay", "estimate"), default="replay",
                   help="replay each group's timeline through the real core (default), or the "
                        "fast closed-form estimate that counts each gap alone")
    g.add_argument("--flush-rtt", type=float, default=None,
                   help="replay: seconds a flush round trip takes (default: the median duration "
                        "of the logged changes proposed once, for joins only)")
    g.add_argument("--compiled", choices=("auto", "yes", "no"), default="auto",
                   help="replay with the core compiled by mypyc (`./dev compile`; about 30 %% "
                        "less CPU, the same results): auto (default) when it is built and "
                        "matches the sources, yes (or fail), no")
    g = p.add_argument_group("check")
    g.add_argument("--max-list", type=int, default=1000, help="violations printed (all stored)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    a = p.parse_args(argv)
    if a.compiled == "yes" and a.job in ("whatif", "report"):  # refused before Spark starts
        from spark_analysis.whatif import replay_code

        try:
            replay_code(a.compiled)
        except ValueError as e:
            p.error(str(e))
    from spark_analysis.common import spark_session

    spark = spark_session(a.master, shuffle_partitions=a.shuffle_partitions,
                          driver_memory=a.driver_memory)
    for path in (a.py_files or "").split(","):
        if path:
            spark.sparkContext.addPyFile(path)
    try:
        return run(a, spark)
    finally:
        spark.stop()


def run(a: argparse.Namespace, spark: SparkSession) -> int:
    """Run job `a.job` on an existing session (the tests share one); returns the exit status."""
    from spark_analysis.check import check
    from spark_analysis.churn import churn
    from spark_analysis.common import load_events
    from spark_analysis.delivery import delivery
    from spark_analysis.whatif import CANDIDATES, whatif

    t0 = time.perf_counter()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    ev = load_events(spark, a.logs, None if a.no_parquet else str(out))
    if ev.bad_lines:
        print(f"bad lines (skipped): {sum(ev.bad_lines.values())} {ev.bad_lines}",
              file=sys.stderr)
    t_load = time.perf_counter() - t0
    results = {}
    want = JOBS[1:5] if a.job == "report" else (a.job,)
    if "churn" in want:
        results["churn"] = churn(ev, a.flap_window, a.flap_count)
    if "delivery" in want:
        results["delivery"] = delivery(ev, a.bucket)
    if "whatif" in want:
        cands = (tuple(float(x) for x in a.candidates.split(",")) if a.candidates
                 else CANDIDATES)
        results["whatif"] = whatif(ev, cands, a.target, a.max_delay, a.current,
                                   method=a.method, flush_rtt=a.flush_rtt,
                                   compiled=a.compiled)
    if "check" in want:
        results["check"] = check(ev)
    for r in results.values():
        if r.name == "check":
            r.summary["violations"] = len(r.rows["violations"])
        r.write(out)
    status = 0
    for name, r in results.items():
        print(f"== {name} ({r.seconds:.1f} s) " + json.dumps(r.summary, default=str))
    if "churn" in results:
        print_users(results["churn"].summary)
    if "whatif" in results:
        print_whatif(results["whatif"].summary)
    if "check" in results:
        vio = results["check"].rows["violations"]
        for v in vio[:a.max_list]:
            print(f"VIOLATION {v['guarantee']} group={v['group']} member={v['member']}: "
                  f"{v['detail']}")
        if len(vio) > a.max_list:
            print(f"... {len(vio) - a.max_list} more in {out / 'check' / 'violations'}")
        print(f"check: {len(vio)} violation(s)")
        status = 1 if vio else 0
    if a.job == "report":
        from spark_analysis.report import render

        path = render(results, out, bad_lines=ev.bad_lines, logs=a.logs)
        print(f"report: {path}")
    meta = {"job": a.job, "master": a.master, "load_s": round(t_load, 2),
            "total_s": round(time.perf_counter() - t0, 2), "bad_lines": ev.bad_lines,
            "source": ev.source}
    (out / f"run-{a.job}.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"done in {meta['total_s']} s (load {meta['load_s']} s)")
    ev.df.unpersist()
    return status


def print_users(c: dict[str, Any]) -> None:
    """Churn and presence by user next to by instance (issue 29)."""
    print(f"churn by user ({c['view_source']} views): {c['users']:,} users in groups, "
          f"{c['instances']:,} instances ({c['multi_instance_users']:,} users with several); "
          f"arrivals {c['user_arrivals']:,} by user / {c['instance_arrivals']:,} by instance, "
          f"leaves {c['user_leaves']:,} / {c['instance_leaves']:,}, present "
          f"{c['user_present_s'] / 3600:,.2f} user-h / {c['instance_present_s'] / 3600:,.2f} "
          "instance-h")


def print_whatif(w: dict[str, Any]) -> None:
    """The rule, then what it predicts at the current and at the recommended timeout."""
    print(f"whatif ({w['method']}): rule: {w['rule']}"
          + ("" if w["met_target"] else " (no candidate met the target: the least bad one)"))
    print(f"  {'':12} {'timeout_s':>9} {'view_changes':>12} {'installs':>8} "
          f"{'false_removals':>14} {'detection_delay_s':>17} {'ghost_member_s':>14}")
    for label in ("current", "recommended"):
        r = w.get(label)
        if r is None:
            continue

        def f(k: str, fmt: str, r: dict[str, Any] = r) -> str:
            v = r.get(k)
            return "-" if v is None else format(v, fmt)

        print(f"  {label:12} {f('timeout_s', 'g'):>9} {f('view_changes', 'd'):>12} "
              f"{f('installs', 'd'):>8} {f('false_removals', 'd'):>14} "
              f"{f('detection_delay_s', '.2f'):>17} {f('ghost_member_s', '.1f'):>14}")
    print(f"recommended suspect_timeout: {w['recommended_suspect_timeout_s']} s "
          f"-> {w['server_option']}")
    if "replays" in w:
        print(f"replay cost: {w['replays']:,} replays run ({w['replays_shared']:,} more were "
              f"provably the same and shared one), {w['replay_cpu_s']:,} CPU-s, "
              f"{w['replay_code']}")


if __name__ == "__main__":
    sys.exit(main())
