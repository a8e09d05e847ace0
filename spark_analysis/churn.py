"""churn: how members come and go (DESIGN §7).

- `sessions`: per member, server connections (`conn.open`), client disconnects and reconnects,
  how many reconnects resumed the session;
- `gaps`: every disconnect gap (client side: `client.disconnect` → `client.reconnect`, or never
  returned before the log ends), and `gap_hist`, their distribution in log-spaced buckets;
- fast-resume rate: of the members the server suspected (`member.suspect`), how many resumed
  with no view change (`member.resume`); client side, the share of reconnects that resumed;
- `view_changes`: view installs per group and hour, with the propose reasons;
- `flapping`: members with at least `flap_count` disconnects within any `flap_window` seconds
  (a range window over each member's disconnects);
- `users` (issue 29: a member is one instance of a user, member id `user#instance`): per group
  and user, churn and presence counted by user next to the same counted by instance. A user
  *arrives* when its first instance enters the group's view and *leaves* when its last one
  goes (a second tab coming and going is no arrival); it is *present* while at least one of
  its instances is in the view (the union of its instances' times in the view, where
  `instance_present_s` adds them up).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_analysis.common import Events, JobResult, job_cache, one, pct_cols, timed

#: upper bounds (seconds) of the gap histogram's buckets; the last bucket is open
GAP_BUCKETS = (0.05, 0.1, 0.2, 0.5, 1, 2, 3, 5, 10, 30, 60, 300)


def gap_bucket(col: str) -> Column:
    expr = F.when(F.col(col).isNull(), F.lit("never returned"))
    lo = 0.0
    for hi in GAP_BUCKETS:
        expr = expr.when(F.col(col) < hi, F.lit(f"{lo:g}-{hi:g} s"))
        lo = hi
    return expr.otherwise(F.lit(f">= {lo:g} s"))


def gaps(ev: Events) -> DataFrame:
    """One row per disconnect: member, ts, gap_s (null if it never came back), resumed.

    Client logs are preferred (they see every gap, also those the server never noticed); the
    server's `member.suspect`/`member.resume` pairs are the fallback for fleets without them."""
    end = ev.end_ts()
    cl = ev.of("client.disconnect", "client.reconnect").select(
        F.coalesce("member", "node").alias("member"), "ts", "event", "gap_ms", "resumed")
    w = Window.partitionBy("member").orderBy("ts", F.col("event").desc())
    nxt = cl.select("*", F.lead("event").over(w).alias("next_event"),
                    F.lead("gap_ms").over(w).alias("next_gap_ms"),
                    F.lead("resumed").over(w).alias("next_resumed"),
                    F.lit(end).alias("_end"))
    client = (nxt.where(F.col("event") == "client.disconnect")
              .select("member", "ts",
                      F.when(F.col("next_event") == "client.reconnect",
                             F.col("next_gap_ms") / 1000).alias("gap_s"),
                      F.when(F.col("next_event") == "client.reconnect",
                             F.col("next_resumed")).alias("resumed"),
                      (F.col("_end") - F.col("ts")).alias("observed_s"),
                      F.lit("client").alias("source")))
    sv = ev.of("member.suspect", "member.resume").select("group", "member", "ts", "event",
                                                         "gap_ms")
    w2 = Window.partitionBy("group", "member").orderBy("ts")
    snxt = sv.select("*", F.lead("event").over(w2).alias("next_event"),
                     F.lead("gap_ms").over(w2).alias("next_gap_ms"),
                     F.lit(end).alias("_end"))
    server = (snxt.where(F.col("event") == "member.suspect")
              .select("member", "ts",
                      F.when(F.col("next_event") == "member.resume",
                             F.col("next_gap_ms") / 1000).alias("gap_s"),
                      (F.col("next_event") == "member.resume").alias("resumed"),
                      (F.col("_end") - F.col("ts")).alias("observed_s"),
                      F.lit("server").alias("source")))
    return client.unionByName(server)


def _user_ids(members: str) -> Column:
    """The users of an array of member ids (`user_of`: the id before `#`), once each."""
    return F.array_distinct(F.transform(members, lambda m: F.substring_index(m, "#", 1)))


