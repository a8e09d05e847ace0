"""The safety verdict of a chaos run, from the delivery logs alone (DESIGN §6, §10).

A fast, single-process checker over the client event logs and the publishers' acknowledgements.
Its order, duplicate and virtual-synchrony rules are the Spark `check` job's
(`spark_analysis/check.py`) and are tested to agree with it on the same logs
(tests/spark/test_chaos_agrees.py); `acked_lost` needs the acks, which only the chaos tool has.

- **acked_lost**: a message whose publish was acknowledged (`published`: durable, G10) that a
  subscriber which was a member *throughout* never delivered. Throughout: the subscriber had
  installed a view of the group before the acknowledgement, and no `Removed` ended its
  membership after it. A `Reset` does not excuse anything: after a reset the server's log no
  longer holds what it acknowledged — which is exactly the loss a memory store suffers on a crash
  (the negative control). Messages are matched by publish id (`pid`, carried in the payload),
  never by offset: a reset log reuses offsets.
- **duplicates**: a member delivered the same offset twice within one epoch of the group's log
  (Spark: "G7/G8 duplicate"), or the same publish id at two different offsets.
- **out_of_order**: within one member, one epoch and one stream (`fifo:<sender>` or `total`),
  `seq` went down in delivery order (Spark: "G3 FIFO", "G4 total order").
- **view_disagreements**: two members installed the same view (group, epoch, version) with
  different member lists (G1); or a member that installed v+1 right after v had not delivered
  every view-v message another such member delivered in v (Spark: "G2 virtual synchrony").

- **sender_fifo** (issue 32): within one member and one group, the send counters (`ctr`: the
  publisher's 1, 2, 3, ... in the order its application published) of each FIFO sender's
  messages (streams `fifo:*`) strictly increase in delivery order: per-sender FIFO as the
  sender sent, which server seqs alone cannot show (a sender's two messages given seqs in the
  wrong order would pass `out_of_order`). A counter acknowledged to its sender but missing at a
  member that stayed in the group is `acked_lost` (the counter travels with the publish id).
- **expectations**: the scenario's own promises (`expect`): `late_after_ack` (every delivery
  of an acknowledged message to a subscriber within that many seconds of its ack) and
  `removals` (at most that many members removed after a suspect timeout).
- **sdk_duplicates**: deliveries the members' SDKs dropped as duplicates
  (`client.sdk_duplicates{dropped}`, logged by each client at its end): the application never
  saw them, but the server sent them; the count is their total and must be 0.

Delivery order within a member is (`recv_ts`, `n`), as in the Spark job. Each category gives a
count and up to `EXAMPLES` examples.

- **view_changes** (not a safety rule, a cost one): every view change in the server logs is
  accounted for by the members' own comings and goings (`view_changes()`); one that is not
  (a storm: installs that change nobody, members removed while connected) fails the verdict.

`ok` is true when every rule's count (`RULES`) is zero and every view change is explained.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

EXAMPLES = 5

#: the rules whose count must be 0, in the order reports list them
RULES = ("acked_lost", "duplicates", "out_of_order", "view_disagreements", "sender_fifo",
         "sdk_duplicates", "expectations")

Event = dict[str, Any]


def read_jsonl(paths: Iterable[Path]) -> tuple[list[Event], int]:
    """Every JSON object line of `paths`; returns (events, bad line count)."""
    out: list[Event] = []
    bad = 0
    for p in paths:
        for line in p.read_bytes().splitlines():
            if not line.strip():
                continue
            try:
                x = orjson.loads(line)
            except orjson.JSONDecodeError:
                bad += 1
                continue
            if isinstance(x, dict):
                out.append(x)
            else:
                bad += 1
    return out, bad


def log_files(logs: Path, prefix: str) -> list[Path]:
    return sorted(p for p in logs.rglob(f"{prefix}*.jsonl*") if p.is_file())


def _member(e: Event) -> str:
    return str(e.get("member") or e.get("node"))


class _Cat:
    def __init__(self) -> None:
        self.count = 0
        self.examples: list[str] = []
        self.by_rule: dict[str, int] = defaultdict(int)

    def add(self, text: str, rule: str) -> None:
        self.count += 1
        self.by_rule[rule] += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(text)

    def out(self) -> dict[str, Any]:
        return {"count": self.count, "examples": self.examples, "by_rule": dict(self.by_rule)}


def check(events: list[Event], acks: list[Event] | None = None,
          subscribers: set[str] | None = None, *, gone_ends_membership: bool = True,
          expect: dict[str, Any] | None = None) -> dict[str, Any]:
    """The verdict over client (and server) events and publisher acks.

    `subscribers`: the members whose deliveries acked messages must reach (default: every
    member that logged a delivery or a view). `gone_ends_membership`: a member whose log ends
    with a disconnect (it never came back) is not owed what was acknowledged after it left; a
    chaos run turns this off, since its subscribers are all meant to be there at the end.
    `expect`: the scenario's `expect` (`late_after_ack`, `removals`)."""
    deliveries = sorted((e for e in events if e.get("event") == "client.deliver"),
                        key=lambda e: (_member(e), e.get("recv_ts") or e["ts"], e.get("n") or 0))
    views = sorted((e for e in events if e.get("event") == "client.view"),
                   key=lambda e: (_member(e), e["ts"]))
    lost, dup, order, vd = _Cat(), _Cat(), _Cat(), _Cat()
    sender_fifo, sdk_dup = _Cat(), _Cat()

    # duplicates, by offset within an epoch, and by publish id
    seen_off: dict[tuple[Any, ...], int] = defaultdict(int)
    seen_pid: dict[tuple[str, str, str], set[tuple[Any, int]]] = defaultdict(set)
    for d in deliveries:
        seen_off[(d["group"], _member(d), d.get("epoch", 0), d["offset"])] += 1
        if d.get("pid") is not None:
            seen_pid[(d["group"], _member(d), d["pid"])].add((d.get("epoch", 0), d["offset"]))
    for (g, m, ep, off), times in sorted(seen_off.items(), key=str):
        if times > 1:
            dup.add(f"{m} delivered {g} offset {off} (epoch {ep}) {times} times", "offset")
    for (g, m, pid), places in sorted(seen_pid.items()):
        if len(places) > 1:
            dup.add(f"{m} delivered {g} message {pid} at {len(places)} places: "
                    f"{sorted(places)}", "publish_id")

    # order: seq never goes down within (group, member, epoch, stream)
    last: dict[tuple[Any, ...], Event] = {}
    for d in deliveries:
        key = (d["group"], _member(d), d.get("epoch", 0), d["stream"])
        prev = last.get(key)
        if prev is not None and d["seq"] < prev["seq"]:
            order.add(f"{key[1]} in {key[0]} {key[3]}: offset {d['offset']} (seq {d['seq']}) "
                      f"after offset {prev['offset']} (seq {prev['seq']})",
                      "G4" if d["stream"] == "total" else "G3")
        last[key] = d

    # sender_fifo: each FIFO sender's send counters strictly increase at each member (across
    # epochs and reconnects: the sender's order is one sequence whatever the server did)
    last_ctr: dict[tuple[Any, ...], Event] = {}
    for d in deliveries:
        if d.get("ctr") is None or not str(d.get("stream", "")).startswith("fifo"):
            continue
        fkey = (d["group"], _member(d), d.get("sender"))
        prev = last_ctr.get(fkey)
        if prev is not None and d["ctr"] <= prev["ctr"]:
            sender_fifo.add(f"{fkey[1]} in {fkey[0]} from {fkey[2]}: counter {d['ctr']} (offset "
                            f"{d['offset']}) after counter {prev['ctr']} (offset "
                            f"{prev['offset']})", "repeated" if d["ctr"] == prev["ctr"]
                            else "went_back")
        last_ctr[fkey] = d

    # sdk_duplicates: what the SDKs dropped as duplicates (the count is their total)
    reports = [e for e in events if e.get("event") == "client.sdk_duplicates"]
    for e in sorted(reports, key=lambda e: (str(e.get("group")), _member(e))):
        n = int(e.get("dropped") or 0)
        if n:
            sdk_dup.add(f"{_member(e)}'s SDK dropped {n} duplicate deliveries of "
                        f"{e.get('group')}", _member(e))
    sdk_dup.count = sum(int(e.get("dropped") or 0) for e in reports)

    # G1: one member list per (group, epoch, view)
    lists: dict[tuple[Any, ...], dict[tuple[str, ...], list[str]]] = defaultdict(
        lambda: defaultdict(list))
    for v in views:
        if v.get("removed") or v.get("members") is None:
            continue
        lists[(v["group"], v.get("epoch", 0), v["view"])][tuple(sorted(v["members"]))].append(
            _member(v))
    for (g, ep, ver), by in sorted(lists.items(), key=str):
        if len(by) > 1:
            vd.add(f"{g} view {ver} (epoch {ep}) installed with different members: "
                   + "; ".join(f"{list(k)} at {sorted(ms)}" for k, ms in by.items()), "G1")

    # G2: survivors of v -> v+1 delivered the same view-v messages (the Spark job's rule)
    survivors: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    prev_view: dict[tuple[str, str], Event] = {}
    for v in views:
        k = (v["group"], _member(v))
        p = prev_view.get(k)
        if (p is not None and v["view"] == p["view"] + 1 and not v.get("removed")
                and not p.get("removed")):
            survivors[(v["group"], v.get("epoch", 0), p["view"])].append(_member(v))
        prev_view[k] = v
    in_view: dict[tuple[Any, ...], set[int]] = defaultdict(set)
    for d in deliveries:
        if d.get("msg_view") is None or d["msg_view"] >= (d.get("view") or 0):
            in_view[(d["group"], d.get("epoch", 0), d.get("view"), _member(d))].add(d["offset"])
    for (g, ep, ver), ms in sorted(survivors.items(), key=str):
        union: dict[int, int] = defaultdict(int)
        for m in ms:
            for off in in_view.get((g, ep, ver, m), ()):
                union[off] += 1
        for m in sorted(ms):
            have = in_view.get((g, ep, ver, m), set())
            for off in sorted(set(union) - have):
                vd.add(f"{m} installed {g} view {ver + 1} from {ver} without offset {off}, "
                       f"which {union[off]} of {len(ms)} survivors delivered in it", "G2")

    # acked_lost
    if acks:
        members = subscribers
        if members is None:
            members = {_member(e) for e in deliveries} | {_member(v) for v in views}
        got: dict[tuple[str, str], set[str]] = defaultdict(set)
        for d in deliveries:
            if d.get("pid") is not None:
                got[(d["group"], _member(d))].add(d["pid"])
        # membership changes per (group, member), in time order: True = in a view, False =
        # Removed
        changes: dict[tuple[str, str], list[tuple[float, bool]]] = defaultdict(list)
        for v in views:
            k = (v["group"], _member(v))
            if v.get("removed"):
                changes[k].append((v["ts"], False))
            elif _member(v) in (v.get("members") or ()):
                changes[k].append((v["ts"], True))

        def throughout(k: tuple[str, str], t: float) -> bool:
            """A member at `t` (its last change before is a view with it) and never removed
            after it."""
            before = [inside for ts, inside in changes.get(k, ()) if ts < t]
            return bool(before) and before[-1] and all(
                inside for ts, inside in changes.get(k, ()) if ts >= t)

        gone: dict[str, float] = {}
        if gone_ends_membership:
            last_ev: dict[str, Event] = {}
            for e in sorted(events, key=lambda e: e.get("ts", 0.0)):
                if str(e.get("event", "")).startswith("client."):
                    last_ev[_member(e)] = e
            gone = {m: e["ts"] for m, e in last_ev.items()
                    if e.get("event") == "client.disconnect"}
        for a in sorted(acks, key=lambda a: a["ts"]):
            if "offset" not in a or a.get("aborted"):
                continue
            for m in sorted(members):
                k = (a["group"], m)
                if not throughout(k, a["ts"]):
                    continue
                if m in gone and gone[m] <= a["ts"]:
                    continue  # it had left for good before the ack
                if a["pid"] not in got.get(k, ()):
                    lost.add(f"{m} never delivered {a['group']} {a['pid']} (acked at offset "
                             f"{a['offset']}, t={a['ts']:.3f})", m)
    checked = {"deliveries": len(deliveries), "views": len(views),
               "acks": sum(1 for a in acks or () if "offset" in a),
               "members": len({(d["group"], _member(d)) for d in deliveries}),
               "with_counter": sum(1 for d in deliveries if d.get("ctr") is not None),
               "sdk_duplicate_reports": len(reports)}
    res: dict[str, Any] = {"acked_lost": lost.out(), "duplicates": dup.out(),
                           "out_of_order": order.out(), "view_disagreements": vd.out(),
                           "sender_fifo": sender_fifo.out(), "sdk_duplicates": sdk_dup.out(),
                           "checked": checked}
    res["view_changes"] = view_changes(events)
    res["expectations"] = expectations(expect or {}, deliveries, acks or [], subscribers,
                                       res["view_changes"])
    res["ok"] = all(res[k]["count"] == 0 for k in RULES)
    res["ok"] = res["ok"] and res["view_changes"]["ok"]
    return res


