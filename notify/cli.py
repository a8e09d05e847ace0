"""`notify` command line.

`notify serve` runs the server; `notify sub`, `notify pub` and `notify watch` try it from a
terminal: `notify watch doc-1` in one, `notify pub doc-1 '{"op": 1}'` in another.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

import structlog

from notify.core import CoreConfig, Limits, Timeouts
from notify.eventlog import EventLog


def _serve_args(p: argparse.ArgumentParser) -> None:
    d, lim = Timeouts(), Limits()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--data-dir", default="./data", help="where the log and event logs live")
    p.add_argument("--store", choices=["sqlite", "memory"], default="sqlite",
                   help="sqlite: DATA_DIR/notify.db, survives restarts (default); memory: does not")
    p.add_argument("--durability", choices=["normal", "full"], default="normal",
                   help="normal survives a killed server; full also a power loss (fsync)")
    p.add_argument("--event-log", nargs="?", const="", default=None, metavar="DIR",
                   help="write the delivery event log (JSON Lines); default DIR: DATA_DIR/events")
    p.add_argument("--heartbeat-interval", type=float, default=d.heartbeat_interval)
    p.add_argument("--heartbeat-timeout", type=float, default=d.heartbeat_timeout)
    p.add_argument("--suspect-timeout", type=float, default=d.suspect_timeout)
    p.add_argument("--install-hold", type=float, default=d.install_hold)
    p.add_argument("--flush-timeout", type=float, default=d.flush_timeout)
    p.add_argument("--ack-timeout", type=float, default=d.ack_timeout)
    p.add_argument("--max-frame-bytes", type=int, default=lim.max_frame_bytes)
    p.add_argument("--max-outbound-frames", type=int, default=lim.max_outbound_frames)
    p.add_argument("--retain-messages", type=int, default=lim.retain_messages)
    p.add_argument("--log-level", default="info")


def config_from_args(a: argparse.Namespace) -> CoreConfig:
    t = Timeouts(a.heartbeat_interval, a.heartbeat_timeout, a.suspect_timeout, a.install_hold,
                 a.flush_timeout, a.ack_timeout)
    if not 0 < t.heartbeat_interval < t.heartbeat_timeout:
        raise SystemExit("--heartbeat-interval must be positive and below --heartbeat-timeout")
    lim = Limits(max_frame_bytes=a.max_frame_bytes, max_outbound_frames=a.max_outbound_frames,
                 retain_messages=a.retain_messages)
    return CoreConfig(t, lim, event_log=a.event_log is not None)


async def _serve(a: argparse.Namespace) -> None:
    from notify.server import NotifyServer

    config = config_from_args(a)
    events = None
    if a.event_log is not None:
        events = EventLog(a.event_log or Path(a.data_dir) / "events", "server")
    Path(a.data_dir).mkdir(parents=True, exist_ok=True)
    from notify.storage import MemoryLog, MessageLog, SqliteLog

    store: MessageLog = SqliteLog(Path(a.data_dir) / "notify.db", durability=a.durability) \
        if a.store == "sqlite" else MemoryLog(config.limits.retain_messages)
    server = NotifyServer(config, host=a.host, port=a.port, event_log=events, store=store)
    await server.start()
    structlog.get_logger("notify").info("config", store=a.store, data_dir=a.data_dir,
                                        timeouts=str(config.timeouts),
                                        limits=str(config.limits))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("group")
    p.add_argument("--url", default="ws://127.0.0.1:8765")
    p.add_argument("--member", default=None, help="member id (default: cli-<random>)")
    p.add_argument("--accept-from", choices=["members", "any"], default="members")


def _member(a: argparse.Namespace) -> str:
    import secrets

    return str(a.member or f"cli-{secrets.token_hex(3)}")


def _payload(text: str) -> object:
    import orjson

    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text  # not JSON: send it as a string


async def _pub(a: argparse.Namespace) -> int:
    from client_sdk import Connection, PublishRejected

    async with await Connection.connect(a.url, _member(a)) as c:
        await c.join(a.group)
        try:
            r = await c.publish(a.group, _payload(a.message), order=a.order, atomic=a.atomic,
                                same_view=a.same_view)
        except PublishRejected as e:
            print(f"rejected: {e.code}", file=sys.stderr)
            return 1
        line = f"published offset={r.offset} id={r.id}"
        if a.atomic:
            o = await c.outcome(r.id)
            line += f" committed={o.committed}" + (f" reason={o.reason}" if o.reason else "")
        print(line)
        await c.leave(a.group)
    return 0


async def _sub(a: argparse.Namespace, *, views: bool) -> int:
    import orjson

    from client_sdk import Connection, Message, ViewChanging, ViewInstalled

    async with await Connection.connect(a.url, _member(a)) as c:
        await c.join(a.group, accept_from=a.accept_from)
        q = c.events(a.group)
        while True:
            e = await q.get()
            if isinstance(e, Message):
                body = orjson.dumps(e.payload).decode()
                print(f"{e.offset} {e.stream}#{e.seq} {e.sender}: {body}" if views else body,
                      flush=True)
            elif views and isinstance(e, ViewInstalled):
                print(f"view {e.view}: {', '.join(e.members)}"
                      f"{' +' + ','.join(e.joined) if e.joined else ''}"
                      f"{' -' + ','.join(e.left) if e.left else ''}", flush=True)
            elif views and isinstance(e, ViewChanging):
                print(f"# view {e.proposed} proposed ({e.reason}): {', '.join(e.members)}",
                      flush=True)
            elif views:
                print(f"# {type(e).__name__} {e}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="notify", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    _serve_args(sub.add_parser("serve", help="run the notification server"))
    p = sub.add_parser("pub", help="publish one message to a group")
    _client_args(p)
    p.add_argument("message", help="JSON payload (or any text, sent as a string)")
    p.add_argument("--order", choices=["fifo", "total"], default="fifo")
    p.add_argument("--atomic", action="store_true", help="all-or-nothing; prints the outcome")
    p.add_argument("--same-view", action="store_true")
    _client_args(sub.add_parser("sub", help="print a group's messages, one JSON per line"))
    _client_args(sub.add_parser("watch", help="print a group's views and messages as they change"))
    for name in ("pub", "sub", "watch"):
        sub.choices[name].add_argument("--log-level", default="warning")
    a = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, a.log_level.upper(), logging.INFO),
                        stream=sys.stderr, format="%(message)s")
    # one line per connection is noise at INFO; the delivery event log records them
    logging.getLogger("websockets").setLevel(logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(
        getattr(logging, a.log_level.upper(), logging.INFO)))
    try:
        if a.cmd == "serve":
            asyncio.run(_serve(a))
        elif a.cmd == "pub":
            return asyncio.run(_pub(a))
        else:
            return asyncio.run(_sub(a, views=a.cmd == "watch"))
    except KeyboardInterrupt:
        return 130
    except OSError as e:
        print(f"notify: cannot reach {getattr(a, 'url', '')}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