def view_spans(ev: Events, source: str) -> DataFrame:
    """One row per view a group installed, in order: group, ts, `span_s` (until the next
    install, or the log's end), and its `members` with the previous view's (`prev`; none before
    a group's first view in the log, which arrives whole). `source` "server": the server's
    `view.install`; "client": the clients' `client.view` (the first client's time for each
    view)."""
    if source == "server":
        iv = ev.of("view.install").select("group", "view", "ts", "members")
    else:
        iv = (ev.of("client.view").where(F.col("members").isNotNull()
                                         & ~F.coalesce(F.col("removed"), F.lit(False)))
              .groupBy("group", "view").agg(F.min("ts").alias("ts"),
                                            F.first("members").alias("members")))
    w = Window.partitionBy("group").orderBy("ts", "view")
    return iv.select("group", "ts", "members",
                     (F.coalesce(F.lead("ts").over(w), F.lit(ev.end_ts())) - F.col("ts"))
                     .alias("span_s"),
                     F.coalesce(F.lag("members").over(w), F.array().cast("array<string>"))
                     .alias("prev"))


def _presence(spans: DataFrame, key: str, now: Column, before: Column) -> DataFrame:
    """Per (group, `key`) of the arrays `now` (in the view) and `before` (in the previous
    one): `present_s` (the views' time while in), `arrivals` (in, not before), `leaves`
    (before, not in)."""
    x = spans.select("group", "span_s", now.alias("now"), before.alias("before"))
    e = x.select("group", "span_s", F.explode(F.array_union("now", "before")).alias(key),
                 "now", "before")
    inside, was = F.array_contains("now", F.col(key)), F.array_contains("before", F.col(key))
    return e.groupBy("group", key).agg(
        F.sum(F.when(inside, F.col("span_s")).otherwise(0.0)).alias("present_s"),
        F.count(F.when(inside & ~was, 1)).alias("arrivals"),
        F.count(F.when(~inside, 1)).alias("leaves"))


def users(spans: DataFrame) -> DataFrame:
    """Per (group, user): `instances` (member ids of it seen in a view), `arrivals`/`leaves`
    (its first instance in, its last out), `present_s` (at least one instance in the view);
    and the same counted per instance: `instance_arrivals`, `instance_leaves`,
    `instance_present_s` (the sum of its instances' times in the view)."""
    inst = _presence(spans, "member", F.col("members"), F.col("prev"))
    by_inst = (inst.groupBy("group", F.substring_index("member", "#", 1).alias("user"))
               .agg(F.count("*").alias("instances"),
                    F.sum("arrivals").alias("instance_arrivals"),
                    F.sum("leaves").alias("instance_leaves"),
                    F.sum("present_s").alias("instance_present_s")))
    u = _presence(spans, "user", _user_ids("members"), _user_ids("prev"))
    return (u.join(by_inst, ["group", "user"])
            .select("group", "user", "instances", "arrivals", "leaves", "present_s",
                    "instance_arrivals", "instance_leaves", "instance_present_s"))