def expectations(expect: dict[str, Any], deliveries: list[Event], acks: list[Event],
                 subscribers: set[str] | None, vc: dict[str, Any]) -> dict[str, Any]:
    """The scenario's `expect` checked: each broken promise is one count (a late delivery, or
    the removals over the limit). `measured` says what was seen, kept or not."""
    cat = _Cat()
    measured: dict[str, Any] = {}
    bound = expect.get("late_after_ack")
    if bound is not None:
        acked = {(a["group"], a["pid"]): a["ts"] for a in acks if "offset" in a}
        worst = 0.0
        for d in deliveries:
            if subscribers is not None and _member(d) not in subscribers:
                continue
            t = acked.get((d["group"], d.get("pid")))
            if t is None:
                continue
            late = (d.get("recv_ts") or d["ts"]) - t
            worst = max(worst, late)
            if late > bound:
                cat.add(f"{_member(d)} delivered {d['group']} {d.get('pid')} {late:.3f} s after "
                        f"its ack (bound {bound:g} s)", "late_after_ack")
        measured["max_after_ack_s"] = round(worst, 3)
    limit = expect.get("removals")
    if limit is not None:
        removals = vc["changes"]["removals"]
        measured["removals"] = removals
        if removals > limit:
            cat.add(f"{removals} members removed after a suspect timeout (expected at most "
                    f"{limit})", "removals")
    return {**cat.out(), "expect": {k: v for k, v in expect.items() if v is not None},
            "measured": measured}


