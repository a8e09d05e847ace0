"""whatif: what each candidate `suspect_timeout` would have done to the logged history (DESIGN §7).

Two methods; both write `whatif/candidates` with one row per candidate T and share the
recommendation rule (below).

**`--method replay` (the default): the real core, replayed.** Per group, the recorded timeline
(members' join and leave requests, their connections' drops and returns) is fed to a real
`notify.core` hub configured with T, on a simulated clock, through the server's own action
interpreter (spark_analysis/replay.py; the same modules compiled by mypyc when they are built
and current, `--compiled`, compiled_replay.py). Spark only distributes it:
`groupBy(group).applyInPandas` hands each group's facts to one Python call
(replay_task.py), which builds the
timeline once and replays it for every candidate (groups in parallel over the cores); candidates
longer than every gap of the group cannot differ there and share one replay
(`replay.replay_candidates`), and a reconnect no timeout could notice is counted, not replayed
(`replay.ReplayHost.unseen_gap`). Because it is the core that decides, the numbers are the
server's: concurrent requests merge into one view change (a removal that comes during a flush
joins it; a suspect member holds a flush until it resumes or is removed; joins queue for the
next change), cancelled proposals cost nothing, and `view_changes` counts `view.install` as
`churn` does in a server log (initial joins and leave/rejoin pairs included). Per candidate it
reports `view_changes`, `installs` (view_install frames: members × views), `removals` and
`false_removals` (members removed while away that came back), the mean `detection_delay_s` of
members that never returned (drop → the install without them; a held flush makes it longer
than T) and `ghost_member_s` (their time in the view, up to the end of the log). Counts are per
group membership: a member in two groups that drops is suspected in both.

What the timeline is made of (and why): drops and returns are the clients' `client.disconnect`
and `client.reconnect` (as `churn.gaps`: the client sees every gap, and what it did does not
depend on the server's timeout); without client logs, the server's `conn.close` and the next
`conn.open` of the member. Joins and leaves are the clients' `client.join`/`client.leave`
requests, and atomic messages (`msg.accept{atomic}`: a member away cannot ACK them and is
removed after `ack_timeout`, 10 s, whatever T is); for members without join/leave requests, a
member appearing in a `view.install` while connected is
a join at that change's proposal, one disappearing while connected a leave (a member that
disappears while away was removed by the recorded timeout, and reappears by the SDK's rejoin:
the replay redoes both itself). Each group's replay starts from its last view installed
before any of its members was first away, with the logged installs up to it counted as they are
(`replay.start_of`: no timeout can have changed them, and how many joins of a startup burst the
server merged depends on its load then). Frames from server to member take `flush_rtt`
(default: the median duration of the logged changes that were proposed once, for joins only: a
flush nobody held up, under the run's load), and a member that asked to join waits for its
install before its next recorded step, as an application awaiting the SDK's `join()` does.

**`--method estimate`: the closed form.** A member that loses its link is suspected; if it is
back within `suspect_timeout` it resumes with no view change (G7), otherwise the group installs
a view without it, and, when it comes back, another view with it. So for a candidate T, over the
observed disconnect gaps (`churn.gaps`):

- returning members away longer than T cost **2 view changes** each (removal + rejoin): these
  are the avoidable ones, `false_removals`;
- members that never came back (gaps still open when the log ends) cost **1 view change**
  whatever T is (`never_returned`), and stay in the view as ghosts until detected: the
  **detection delay** T, and `ghost_member_s`, its sum over them.

Each gap is counted alone, once per member (not per group), and joins are not counted, so its
absolute numbers are not the server's (issue 15: 339 predicted, 220 measured); it ranks
candidates fast, with no Python on the executors.

Right-censoring (both methods): a gap still open when the log ends has only been observed for
`observed_s`. If its removal happened inside the log it costs its detection delay in ghost
member-seconds. If not, its detection would fall after the end of the log: we do not know how
it ends, but it has already cost `observed_s`, so it is charged that (a lower bound) and counted
in `censored_gaps`. A long T never looks cheap merely because the log ended before it could be
paid.

Recommendation: the smallest candidate whose detection delay is at most `max_delay` (the
replayed delay where a member was detected, else T) and whose false removals are at most
`target` (default 5 %) of the returning gaps *even in the worst case for the censored gaps*,
i.e. counting every gap still open and observed for less than T as one that would have come
back later than T (`false_removal_rate_hi`). If no candidate meets the target, the one with the
lowest worst-case rate (smallest such T) within `max_delay`. The rule and the predicted numbers
at the recommended and the current timeout are in the summary (`rule`, `recommended`,
`current`) and printed by `notify-analyze whatif`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_analysis import compiled_replay
from spark_analysis.churn import gaps
from spark_analysis.common import Events, JobResult, job_cache, one, timed
from spark_analysis.replay_task import replay_group

#: the default suspect_timeout candidates (seconds). They start at half a second: a shorter one
#: removes a member for nearly every reconnect of a mobile client (the SDK's backoff, a TCP
#: handshake and a hello; hand-offs in the fleet's and the generator's logs are lognormal around
#: 1 s: 6-8 % of gaps are under 0.5 s, under 1 % under 0.3 s), so it cannot come near a
#: false-removal target, and it is the dearest to replay (the most view changes).
#: `--candidates` asks for any others (a LAN's clients may reconnect faster).
CANDIDATES = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0)
METHODS = ("replay", "estimate")
#: the flush round trip when the log has no install to measure it from (seconds)
DEFAULT_FLUSH_RTT = 0.005
#: what the summary shows of a candidate, for the current and the recommended timeout
PREDICTED = ("timeout_s", "view_changes", "installs", "false_removals", "false_removal_rate_hi",
             "detection_delay_s", "ghost_member_s", "never_returned", "censored_gaps")

_OUTCOME_SCHEMA = ("group string, timeout_s double, view_changes long, installs long, "
                   "proposals long, cancelled long, removals long, false_removals long, "
                   "returning_gaps long, never_returned long, censored_gaps long, detected long, "
                   "detection_delay_s double, ghost_member_s double, replayed boolean, "
                   "replay_cpu_s double, compiled boolean")


@timed
def whatif(ev: Events, candidates: tuple[float, ...] = CANDIDATES, target: float = 0.05,
           max_delay: float = 30.0, current: float | None = None, method: str = "replay",
           flush_rtt: float | None = None, compiled: str = "auto") -> JobResult:
    """One row per candidate (`whatif/candidates`) and the recommendation by the explicit rule
    (module docstring); `current` joins the candidates so its prediction is shown."""
    if method not in METHODS:
        raise ValueError(f"method is one of {METHODS}, not {method!r}")
    if current is not None:
        candidates = tuple(sorted({*candidates, float(current)}))
    extra: dict[str, Any] = {}
    if method == "replay" and not ev.of("view.install", "client.join").limit(1).count():
        # gaps but no group to replay them in (client logs alone): the closed form it is
        method, extra = "estimate", {"fallback": "no group in the logs to replay"}
    if method == "estimate":
        per, more = _estimate(ev, candidates)
    else:
        per, more = _replayed(ev, candidates, flush_rtt, compiled)
    extra.update(more)
    rows = [r.asDict() for r in per.collect()]
    if method == "replay":  # what the replay cost (the candidates table has it per candidate)
        run = sum(r["replayed_groups"] for r in rows)
        extra.update(replays=run, replays_shared=sum(r["groups"] for r in rows) - run,
                     replay_cpu_s=round(sum(r["replay_cpu_s"] or 0.0 for r in rows), 1))
    summary = {"method": method, **extra, **recommend(rows, target, max_delay, current)}
    return JobResult("whatif", {"candidates": per}, summary)


# -- the recommendation ----------------------------------------------------------------------


def rule_text(target: float, max_delay: float) -> str:
    return (f"smallest suspect_timeout whose worst-case false-removal rate is <= {target:g} "
            f"and whose detection delay is <= {max_delay:g} s")


def _delay(r: dict[str, Any]) -> float:
    d = r.get("detection_delay_s")
    return float(r["timeout_s"] if d is None else d)


def recommend(rows: list[dict[str, Any]], target: float, max_delay: float,
              current: float | None) -> dict[str, Any]:
    """The explicit rule of the module docstring, over the candidates' rows (sorted by T)."""
    capped = [r for r in rows if _delay(r) <= max_delay] or rows[:1]
    ok = [r for r in capped if r["false_removal_rate_hi"] <= target]
    best = (ok[0] if ok else min(capped, key=lambda r: (r["false_removal_rate_hi"],
                                                        r["timeout_s"]))) if rows else None
    rec = best["timeout_s"] if best else None
    summary: dict[str, Any] = {
        "target_false_removal_rate": target, "max_delay_s": max_delay,
        "rule": rule_text(target, max_delay),
        "recommended_suspect_timeout_s": rec,
        "recommended_view_changes": best["view_changes"] if best else None,
        "recommended_censored_gaps": best["censored_gaps"] if best else None,
        "recommended": _predicted(best),
        "met_target": bool(ok),
        "server_option": f"notify serve --suspect-timeout {rec:g}" if rec is not None else None,
    }
    if current is not None:
        cur = next((r for r in rows if r["timeout_s"] == float(current)), None)
        summary["current_suspect_timeout_s"] = current
        summary["current_view_changes"] = cur["view_changes"] if cur else None
        summary["current"] = _predicted(cur)
    return summary


