"""`notify` command line: `notify serve` runs the server (more subcommands come with the SDK)."""

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
    p.add_argument("--data-dir", default="./data", help="where logs and state live")
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
    server = NotifyServer(config, host=a.host, port=a.port, event_log=events)
    await server.start()
    structlog.get_logger("notify").info("config", timeouts=str(config.timeouts),
                                        limits=str(config.limits))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="notify", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    _serve_args(sub.add_parser("serve", help="run the notification server"))
    a = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, a.log_level.upper(), logging.INFO),
                        stream=sys.stderr, format="%(message)s")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(
        getattr(logging, a.log_level.upper(), logging.INFO)))
    if a.cmd == "serve":
        asyncio.run(_serve(a))
    return 0


if __name__ == "__main__":
    sys.exit(main())
