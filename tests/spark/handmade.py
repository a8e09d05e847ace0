"""Hand-built event logs with known content: a clean history, and variants that each break one
guarantee so `check` must catch it (issue 5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Line = dict[str, Any]

T0 = 1_800_000_000.0
MEMBERS = ("alice", "bob", "carol")


def clean_history() -> dict[str, list[Line]]:
    """Node -> its lines. View 1 = {alice, bob, carol}; in it alice sends two FIFO messages,
    bob two total-order ones, carol one atomic (committed) and one atomic that is aborted (never
    delivered); then carol is removed: view 2 = {alice, bob}, where alice sends one more."""
    server: list[Line] = []
    clients: dict[str, list[Line]] = {m: [] for m in MEMBERS}
    t = T0

    def sv(event: str, **f: Any) -> None:
        server.append({"ts": t, "event": event, "node": "server", "group": "g1", **f})

    msgs = [  # offset, stream, seq, sender, atomic
        (1, "fifo:alice", 1, "alice", False), (2, "total", 1, "bob", False),
        (3, "fifo:alice", 2, "alice", False), (4, "total", 2, "bob", False),
        (5, "fifo:carol", 1, "carol", True),
    ]
    for m in MEMBERS:
        sv("conn.open", member=m, session=f"s-{m}", resumed=False)
    sv("view.install", view=1, members=list(MEMBERS), duration_ms=3.0, previous=0)
    for m in MEMBERS:
        clients[m].append({"ts": t, "event": "client.view", "node": m, "group": "g1", "member": m,
                           "view": 1, "members": list(MEMBERS)})
    for off, stream, seq, sender, atomic in msgs:
        t += 0.01
        sv("msg.accept", view=1, member=sender, offset=off, stream=stream, seq=seq, sender=sender,
           order="total" if stream == "total" else "fifo", atomic=atomic, bytes=20)
    t += 0.01
    sv("msg.accept", view=1, member="carol", offset=6, stream="fifo:carol", seq=2,
       sender="carol", order="fifo", atomic=True, bytes=20)
    sv("atomic.commit", view=1, offset=5, sender="carol", duration_ms=4.0)
    n = dict.fromkeys(MEMBERS, 0)
    for off, stream, seq, sender, atomic in msgs:
        for i, m in enumerate(MEMBERS):
            n[m] += 1
            clients[m].append({"ts": t, "event": "client.deliver", "node": m, "group": "g1",
                               "member": m, "view": 1, "offset": off, "stream": stream,
                               "seq": seq, "sender": sender, "atomic": atomic, "msg_view": 1,
                               "sent_ts": t - 0.005, "recv_ts": t + 0.001 * i, "n": n[m]})
        t += 0.01
    # carol drops for good; the atomic at offset 6 is aborted at the next install
    clients["carol"].append({"ts": t, "event": "client.disconnect", "node": "carol",
                             "member": "carol", "reason": "network"})
    sv("conn.close", member="carol", session="s-carol", code=1006, reason="")
    sv("member.suspect", view=1, member="carol")
    t += 3.0
    sv("view.propose", view=1, proposed=2, reason="failure", members=["alice", "bob"])
    sv("atomic.abort", view=1, offset=6, sender="carol", reason="member_failed")
    t += 0.01
    sv("view.install", view=2, members=["alice", "bob"], duration_ms=10.0, previous=1)
    for m in ("alice", "bob"):
        clients[m].append({"ts": t, "event": "client.view", "node": m, "group": "g1", "member": m,
                           "view": 2, "members": ["alice", "bob"]})
    t += 0.01
    sv("msg.accept", view=2, member="alice", offset=7, stream="fifo:alice", seq=3,
       sender="alice", order="fifo", atomic=False, bytes=20)
    for m in ("alice", "bob"):
        n[m] += 1
        clients[m].append({"ts": t, "event": "client.deliver", "node": m, "group": "g1",
                           "member": m, "view": 2, "offset": 7, "stream": "fifo:alice",
                           "seq": 3, "sender": "alice", "atomic": False, "msg_view": 2,
                           "sent_ts": t - 0.004, "recv_ts": t + 0.002, "n": n[m]})
    # bob hands off for 0.8 s and resumes
    t += 0.1
    clients["bob"].append({"ts": t, "event": "client.disconnect", "node": "bob", "member": "bob",
                           "reason": "handoff"})
    sv("member.suspect", view=2, member="bob")
    t += 0.8
    clients["bob"].append({"ts": t, "event": "client.reconnect", "node": "bob", "member": "bob",
                           "gap_ms": 800.0, "resumed": True})
    sv("member.resume", view=2, member="bob", gap_ms=800.0)
    return {"server": server, **clients}


def _deliveries(h: dict[str, list[Line]], member: str) -> list[Line]:
    return [x for x in h[member] if x["event"] == "client.deliver"]


def reordered_fifo() -> dict[str, list[Line]]:
    """bob delivers alice's seq 2 before her seq 1 (G3)."""
    h = clean_history()
    d = _deliveries(h, "bob")
    a1, a2 = d[0], d[2]  # fifo:alice seq 1 and seq 2
    a1["recv_ts"], a2["recv_ts"] = a2["recv_ts"], a1["recv_ts"]
    a1["n"], a2["n"] = a2["n"], a1["n"]
    return h


def missing_in_view() -> dict[str, list[Line]]:
    """bob installs view 2 without having delivered bob's own total message at offset 4 (G2)."""
    h = clean_history()
    h["bob"] = [x for x in h["bob"] if not (x["event"] == "client.deliver" and x["offset"] == 4)]
    return h


def aborted_delivered() -> dict[str, list[Line]]:
    """alice delivers carol's atomic message at offset 6, which the server aborted (G5)."""
    h = clean_history()
    last = _deliveries(h, "alice")[4]
    h["alice"].append({**last, "offset": 6, "seq": 2, "recv_ts": last["recv_ts"] + 0.001,
                       "n": 99})
    h["alice"].sort(key=lambda x: x.get("recv_ts", x["ts"]))
    return h


def duplicate() -> dict[str, list[Line]]:
    """alice gets offset 7 twice, e.g. replayed after a resume (G7)."""
    h = clean_history()
    d = _deliveries(h, "alice")[-1]
    h["alice"].append({**d, "recv_ts": d["recv_ts"] + 0.5, "n": d["n"] + 1})
    return h


VARIANTS = {
    "reordered_fifo": (reordered_fifo, "G3 FIFO"),
    "missing_in_view": (missing_in_view, "G2 virtual synchrony"),
    "aborted_delivered": (aborted_delivered, "G5 atomic"),
    "duplicate": (duplicate, "G7/G8 duplicate"),
}


def write(history: dict[str, list[Line]], directory: Path, *, junk: list[str] = ()) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for node, lines in history.items():
        with open(directory / f"events-{node}.jsonl", "w") as f:
            for x in lines:
                f.write(json.dumps(x) + "\n")
            for j in junk if node == "server" else ():
                f.write(j + "\n")
    return directory