def _predicted(r: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if r is None else {k: r.get(k) for k in PREDICTED}


# -- the closed form ---------------------------------------------------------------------------


def _estimate(ev: Events, candidates: tuple[float, ...]) -> tuple[DataFrame, dict[str, Any]]:
    spark = ev.df.sparkSession
    g = gaps(ev)
    src = "client" if g.where(F.col("source") == "client").limit(1).count() else "server"
    g = (g.where(F.col("source") == src)
         .select("gap_s", "observed_s", F.col("gap_s").isNotNull().alias("returned")))
    cand = spark.createDataFrame([(float(c),) for c in candidates], "timeout_s double")
    t, ret, obs = F.col("timeout_s"), F.col("returned"), F.col("observed_s")

    def n(cond: Column) -> Column:
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
                   *_rates(), t.alias("detection_delay_s"), "ghost_member_s")
           .orderBy("timeout_s"))
    return per, {"gap_source": src}


def _rates() -> list[Column]:
    fr, ret, cens = F.col("false_removals"), F.col("returning_gaps"), F.col("censored_gaps")
    return [(fr / F.greatest(ret, F.lit(1))).alias("false_removal_rate"),
            ((fr + cens) / F.greatest(ret + cens, F.lit(1))).alias("false_removal_rate_hi")]