@timed
def churn(ev: Events, flap_window: float = 600.0, flap_count: int = 3) -> JobResult:
    g = job_cache(gaps(ev))
    # one pass over the gaps for the client figures, which also tell whether there are any
    client = F.col("source") == "client"
    rc = one(g.agg(F.count(F.when(client, 1)).alias("disconnects"),
                   F.count(F.when(client, F.col("gap_s"))).alias("returned"),
                   F.sum(F.when(client & F.col("resumed"), 1).otherwise(0)).alias("resumed")))
    has_client = rc["disconnects"] > 0
    g_main = g.where(F.col("source") == ("client" if has_client else "server"))

    opens = ev.of("conn.open").groupBy("member").agg(F.count("*").alias("connections"))
    cl = (ev.of("client.disconnect", "client.reconnect")
          .groupBy(F.coalesce("member", "node").alias("member"))
          .agg(F.sum(F.when(F.col("event") == "client.disconnect", 1).otherwise(0))
               .alias("disconnects"),
               F.sum(F.when(F.col("event") == "client.reconnect", 1).otherwise(0))
               .alias("reconnects"),
               F.sum(F.when(F.col("resumed"), 1).otherwise(0)).alias("resumed")))
    sessions = opens.join(cl, "member", "full").na.fill(0).orderBy(F.desc("disconnects"))

    hist = (g_main.groupBy(gap_bucket("gap_s").alias("bucket"))
            .agg(F.count("*").alias("gaps"), F.min("gap_s").alias("min_s"))
            .orderBy(F.col("min_s").asc_nulls_last()))
    gap_pcts = g_main.where(F.col("gap_s").isNotNull()).agg(*pct_cols("gap_s"))

    installs = ev.of("view.install").withColumn("hour", F.window(F.col("ts").cast("timestamp"),
                                                                 "1 hour").start)
    reasons = (ev.of("view.propose").groupBy("group", "reason").count()
               .groupBy("group").agg(F.map_from_entries(F.collect_list(
                   F.struct(F.coalesce("reason", F.lit("?")), "count"))).alias("reasons")))
    view_changes = (installs.groupBy("group", "hour").agg(F.count("*").alias("installs"))
                    .join(reasons, "group", "left").orderBy("group", "hour"))

    disc = ev.of("client.disconnect").select(F.coalesce("member", "node").alias("member"), "ts")
    if not has_client:
        disc = ev.of("conn.close").select("member", "ts")
    wf = (Window.partitionBy("member").orderBy((F.col("ts") * 1000).cast("long"))
          .rangeBetween(-int(flap_window * 1000), 0))
    flapping = (disc.select("member", F.count("*").over(wf).alias("in_window"))
                .groupBy("member").agg(F.max("in_window").alias("max_in_window"))
                .where(F.col("max_in_window") >= flap_count)
                .orderBy(F.desc("max_in_window")))

    # the server's counts and the groups with a view, in one pass over those (few) events
    is_install = F.col("event") == "view.install"
    counts = one(ev.of("member.suspect", "member.resume", "view.install").agg(
        *[F.count(F.when(F.col("event") == e, 1)).alias(e)
          for e in ("member.suspect", "member.resume", "view.install")],
        F.countDistinct(F.when(is_install, F.col("group"))).alias("groups"))).asDict()
    start, end = ev.span()
    hours = (end - start) / 3600
    n_groups = counts["groups"]

    # by user and by instance (issue 29), from the server's installs, else the clients' views
    view_source = "server" if counts.get("view.install") else "client"
    spans = job_cache(view_spans(ev, view_source))  # (read by six aggregates)
    by_user = job_cache(users(spans))
    tot = one(by_user.agg(
        F.count("*").alias("users"), F.sum("instances").alias("instances"),
        F.count(F.when(F.col("instances") > 1, 1)).alias("multi_instance_users"),
        *[F.sum(c).alias(c) for c in ("arrivals", "leaves", "present_s", "instance_arrivals",
                                      "instance_leaves", "instance_present_s")])).asDict()
    summary = {
        "server_suspects": counts.get("member.suspect", 0),
        "server_fast_resumes": counts.get("member.resume", 0),
        "server_fast_resume_rate": (counts.get("member.resume", 0) / counts["member.suspect"]
                                    if counts.get("member.suspect") else None),
        "client_disconnects": rc["disconnects"], "client_returned": rc["returned"],
        "client_resumed": rc["resumed"] or 0,
        "client_resume_rate": ((rc["resumed"] or 0) / rc["returned"] if rc["returned"]
                               else None),
        "view_installs": counts.get("view.install", 0),
        "log_hours": hours,
        "view_changes_per_group_hour": (counts.get("view.install", 0) / (n_groups * hours)
                                        if n_groups and hours else None),
        "gap_source": "client" if has_client else "server",
        # per (group, user) and per (group, instance): a user arrives with its first
        # instance and leaves with its last, and is present while any instance is
        "view_source": view_source,
        "users": tot["users"], "instances": tot["instances"] or 0,
        "multi_instance_users": tot["multi_instance_users"],
        "user_arrivals": tot["arrivals"] or 0, "user_leaves": tot["leaves"] or 0,
        "instance_arrivals": tot["instance_arrivals"] or 0,
        "instance_leaves": tot["instance_leaves"] or 0,
        "user_present_s": tot["present_s"] or 0.0,
        "instance_present_s": tot["instance_present_s"] or 0.0,
    }
    res = JobResult("churn", {"sessions": sessions, "gap_hist": hist, "gap_percentiles": gap_pcts,
                              "view_changes": view_changes, "flapping": flapping,
                              "users": by_user.orderBy(F.desc("instances"),
                                                       F.desc("instance_arrivals"),
                                                       "group", "user")},
                    summary)
    return res
