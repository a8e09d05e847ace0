"""whatif: what each candidate `suspect_timeout` would have done to the observed gaps (DESIGN §7).

A member that loses its link is suspected; if it is back within `suspect_timeout` it resumes with
no view change (G7), otherwise the group installs a view without it, and, when it comes back,
another view with it. So for a candidate T, over the observed disconnect gaps (`churn.gaps`):

- returning members away longer than T cost **2 view changes** each (removal + rejoin): these
  are the avoidable ones, `false_removals`;
- members that never came back (gaps still open when the log ends) cost **1 view change**
  whatever T is (`never_returned`), and stay in the view as ghosts until detected: the
  **detection delay** T, and `ghost_member_s`, its sum over them.

Right-censoring: a gap still open when the log ends has only been observed for `observed_s`. If
`observed_s > T` its removal happened inside the log and it costs T ghost member-seconds. If not,
its detection would fall after the end of the log: we do not know how it ends, but it has
already cost `observed_s`, so it is charged `min(T, observed_s)` (a lower bound) and counted in
`censored_gaps`. Both `ghost_member_s` and `view_changes` are therefore monotone in T (the first
non-decreasing, the second non-increasing); a long T never looks cheap merely because the log
ended before it could be paid.

Recommendation: the smallest candidate (≤ `max_delay`) whose false removals are at most `target`
(default 5 %) of the returning gaps *even in the worst case for the censored gaps*, i.e. counting
every gap still open and observed for less than T as one that would have come back later than T
(`false_removal_rate_hi`). A candidate that meets the target only because the log ended before
its censored gaps could count against it is not recommended. If no candidate meets the target,
the one with the lowest worst-case rate (smallest such T) within `max_delay`.
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
    t, ret, obs = F.col("timeout_s"), F.col("returned"), F.col("observed_s")

    def n(cond: F.Column) -> F.Column:
        return F.sum(F.when(cond, 1).otherwise(0))

    per = (g.crossJoin(F.broadcast(cand))
           .groupBy("timeout_s")
           .agg(n(ret & (F.col("gap_s") > t)).alias("false_removals"),
                n(ret).alias("returning_gaps"),
                n(~ret).alias("never_returned"),
                n(~ret & (obs <= t)).alias("censored_gaps"),
                F.coalesce(F.sum(F.when(~ret, F.least(t, obs))), F.lit(0.0))
                .alias("ghost_member_s"))
           .select("timeout_s", "false_removals", "returning_gaps", "never_returned",
                   "censored_gaps",
                   (F.col("false_removals") * 2 + F.col("never_returned")).alias("view_changes"),
                   (F.col("false_removals") / F.greatest(F.col("returning_gaps"), F.lit(1)))
                   .alias("false_removal_rate"),
                   ((F.col("false_removals") + F.col("censored_gaps"))
                    / F.greatest(F.col("returning_gaps") + F.col("censored_gaps"), F.lit(1)))
                   .alias("false_removal_rate_hi"),
                   t.alias("detection_delay_s"), "ghost_member_s")
           .orderBy("timeout_s"))
    rows = [r.asDict() for r in per.collect()]
    capped = [r for r in rows if r["timeout_s"] <= max_delay] or rows[:1]
    ok = [r for r in capped if r["false_removal_rate_hi"] <= target]
    best = (ok[0] if ok else min(capped, key=lambda r: (r["false_removal_rate_hi"],
                                                        r["timeout_s"]))) if rows else None
    rec = best["timeout_s"] if best else None
    summary = {
        "gap_source": src, "target_false_removal_rate": target, "max_delay_s": max_delay,
        "recommended_suspect_timeout_s": rec,
        "recommended_view_changes": best["view_changes"] if best else None,
        "recommended_censored_gaps": best["censored_gaps"] if best else None,
        "met_target": bool(ok),
        "server_option": f"notify serve --suspect-timeout {rec:g}" if rec is not None else None,
    }
    if current is not None:
        cur = next((r for r in rows if r["timeout_s"] == float(current)), None)
        summary["current_suspect_timeout_s"] = current
        summary["current_view_changes"] = cur["view_changes"] if cur else None
    return JobResult("whatif", {"candidates": per}, summary)
