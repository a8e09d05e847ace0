"""The timer's turn with many groups that have a deadline: core only, no sockets.

    python -m bench timer [--groups 3000] [--turns 2000]

A group keeps a deadline for ten minutes after a member leaves it (its departed ids), so a server
with churn holds thousands of groups that have one. Each group here has had a member leave. A
turn is what the server's timer task does each time it wakes (`Driver.tick`, then
`Driver.next_wakeup`), with nothing due; the event loop serves no frame meanwhile. `busy` turns
follow a publish to one group (one group called per turn). Not a DESIGN §8 target: the cost of
the loop's pauses that the latency rows of `bench sdkfanout` feel at scale.
"""

from __future__ import annotations

import argparse
import time

from bench.core import _Host, flush_all
from notify.core import CoreConfig, Hub
from notify.core.events import Hello, Join, Leave, Order, Publish
from notify.runtime import Driver


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench timer", description=__doc__)
    p.add_argument("--groups", type=int, default=3000)
    p.add_argument("--idle", type=int, default=3000, help="groups nobody is in")
    p.add_argument("--sessions", type=int, default=3000,
                   help="sessions whose connection was lost (resumable)")
    p.add_argument("--turns", type=int, default=2000)
    a = p.parse_args(argv)
    hub = Hub(CoreConfig(), new_token=lambda: "t", epoch=1)
    host = _Host()
    now = [0.0]
    driver = Driver(hub, transport=host, store=host, observer=host, clock=lambda: now[0])
    run = driver.run
    per = hub.config.limits.max_groups_per_session  # a pair of members per so many groups
    for c in range(1, 2 * (a.groups // per + 1) + 1):
        run(hub.opened(c, 0.0))
        run(hub.handle(c, Hello(1, f"m{c}"), 0.0))

    for i in range(a.groups):  # m2 publishes, then leaves: its ids are remembered
        name, stays, leaves = f"g{i}", 2 * (i // per) + 1, 2 * (i // per) + 2
        run(hub.handle(stays, Join(f"a{i}", name), 0.0))
        run(hub.handle(leaves, Join(f"b{i}", name), 0.0))
        flush_all(hub, run, name)
        view = hub.groups[name].view.version
        run(hub.handle(leaves, Publish(f"q{i}", name, f"q{i}", view, Order.FIFO, {}), 0.0))
        run(hub.handle(leaves, Leave(f"l{i}", name), 0.0))
        flush_all(hub, run, name)
        assert hub.groups[name].view.members == (f"m{stays}",)
    view = hub.groups["g0"].view.version
    assert all(g.next_deadline() is not None for g in hub.groups.values())  # the departed ids'
    c0 = 2 * (a.groups // per + 1)
    for i in range(a.idle):  # a member joins a group alone and leaves it: nobody is in it
        conn = c0 + 1 + i // per
        if i % per == 0:
            run(hub.opened(conn, 0.0))
            run(hub.handle(conn, Hello(1, f"m{conn}"), 0.0))
        run(hub.handle(conn, Join(f"i{i}", f"idle{i}"), 0.0))
        run(hub.handle(conn, Leave(f"k{i}", f"idle{i}"), 0.0))
        assert hub.groups[f"idle{i}"].idle()
    c0 += a.idle // per + 1
    for conn in range(c0 + 1, c0 + a.sessions + 1):  # resumable for suspect + flush timeouts
        run(hub.opened(conn, 0.0))
        run(hub.handle(conn, Hello(1, f"m{conn}"), 0.0))
        run(hub.closed(conn, 0.0))
    driver.next_wakeup()  # (the first asks every group set up above: not a turn's cost)

    def turns(busy: bool) -> float:
        start = time.perf_counter()
        for t in range(a.turns):
            now[0] += 0.001
            if busy:
                p = Publish(f"r{t}", "g0", f"p{t}", view, Order.FIFO, {"t": t})
                run(hub.handle(1, p, now[0]))
            driver.tick()
            driver.next_wakeup()
        return (time.perf_counter() - start) / a.turns * 1e6

    idle, busy = turns(False), turns(True)
    print(f"{a.groups} groups with a deadline, {a.idle} idle, {a.sessions} sessions resumable: "
          f"a timer turn {idle:.1f} us with nothing called, "
          f"{busy:.1f} us after a publish to one group (its handling included)")
    return 0