# -- the replay --------------------------------------------------------------------------------


#: the events the replay reads (`facts`, `_flush_rtt`), and the columns it reads of them
_REPLAY_EVENTS = ("view.install", "view.propose", "client.join", "client.leave", "msg.accept",
                  "client.disconnect", "client.reconnect", "conn.close", "conn.open")
_REPLAY_COLUMNS = ("ts", "event", "node", "group", "member", "members", "view", "proposed",
                   "reason", "duration_ms", "atomic", "sender")


def _replay_input(ev: Events) -> Events:
    """The few events the replay reads, in a cache of their own: `facts` and `_flush_rtt` look
    at them about ten times, and each look at the whole events table scans every delivery
    (most of a log) for a few thousand rows. Only atomic messages are kept of `msg.accept`."""
    sub = job_cache(ev.of(*_REPLAY_EVENTS)
                    .where((F.col("event") != "msg.accept") | F.col("atomic"))
                    .select(*_REPLAY_COLUMNS))
    return replace(ev, df=sub)


def _connections(ev: Events) -> tuple[DataFrame, str]:
    """Every drop and return: (member, ts, kind), from the clients if they logged any."""
    cl = ev.of("client.disconnect", "client.reconnect")
    if cl.limit(1).count():
        return cl.select(F.coalesce("member", "node").alias("member"), "ts",
                         F.when(F.col("event") == "client.disconnect", "drop")
                         .otherwise("return").alias("kind")), "client"
    sv = ev.of("conn.close", "conn.open")
    return sv.select("member", "ts", F.when(F.col("event") == "conn.close", "drop")
                     .otherwise("return").alias("kind")), "server"


def facts(ev: Events) -> tuple[DataFrame, str]:
    """One row per recorded fact of each group: (group, ts, kind, member, members, installed),
    kind one of view (members = the installed view, ts = when it was proposed, installed = when
    installed), join, leave, drop, return, publish (an atomic message's sender)."""
    none, no_ts = F.lit(None).cast("array<string>"), F.lit(None).cast("double")
    views = ev.of("view.install").select(
        "group", (F.col("ts") - F.coalesce(F.col("duration_ms"), F.lit(0.0)) / 1000).alias("ts"),
        F.lit("view").alias("kind"), F.lit(None).cast("string").alias("member"), "members",
        F.col("ts").alias("installed"))
    asks = ev.of("client.join", "client.leave").select(
        "group", "ts", F.when(F.col("event") == "client.join", "join").otherwise("leave")
        .alias("kind"), F.coalesce("member", "node").alias("member"), none.alias("members"),
        no_ts.alias("installed"))
    atomics = ev.of("msg.accept").where(F.col("atomic")).select(
        "group", "ts", F.lit("publish").alias("kind"), F.col("sender").alias("member"),
        none.alias("members"), no_ts.alias("installed"))
    pairs = (views.select("group", F.explode("members").alias("member"))
             .unionByName(asks.select("group", "member")).distinct())
    conns, src = _connections(ev)
    per_group = conns.join(pairs, "member").select("group", "ts", "kind", "member",
                                                   none.alias("members"), no_ts.alias("installed"))
    return views.unionByName(asks).unionByName(atomics).unionByName(per_group), src


