"""Core-only cost per publish: `parse` + `Hub` + the action interpreter, no sockets.

    python -m bench core [--members 50] [--publishes 20000] [--atomic]

One group of `--members` members; one of them publishes 100-byte-ish messages; storage answers
every write at once and the outboxes are no-ops, so what is measured is the server's own work
per message (the edge's parse, the core's rules and write pipeline, the serialisation of the
`deliver` once and its hand-over to every recipient). With `--atomic` every member also ACKs
every message. Not a DESIGN §8 target: a profile aid for the fan-out path (`bench fanout`
measures what users see).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from notify.core import CoreConfig, Hub, LogEvent, Write
from notify.core.actions import Action
from notify.core.events import Ack, FlushOk, Hello, Join
from notify.runtime import CheckpointAction, Driver, Fetched
from notify.wire import parse


class _Host:
    """The driver's ports with nothing behind them."""

    def push(self, conn: int, data: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        pass

    def close(self, conn: int, code: int, reason: str, *, drain: bool) -> None:
        pass

    def write(self, write: Write, done: Callable[[str | None], None]) -> None:
        done(None)

    def fetch(self, group: str, answer: Fetched) -> None:
        answer(None, None)

    def forget(self, group: str) -> None:
        pass

    def event(self, e: LogEvent) -> None:
        pass

    def checkpoint(self, a: CheckpointAction) -> None:
        pass

    def halt(self, reason: str) -> None:
        raise SystemExit(f"halted: {reason}")


def flush_all(hub: Hub, run: Callable[[list[Action]], None], group: str) -> None:
    """Every member a proposal of `group` waits for answers `flush_ok` (members `m<conn>`)."""
    proposal = hub.groups[group].membership.proposal
    for m in sorted(proposal.flush_set) if proposal is not None else ():
        run(hub.handle(int(m[1:]), FlushOk(group, proposal.version), 0.0))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench core", description=__doc__)
    p.add_argument("--members", type=int, default=50)
    p.add_argument("--publishes", type=int, default=20_000)
    p.add_argument("--atomic", action="store_true")
    a = p.parse_args(argv)
    hub = Hub(CoreConfig(), new_token=lambda: "t", epoch=1)
    host = _Host()
    run = Driver(hub, transport=host, store=host, observer=host, clock=lambda: 0.0).run
    for c in range(1, a.members + 1):
        run(hub.opened(c, 0.0))
        run(hub.handle(c, Hello(1, f"m{c}"), 0.0))
        run(hub.handle(c, Join(f"j{c}", "g"), 0.0))
        flush_all(hub, run, "g")
    view = hub.groups["g"].view.version
    atomic = b"true" if a.atomic else b"false"
    frames = [parse(b'{"type":"publish","req":"r%d","group":"g","id":"p%d","view":%d,'
                    b'"atomic":%s,"payload":{"i":%d,"pad":"%s"}}'
                    % (i, i, view, atomic, i, b"x" * 70)) for i in range(a.publishes)]
    start = time.perf_counter()
    for f in frames:
        run(hub.handle(1, f, 0.0))  # type: ignore[arg-type]
        if a.atomic:
            offset = hub.groups["g"].topic.head
            for c in range(1, a.members + 1):
                run(hub.handle(c, Ack("g", (offset,)), 0.0))
    took = time.perf_counter() - start
    print(f"{a.publishes} {'atomic ' if a.atomic else ''}publishes to {a.members} members: "
          f"{took / a.publishes * 1e6:.1f} us each ({a.publishes / took:,.0f}/s)")
    return 0