def view_change_lines(vc: dict[str, Any]) -> list[str]:
    """The view-change accounting in words: the total, then each user with several instances
    (the others are one member each: their lines would repeat the total's parts)."""
    c = vc["changes"]
    head = (f"view changes: {vc['installs']} installs, "
            + ("all" if vc["ok"] else f"{vc['unexplained']['count']} NOT") + " explained by "
            f"the members' own comings and goings ({c['joins']} joins, {c['rejoins']} rejoins, "
            f"{c['removals']} removals after a suspect timeout, {c['leaves']} leaves; "
            f"{vc['resumed']} disconnects resumed at no cost)")
    out = [head]
    for name, u in sorted(vc["by_user"].items()):
        if u["instances"] > 1:
            out.append(f"  user {name} ({u['instances']} instances): {u['disconnects']} "
                       f"disconnects, {u['resumed']} resumed, {u['removals']} removals, "
                       f"{u['rejoins']} rejoins -> {u['installs']} installs changed it")
    out += [f"  unexplained: {x}" for x in vc["unexplained"]["examples"]]
    return out


#: the server events the view-change accounting reads (only servers write them)
_SERVER_VIEW_EVENTS = ("view.install", "view.propose", "member.suspect", "member.resume")


def _user_of(member: str) -> str:
    return member.split("#", 1)[0]  # notify.core.users.user_of, without importing the server