def _flush_rtt(ev: Events) -> float:
    """The median duration of the logged changes nobody held up: proposed once, for joins
    only (no suspect whose flush_ok never comes, no restart), with someone to flush (not a
    group's first view). It is the server's flush round trip *under the run's load*, which
    decides how many concurrent joins merge (the fleets' startup bursts: 3.6 ms merges fewer
    than the server did, 8-10 ms about as many)."""
    props = (ev.of("view.propose").groupBy("group", F.col("proposed").alias("view"))
             .agg(F.count("*").alias("n"), F.max("reason").alias("reason")))
    plain = (ev.of("view.install").where(F.col("view") > 1)
             .join(props.where((F.col("n") == 1) & (F.col("reason") == "join")),
                   ["group", "view"]))
    q = one(plain.agg(F.percentile_approx("duration_ms", 0.5).alias("q")))["q"]
    return DEFAULT_FLUSH_RTT if q is None else float(q) / 1000


def _replayed(ev: Events, candidates: tuple[float, ...], flush_rtt: float | None,
              compiled: str) -> tuple[DataFrame, dict[str, Any]]:
    spark = ev.df.sparkSession
    end = ev.end_ts()
    ev = _replay_input(ev)
    rtt = _flush_rtt(ev) if flush_rtt is None else flush_rtt
    f, src = facts(ev)
    code = replay_code(compiled)
    use = code.compiled

    def run(pdf: pd.DataFrame) -> pd.DataFrame:
        # replay_task.py imports none of the replay's modules: the executors must be able to
        # load the compiled ones first
        return replay_group(pdf, end=end, flush_rtt=rtt, candidates=candidates, compiled=use)

    # One call per group replays every candidate (the facts cross the JVM/Python boundary
    # once). The facts are few bytes but many replays: spread the groups over every core
    # (adaptive execution sizes partitions by bytes and may put them all in one task).
    parts = max(2, 4 * spark.sparkContext.defaultParallelism)
    per_group = (f.repartition(parts, "group")
                 .groupBy("group").applyInPandas(run, _OUTCOME_SCHEMA))
    s = {c: F.sum(c).alias(c) for c in ("view_changes", "installs", "proposals", "cancelled",
                                         "removals", "false_removals", "returning_gaps",
                                         "never_returned", "censored_gaps", "detected")}
    per = (per_group.groupBy("timeout_s")
           .agg(*s.values(), F.sum("detection_delay_s").alias("_delay"),
                F.sum("ghost_member_s").alias("ghost_member_s"), F.count("*").alias("groups"),
                F.count_if("replayed").alias("replayed_groups"),
                F.sum("replay_cpu_s").alias("replay_cpu_s"),
                F.count_if("compiled").alias("compiled_groups"))
           .select("timeout_s", "false_removals", "returning_gaps", "never_returned",
                   "censored_gaps", "view_changes", *_rates(),
                   F.when(F.col("detected") > 0, F.col("_delay") / F.col("detected"))
                   .alias("detection_delay_s"),
                   "ghost_member_s", "installs", "proposals", "cancelled", "removals", "detected",
                   "groups", "replayed_groups", "replay_cpu_s", "compiled_groups")
           .orderBy("timeout_s"))
    # Replayed once, here: the table goes on from the collected rows (a few per candidate), so
    # that a session that asks many questions holds no cache of it.
    rows = per.collect()
    table = spark.createDataFrame(rows, per.schema)
    groups = max((r["groups"] for r in rows), default=0)
    ran = max((r["compiled_groups"] for r in rows), default=0)
    return table, {"gap_source": src, "flush_rtt_s": rtt,
                   "replay_code": _which_code_ran(code, ran, groups)}


def _which_code_ran(asked: compiled_replay.Status, ran: int, groups: int) -> str:
    """What the executors did with what the driver asked (`ran` of `groups` compiled)."""
    if not asked.compiled:
        return f"pure Python ({asked.reason})"
    if ran == groups:
        return "compiled (mypyc)"
    if ran:
        return f"compiled in {ran:,} of {groups:,} groups (the other executors could not load it)"
    return "pure Python (no executor could load the compiled modules)"


def replay_code(compiled: str) -> compiled_replay.Status:
    """Replay with the compiled modules? `auto`: when they are built and current (else the
    sources, and the summary says why); `yes`: they must be; `no`: the sources."""
    if compiled == "no":
        return compiled_replay.Status(False, "--compiled no")
    st = compiled_replay.status()
    if compiled == "yes" and not st.compiled:
        raise ValueError(f"--compiled yes: the compiled replay cannot run: {st.reason}")
    return st
