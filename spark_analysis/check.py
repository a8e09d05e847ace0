"""check: the guarantees G2–G8 verified from the client logs (DESIGN §2, §7).

Each client logs what its application was handed (`client.deliver`, in delivery order: `recv_ts`,
then the per-client index `n`) and the views it installed (`client.view`). A delivery's `view` is
the view the client was in when it delivered. From those alone:

- **G2** virtual synchrony: for each member that installed v+1 right after v (a *survivor*), the
  set of offsets it delivered in v equals the union delivered in v by all survivors of v; every
  missing (member, offset) is a violation. Messages stamped with an older view (`msg_view < v`:
  a catch-up replay after a rejoin) are not view-v messages and are left out.
- **G3** FIFO / **G4** total order: within one member and one stream (`fifo:<sender>`, `total`)
  `seq` never goes down in delivery order. (A stream's `seq` is a function of its offsets, so
  every member delivering `total` in increasing seq is one total order.)
- **G5** atomic: an offset the server aborted (`atomic.abort`, server log) was delivered.
- **G6** filtering: a message stamped with the deliverer's current view (`msg_view`) came from a
  sender not in that view's members.
- **G7/G8** no duplicate, no gap after resume or catch-up: a member delivered an offset twice;
  or, within one view, a member skipped a stream's seq that another member delivered (a seq
  nobody delivered was an aborted atomic, so a skip over it is fine).

Violations are one table (`guarantee, group, member, detail`); the CLI exits 1 if it is not empty.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_analysis.common import Events, JobResult, job_cache, one, timed

#: a skip longer than this many seqs is checked on its first MAX_SKIP seqs only
MAX_SKIP = 1000


def _v(guarantee: str, df: DataFrame, detail: Column) -> DataFrame:
    return df.select(F.lit(guarantee).alias("guarantee"), "group", "member",
                     detail.alias("detail"))


@timed
def check(ev: Events) -> JobResult:
    """The violations of G2-G8 and what was checked.

    Cost: the deliveries are most of the log (7.8 M of 10 M events), and every check groups them
    by keys that start with `group`. So they are hash-partitioned by `group` once, as they are
    cached: each aggregate and window below then runs within its partitions (no shuffle of the
    deliveries), and what they are joined with (views, survivors, aborts: a few per view change)
    is broadcast. The ordering window runs once; only its few interesting rows are kept."""
    spark = ev.df.sparkSession
    parts = int(spark.conf.get("spark.sql.shuffle.partitions") or 8)
    d = job_cache(ev.of("client.deliver")
                  .select("group", F.coalesce("member", "node").alias("member"), "view",
                          "offset", "stream", "seq", "sender", "recv_ts", "n", "msg_view")
                  .repartition(parts, "group"))
    views = (ev.of("client.view")
             .select("group", F.coalesce("member", "node").alias("member"), "view", "ts",
                     "members", F.coalesce("removed", F.lit(False)).alias("removed")))

    # G7/G8 duplicates
    dup = (d.groupBy("group", "member", "offset").agg(F.count("*").alias("times"))
           .where(F.col("times") > 1))
    v_dup = _v("G7/G8 duplicate", dup, F.format_string("offset %d delivered %d times",
                                                       "offset", "times"))

    # G3/G4 order, and G7/G8 gaps within a view: one pass of the window, whose rows that go
    # down or skip ahead (few) are kept for the three checks below
    w = Window.partitionBy("group", "member", "stream").orderBy("recv_ts", "n")
    seqd = job_cache(d.select("*", F.lag("seq").over(w).alias("prev_seq"),
                              F.lag("offset").over(w).alias("prev_offset"),
                              F.lag("view").over(w).alias("prev_view"))
                     .where((F.col("seq") < F.col("prev_seq"))
                            | ((F.col("seq") > F.col("prev_seq") + 1)
                               & (F.col("view") == F.col("prev_view")))))
    bad_order = seqd.where(F.col("seq") < F.col("prev_seq"))
    v_order = _v("G4 total order", bad_order.where(F.col("stream") == "total"),
                 F.format_string("%s: offset %d (seq %d) delivered after offset %d (seq %d)",
                                 "stream", "offset", "seq", "prev_offset", "prev_seq"))
    v_fifo = _v("G3 FIFO", bad_order.where(F.col("stream") != "total"),
                F.format_string("%s: offset %d (seq %d) delivered after offset %d (seq %d)",
                                "stream", "offset", "seq", "prev_offset", "prev_seq"))
    skips = (seqd.where((F.col("seq") > F.col("prev_seq") + 1)
                        & (F.col("view") == F.col("prev_view")))
             .select("group", "member", "stream", "view", "prev_seq", "seq",
                     F.explode(F.sequence(F.col("prev_seq") + 1,
                                          F.least(F.col("seq") - 1,
                                                  F.col("prev_seq") + MAX_SKIP)))
                     .alias("missing_seq")))
    seen = d.select("group", "stream", F.col("seq").alias("missing_seq")).distinct()
    gap = (skips.join(seen, ["group", "stream", "missing_seq"], "left_semi")
           .groupBy("group", "member", "stream", "view", "prev_seq", "seq")
           .agg(F.sort_array(F.collect_list("missing_seq")).alias("missing")))
    v_gap = _v("G7/G8 gap", gap, F.format_string(
        "%s in view %d: went from seq %d to %d, skipping %s that other members delivered",
        "stream", "view", "prev_seq", "seq", F.array_join(F.col("missing").cast("array<string>"),
                                                          ",")))

    # G2 virtual synchrony
    wv = Window.partitionBy("group", "member").orderBy("ts")
    survivors = (views.select("*", F.lag("view").over(wv).alias("prev"),
                              F.lag("removed").over(wv).alias("prev_removed"))
                 .where((F.col("view") == F.col("prev") + 1) & ~F.col("removed")
                        & ~F.coalesce("prev_removed", F.lit(False)))
                 .select("group", "member", F.col("prev").alias("view")))
    # A catch-up after a rejoin (G8) replays older views' messages into the new view: those are
    # not messages of the view they are delivered in, so G2 leaves them out (G7/G8 cover them).
    in_view = (d.where(F.col("msg_view").isNull() | (F.col("msg_view") >= F.col("view")))
               .select("group", "member", "view", "offset"))
    surv_del = in_view.join(F.broadcast(survivors), ["group", "member", "view"], "left_semi")
    # per (group, view, offset): deliveries by survivors (`have`) and survivors delivering it
    # (`holders`); only an offset with fewer holders than the view has survivors can be missing
    # at someone, so only those few are matched against every survivor
    union = (surv_del.groupBy("group", "view", "offset", "member").agg(F.count("*").alias("c"))
             .groupBy("group", "view", "offset")
             .agg(F.sum("c").alias("have"), F.count("*").alias("holders")))
    n_surv = survivors.groupBy("group", "view").agg(F.count("*").alias("survivors"))
    short = (union.join(F.broadcast(n_surv), ["group", "view"])
             .where(F.col("holders") < F.col("survivors")).drop("holders"))
    holding = surv_del.join(F.broadcast(short.select("group", "view", "offset")),
                            ["group", "view", "offset"], "left_semi")
    missing = (survivors.join(short, ["group", "view"])
               .join(holding, ["group", "member", "view", "offset"], "left_anti"))
    v_vs = _v("G2 virtual synchrony", missing, F.format_string(
        "installed view %d from %d without offset %d, which %d of %d survivors delivered in it",
        F.col("view") + 1, "view", "offset", "have", "survivors"))

    # G5 atomic: an aborted offset delivered
    aborted = ev.of("atomic.abort").select("group", "offset", "reason").distinct()
    v_atomic = _v("G5 atomic", d.join(F.broadcast(aborted), ["group", "offset"]),
                  F.format_string("delivered offset %d that the server aborted (%s)", "offset",
                                  F.coalesce("reason", F.lit("?"))))

    # G6 version filtering / accept_from members
    vm = views.where(F.col("members").isNotNull()).select("group", "member", "view", "members")
    foreign = (d.where(F.col("msg_view") == F.col("view"))
               .join(F.broadcast(vm), ["group", "member", "view"])
               .where(~F.array_contains("members", F.col("sender"))))
    v_filter = _v("G6 filtering", foreign, F.format_string(
        "offset %d from %s, not a member of view %d", "offset", "sender", "view"))

    violations = (v_dup.unionByName(v_order).unionByName(v_fifo).unionByName(v_gap)
                  .unionByName(v_vs).unionByName(v_atomic).unionByName(v_filter)
                  .orderBy("guarantee", "group", "member", "detail"))
    # counted per group (within the partitions), then summed: no shuffle of the deliveries
    checked = one(d.groupBy("group").agg(F.count("*").alias("deliveries"),
                                         F.countDistinct("member").alias("members"),
                                         F.countDistinct("offset").alias("messages"))
                  .agg(*[F.sum(c).alias(c) for c in ("deliveries", "members", "messages")]))
    summary = {
        "deliveries_checked": checked["deliveries"] or 0,
        "member_groups_checked": checked["members"] or 0,
        "messages_checked": checked["messages"] or 0,
        "survivor_transitions_checked": survivors.count(),
        "server_aborts_known": aborted.count(),
    }
    return JobResult("check", {"violations": violations}, summary)