def view_changes(events: list[Event]) -> dict[str, Any]:
    """Account for every view change (`view.install` in the server logs) by the members' own
    comings and goings (issue 29: a user whose devices flap must not cause a storm).

    Per group, in log order, each install is compared with the previous one. A member added
    is its own coming: a *join* (first time) or a *rejoin* (after it was removed). A member
    removed is its own going when the server had suspected it (`member.suspect`, its
    connection lost, with no `member.resume` since: a *removal* after the suspect timeout) or
    the change was its leave (`view.propose{reason: leave}`). A disconnect the server resumed
    (`member.resume`, back within the suspect timeout) costs no view change.

    An install is *unexplained* when it changes no member (`no_change`), or removes a member
    that was connected and had not left (`removed_connected`: a false removal); and a member
    removed more often than its own log says it lost its connection (`client.disconnect`)
    is `more_removals_than_disconnects`. `ok` is true when nothing is unexplained: then the
    count of view changes is within what the members' own comings and goings explain
    (`installs` ≤ `explained_changes`, a merged install carrying several)."""
    by_group: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        if e.get("event") in _SERVER_VIEW_EVENTS and e.get("group") is not None:
            by_group[str(e["group"])].append(e)
    disconnects: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("event") == "client.disconnect":
            disconnects[_member(e)] += 1
    bad = _Cat()
    changes = dict.fromkeys(("joins", "rejoins", "removals", "leaves"), 0)
    per: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(
        ("suspects", "resumed", "removals", "rejoins"), 0))
    user_installs: dict[str, int] = defaultdict(int)  # installs that change one of its instances
    installs = explained = 0
    rank = {"member.resume": 0, "member.suspect": 1, "view.propose": 2, "view.install": 3}
    for g, evs in sorted(by_group.items()):
        evs.sort(key=lambda e: (e["ts"], rank[e["event"]]))
        prev: set[str] | None = None
        ever: set[str] = set()
        away: set[str] = set()  # suspected, not resumed
        leaving: set[str] = set()
        prev_view: Any = None
        for e in evs:
            ev = e["event"]
            if ev == "member.suspect":
                away.add(_member(e))
                per[_member(e)]["suspects"] += 1
            elif ev == "member.resume":
                away.discard(_member(e))
                per[_member(e)]["resumed"] += 1
            elif ev == "view.propose":
                if e.get("reason") == "leave" and prev is not None:
                    leaving |= prev - set(e.get("members") or ())
            elif ev == "view.install":
                cur = set(e.get("members") or ())
                before = prev or set()
                if prev is not None and cur == prev:
                    if e.get("view") != prev_view:  # (one install logged twice: not a change)
                        installs += 1
                        bad.add(f"{g} view {e.get('view')}: installed with no member changed",
                                "no_change")
                    prev_view = e.get("view")
                    continue
                installs += 1
                added, removed = cur - before, before - cur
                own = removed & (away | leaving)
                for m in added:
                    kind = "rejoins" if m in ever else "joins"
                    changes[kind] += 1
                    if kind == "rejoins":
                        per[m]["rejoins"] += 1
                for m in own:
                    kind = "leaves" if m in leaving and m not in away else "removals"
                    changes[kind] += 1
                    if kind == "removals":
                        per[m]["removals"] += 1
                for user in {_user_of(m) for m in added | removed}:
                    user_installs[user] += 1
                if removed - own:
                    bad.add(f"{g} view {e.get('view')}: removed {sorted(removed - own)} while "
                            "connected (not suspected, not leaving)", "removed_connected")
                else:
                    explained += 1
                ever |= cur
                away -= cur
                leaving -= removed
                prev, prev_view = cur, e.get("view")
    for m, c in sorted(per.items()):
        if m in disconnects and c["removals"] > disconnects[m]:
            bad.add(f"{m} removed {c['removals']} times after {disconnects[m]} disconnects",
                    "more_removals_than_disconnects")
    users: dict[str, dict[str, int]] = {}
    for m in sorted(set(per) | set(disconnects)):
        u = users.setdefault(_user_of(m), {"instances": 0, "disconnects": 0, "suspects": 0,
                                           "resumed": 0, "removals": 0, "rejoins": 0,
                                           "installs": 0})
        u["instances"] += 1
        u["disconnects"] += disconnects.get(m, 0)
        for k, n in per.get(m, {}).items():
            u[k] += n
    for name, u in users.items():
        u["installs"] = user_installs.get(name, 0)
    return {"installs": installs, "explained_installs": explained,
            "explained_changes": sum(changes.values()), "changes": changes,
            "suspects": sum(c["suspects"] for c in per.values()),
            "resumed": sum(c["resumed"] for c in per.values()),
            "unexplained": bad.out(), "by_user": users, "ok": bad.count == 0}


def check_run(out: Path, subscribers: set[str] | None = None) -> dict[str, Any]:
    """The verdict over a run directory: `out/logs` (client and server event logs) and
    `out/acks` (the publishers' acknowledgements)."""
    events, bad = read_jsonl(log_files(out / "logs", "events-"))
    acks, bad_acks = read_jsonl(log_files(out / "acks", "acks-"))
    if subscribers is None:
        # the member ids of the subscriber processes (the log's `node` is the client's name;
        # its member id may be another user's instance: `alice#subscriber-1`)
        subscribers = {_member(e) for e in events
                       if str(e.get("node", "")).startswith("subscriber-")} or None
    expect = None
    if (out / "scenario.yaml").exists():
        from notify_chaos.scenario import ScenarioError, load

        try:
            expect = load(out / "scenario.yaml").expect.model_dump()
        except ScenarioError:
            expect = None  # a run of an older format: no expectations to check
    res = check(events, acks, subscribers, gone_ends_membership=False, expect=expect)
    res["checked"]["bad_lines"] = bad + bad_acks
    return res
