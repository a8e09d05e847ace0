"""whatif: what each candidate `suspect_timeout` would have done to the observed gaps (DESIGN §7).

A member that loses its link is suspected; if it is back within `suspect_timeout` it resumes with
no view change (G7), otherwise the group installs a view without it, and, when it comes back,
another view with it. So for a candidate T, over the observed disconnect gaps (`churn.gaps`):

- returning members away longer than T cost **2 view changes** each (removal + rejoin): these
  are the avoidable ones, `false_removals`;
- members that never came back cost 1 view change whatever T is, but stay in the view as ghosts
  for T seconds: the **detection delay** (and `ghost_member_s`, its sum over them);
- a gap still open when the log ends counts, for candidate T, as "never returned" if it already
  lasted longer than T, and is ignored otherwise (we cannot tell).

Recommendation: the smallest candidate whose false removals are at most `target` (default 5 %)
of the returning gaps, capped at `max_delay` seconds of detection delay. A longer timeout only
buys fewer view changes with slower detection; the table shows the trade for every candidate.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from spark_analysis.churn import gaps
from spark_analysis.common import Events, JobResult, timed

CANDIDATES = (0.05, 0.1, 0.2, 0.3, 0.5,
              1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0)


@timed
def whatif(ev: Events, candidates: tuple[float, ...] = CANDIDATES, target: float = 0.05,
           max_delay: float = 30.0, current: float | None = None) -> JobResult:
    spark = ev.df.sparkSession
    g = gaps(ev)
    src = "client" if g.where(F.col("source") == "client").limit(1).count() else "server"
    if current is not None:
        candidates = tuple(sorted({*candidates, float(current)}))
    g = (g.where(F.col("source") == src)
         .select("gap_s", "observed_s", F.col("gap_s").isNotNull().alias("returned")))
    cand = spark.createDataFrame([(float(c),) for c in candidates], "timeout_s double")
    per = (g.crossJoin(F.broadcast(cand))
           .groupBy("timeout_s")
           .agg(F.sum(F.when(F.col("returned") & (F.col("gap_s") > F.col("timeout_s")), 1)
                      .otherwise(0)).alias("false_removals"),
                F.sum(F.when(F.col("returned"), 1).otherwise(0)).alias("returning_gaps"),
                F.sum(F.when(~F.col("returned") & (F.col("observed_s") > F.col("timeout_s")), 1)
                      .otherwise(0)).alias("never_returned"))
           .select("timeout_s", "false_removals", "returning_gaps", "never_returned",
                   (F.col("false_removals") * 2 + F.col("never_returned")).alias("view_changes"),
                   (F.col("false_removals") / F.greatest(F.col("returning_gaps"), F.lit(1)))
                   .alias("false_removal_rate"),
                   F.col("timeout_s").alias("detection_delay_s"),
                   (F.col("never_returned") * F.col("timeout_s")).alias("ghost_member_s"))
           .orderBy("timeout_s"))
    rows = [r.asDict() for r in per.collect()]
    ok = [r for r in rows if r["false_removal_rate"] <= target and r["timeout_s"] <= max_delay]
    capped = [r for r in rows if r["timeout_s"] <= max_delay] or rows[:1]
    best = ok[0] if ok else capped[-1]
    rec = best["timeout_s"] if rows else None
    summary = {
        "gap_source": src, "target_false_removal_rate": target, "max_delay_s": max_delay,
        "recommended_suspect_timeout_s": rec,
        "recommended_view_changes": best["view_changes"] if rows else None,
        "met_target": bool(ok),
        "server_option": f"notify serve --suspect-timeout {rec:g}" if rec is not None else None,
    }
    if current is not None:
        cur = next((r for r in rows if r["timeout_s"] == float(current)), None)
        summary["current_suspect_timeout_s"] = current
        summary["current_view_changes"] = cur["view_changes"] if cur else None
    return JobResult("whatif", {"candidates": per}, summary)
