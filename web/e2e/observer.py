"""A Python SDK member for the browser tests (fixtures.ts `observe`): joins one group and prints
every event it gets as one JSON object per line on stdout, so a test can compare what the
browsers saw with what the reference client saw (convergence: same total-order sequence, same
views).

    observer.py --url ws://127.0.0.1:PORT --group G [--member M] [--accept-from members|any]

The token, if any, comes from $NOTIFY_TOKEN (not argv: `ps` shows argv). Lines: `ready` once
joined, then `message`, `view`, `view_changing`, `resumed`, `caught_up`, `state`, `removed`,
`reset`, and `connection` (state changes of the client). Commands on stdin, one JSON per line:
`{"op": "publish", "req": 1, "payload": ..., "order": "fifo"|"total", "atomic": false,
"same_view": false}`, answered `{"kind": "published", "req": 1, "offset", "committed",
"reason"}` or `{"kind": "error", "req": 1, "error"}`. SIGTERM or the end of stdin: leave and exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from typing import Any

from client_sdk import (
    CaughtUp,
    Group,
    Message,
    Removed,
    Reset,
    StateReceived,
    ViewChanging,
    ViewInstalled,
    ViewResumed,
    connect,
)


def emit(kind: str, **fields: Any) -> None:
    print(json.dumps({"kind": kind, **fields}), flush=True)


def describe(e: object) -> tuple[str, dict[str, Any]]:
    if isinstance(e, Message):
        return "message", {"group": e.group, "offset": e.offset, "stream": e.stream, "seq": e.seq,
                           "sender": e.sender, "view": e.view, "atomic": e.atomic,
                           "payload": e.payload}
    if isinstance(e, ViewInstalled):
        return "view", {"group": e.group, "view": e.view, "members": list(e.members),
                        "joined": list(e.joined), "left": list(e.left), "offset": e.offset}
    if isinstance(e, ViewChanging):
        return "view_changing", {"group": e.group, "proposed": e.proposed,
                                 "members": list(e.members), "reason": e.reason}
    if isinstance(e, ViewResumed):
        return "resumed", {"group": e.group, "view": e.view}
    if isinstance(e, CaughtUp):
        return "caught_up", {"group": e.group, "offset": e.offset, "count": e.count}
    if isinstance(e, StateReceived):
        return "state", {"group": e.group, "offset": e.offset, "reason": e.reason,
                         "bytes": None if e.snapshot is None else len(e.snapshot)}
    if isinstance(e, Removed):
        return "removed", {"group": e.group, "view": e.view, "reason": e.reason}
    if isinstance(e, Reset):
        return "reset", {"group": e.group, "reason": e.reason}
    return type(e).__name__, {"repr": repr(e)}


async def commands(group: Group) -> None:
    """Publish what stdin asks for, each in its own task (an atomic one may wait)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def publish(cmd: dict[str, Any]) -> None:
        try:
            r = await group.publish(cmd.get("payload"), order=cmd.get("order", "fifo"),
                                    atomic=bool(cmd.get("atomic")),
                                    same_view=bool(cmd.get("same_view")))
            emit("published", req=cmd.get("req"), offset=r.offset, committed=r.committed,
                 reason=r.reason)
        except Exception as e:
            emit("error", req=cmd.get("req"), error=f"{type(e).__name__}: {e}")

    async with asyncio.TaskGroup() as tg:
        while line := await reader.readline():
            cmd = json.loads(line)
            if cmd.get("op") == "publish":
                tg.create_task(publish(cmd))
            else:
                emit("error", req=cmd.get("req"), error=f"unknown op {cmd.get('op')!r}")


async def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--member", required=True)
    p.add_argument("--accept-from", choices=["members", "any"], default="members")
    a = p.parse_args()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with connect(a.url, member=a.member, token=os.environ.get("NOTIFY_TOKEN")) as client:
        client.on_state_change(lambda old, new: emit("connection", state=new.value))
        group = await client.join(a.group, accept_from=a.accept_from)
        emit("ready", member=a.member, group=a.group)

        async def events() -> None:
            async for e in group:
                kind, fields = describe(e)
                emit(kind, **fields)

        tasks = [asyncio.create_task(events()), asyncio.create_task(commands(group)),
                 asyncio.create_task(stop.wait())]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in pending:
            t.cancel()
        for t in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for t in done:
            t.result()  # an error in a task is this process's error
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await group.leave()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
