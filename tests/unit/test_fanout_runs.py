"""A run of fan-outs (one stored batch) reaches each member as one `batch` push (issue 14).

The driver packs the fan-outs the core lets go together, to the same members, into one
`batch` frame per member, and the publisher's answers into one more: the per-member cost is paid
once per run. What each member receives, and in what order, must not change.
"""

from __future__ import annotations

from typing import Any

import orjson

from notify.core import CoreConfig, Hub, Send
from notify.core.actions import Confirm, Published
from notify.runtime import Driver
from notify.runtime.frames import unbatch
from tests.unit.drive import Net, delivered, form


def _three_in_one_write(net: Net, a: int) -> None:
    """`a` publishes three messages while the group's write is under way: they are stored
    together, and let go together when that write is done."""
    net.writes_held = True
    net.publish(a, "p1")            # starts the write of p1
    net.publish(a, "p2")
    net.publish(a, "p3")            # p2 and p3 wait in the intake
    net.finish_writes()             # p1 stored: p2 + p3 go to storage as one batch
    net.pushes.clear()
    for conn in list(net.inbox):    # p1's frames
        net.take(conn)
    net.finish_writes()             # the batch stored: its two fan-outs come out as one run


def test_a_stored_batch_is_one_push_per_member_with_its_frame_count() -> None:
    net = Net()
    a, b, c = form(net, "a", "b", "c")
    _three_in_one_write(net, a)
    assert sorted(net.pushes) == sorted([(a, 2), (b, 2), (c, 2), (a, 2)]), net.pushes
    # the publisher's own copy first, then its two answers in one push
    assert [f["type"] for f in net.take(a)] == ["deliver", "deliver", "published", "published"]
    for conn in (b, c):
        frames = net.take(conn)
        assert [f["type"] for f in frames] == ["deliver", "deliver"]
        assert delivered(frames) == sorted(delivered(frames))


def test_runs_keep_every_message_once_and_in_order() -> None:
    net = Net()
    a, b = form(net, "a", "b")
    net.publish(a, "p0")  # stored at once: a run of one goes as a plain frame
    assert (b, 1) in net.pushes
    net.writes_held = True
    for i in range(1, 6):
        net.publish(a, f"p{i}")
    net.finish_writes()   # p1
    net.finish_writes()   # p2..p5, one run
    assert (b, 4) in net.pushes
    frames = net.take(b)
    assert all(f["type"] == "deliver" for f in frames)
    got = delivered(frames)
    assert len(got) == len(set(got)) == 6 and got == sorted(got), got
    assert [f["payload"] for f in frames] == [f"p{i}" for i in range(6)]


class _Recorder:
    """A transport that records each push: (conn, frames as received, bounded, n)."""

    def __init__(self) -> None:
        self.pushes: list[tuple[int, list[dict[str, Any]], bool, int]] = []

    def push(self, conn: int, data: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        self.pushes.append((conn, unbatch(orjson.loads(data)), bounded, frames))


def test_a_run_of_sends_is_one_push_per_member_in_its_order() -> None:
    host = _Recorder()
    hub = Hub(CoreConfig(), new_token=lambda: "t", epoch=1)
    run = Driver(hub, transport=host, store=None, observer=None,  # type: ignore[arg-type]
                 clock=lambda: 0.0).run
    c1, c2 = Confirm("g", (1,)), Confirm("g", (2,))
    run([Send(1, c1), Send(2, c1), Send(3, c1),    # the core: each confirm to every member
         Send(1, c2), Send(2, c2), Send(3, c2),
         Send(2, Published("r", "p", 7)),
         Send(3, Published("r", "q", 5), replay=True), Send(3, Published("r", "s", 6))])
    by_conn = {conn: (frames, bounded, n) for conn, frames, bounded, n in host.pushes
               if conn != 3}
    assert by_conn[1] == ([{"type": "confirm", "group": "g", "offsets": [1]},
                           {"type": "confirm", "group": "g", "offsets": [2]}], True, 2)
    assert [f["type"] for f in by_conn[2][0]] == ["confirm", "confirm", "published"]
    assert by_conn[2][2] == 3
    # a replay frame is pushed apart (it does not count against the bound), order kept
    three = [(bounded, [f.get("offsets") or f.get("id") for f in frames])
             for conn, frames, bounded, _ in host.pushes if conn == 3]
    assert three == [(True, [[1], [2]]), (False, ["q"]), (True, ["s"])]
