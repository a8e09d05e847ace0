"""delivery: how fast and how completely messages get through (DESIGN §7).

- `latency`: end-to-end latency (client `recv_ts - sent_ts`, ms) p50/p95/p99/p99.9/max by order
  (`total` stream or FIFO) and atomic;
- `atomic`: commits and aborts, the abort rate, and confirm latency (`atomic.commit`'s
  `duration_ms`: accept to the last ACK);
- `installs`: flush + install durations (`view.install`'s `duration_ms`: propose to install);
- `throughput`: messages accepted by the server and delivered at clients per time bucket.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from spark_analysis.common import Events, JobResult, pct_cols, timed


@timed
def delivery(ev: Events, bucket_s: float = 1.0) -> JobResult:
    d = ev.of("client.deliver").where(F.col("sent_ts").isNotNull())
    lat = (d.select(F.when(F.col("stream") == "total", "total").otherwise("fifo").alias("order"),
                    F.coalesce("atomic", F.lit(False)).alias("atomic"),
                    ((F.col("recv_ts") - F.col("sent_ts")) * 1000).alias("latency_ms"))
           .groupBy("order", "atomic").agg(*pct_cols("latency_ms")).orderBy("order", "atomic"))

    res = ev.of("atomic.commit", "atomic.abort")
    atomic = (res.groupBy("event").agg(F.count("*").alias("count"), *pct_cols("duration_ms", "ms_"))
              .orderBy("event"))
    installs = ev.of("view.install").agg(*pct_cols("duration_ms"))

    b = F.floor(F.col("ts") / bucket_s) * bucket_s
    thr = (ev.of("msg.accept", "client.deliver")
           .groupBy(b.alias("t"))
           .agg(F.sum(F.when(F.col("event") == "msg.accept", 1).otherwise(0)).alias("accepted"),
                F.sum(F.when(F.col("event") == "client.deliver", 1).otherwise(0))
                .alias("delivered"))
           .orderBy("t"))
    counts = {r["event"]: r["count"] for r in
              ev.of("atomic.commit", "atomic.abort", "msg.accept", "msg.reject", "client.deliver")
              .groupBy("event").count().collect()}
    commits, aborts = counts.get("atomic.commit", 0), counts.get("atomic.abort", 0)
    summary = {
        "accepted": counts.get("msg.accept", 0), "rejected": counts.get("msg.reject", 0),
        "delivered": counts.get("client.deliver", 0),
        "atomic_commits": commits, "atomic_aborts": aborts,
        "atomic_abort_rate": aborts / (commits + aborts) if commits + aborts else None,
        "throughput_bucket_s": bucket_s,
    }
    return JobResult("delivery", {"latency": lat, "atomic": atomic, "installs": installs,
                                  "throughput": thr}, summary)
