"""The servers a benchmark compares, each run as its own process by `bench.fanout`.

    python -m bench.peers relay    --port N   # bare `websockets` relay: every frame to everyone
    python -m bench.peers socketio --port N   # python-socketio rooms on aiohttp
    python -m bench.peers notify   --port N [--profile FILE]   # NotifyServer, in-memory log
    python -m bench.peers notify-sqlite --port N               # NotifyServer, SQLite log
    python -m bench.peers notify --port N --api-key app=SECRET  # + the server API (issue 31)

The relay is the ceiling for a Python WebSocket fan-out server: no parsing, no state, one
`websockets.broadcast` of the received bytes to every open connection (the sender included, as
notify delivers to the sender too). The socket.io server puts every client in one room on a
`join` event and re-emits each `pub` event to the room. `notify` starts `NotifyServer` with its
defaults, so what is measured is what `notify serve` runs (minus the CLI's logging setup);
`--profile FILE` runs it under cProfile and dumps the stats to FILE on SIGTERM. `--api-key
NAME=SECRET` also serves the server API (`ApiServer`, docs/api.md) on a free port, announced as
`READY PORT api=API_PORT`; `--api-rate` (default 0: no limit, where `notify serve` has 100
requests/s per key) is its per-key rate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from notify import eventloop

if TYPE_CHECKING:
    from notify.server.app import NotifyServer


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def run_relay(host: str, port: int) -> None:
    from websockets.asyncio.server import ServerConnection, broadcast, serve

    server = None

    async def handler(ws: ServerConnection) -> None:
        assert server is not None
        conns = server.connections
        while True:
            try:
                data = await ws.recv(decode=False)
            except Exception:  # closed
                return
            broadcast(conns, data, text=True)

    server = await serve(handler, host, port, compression=None, max_size=1 << 20)
    _ready(port)
    await _until_signalled()
    server.close()
    await server.wait_closed()


async def run_socketio(host: str, port: int) -> None:
    import socketio
    from aiohttp import web

    sio = socketio.AsyncServer(async_mode="aiohttp", cors_allowed_origins="*")
    app = web.Application()
    sio.attach(app)

    @sio.on("join")  # type: ignore[untyped-decorator]
    async def join(sid: str, room: str) -> bool:
        await sio.enter_room(sid, room)
        return True

    @sio.on("pub")  # type: ignore[untyped-decorator]
    async def pub(sid: str, data: dict[str, object]) -> None:
        await sio.emit("msg", data, room="bench")

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    _ready(port)
    await _until_signalled()
    await runner.cleanup()


#: the server API of a notify peer: (key name, secret, requests/s per key), or None
Api = tuple[str, str, float] | None


async def _serve_notify(server: NotifyServer, port: int, api: Api) -> None:
    """Start `server`, and the server API on it if asked; until signalled."""
    await server.start()
    api_server = None
    if api is not None:
        from notify.api.app import ApiServer
        from notify.api.keys import ApiKey, Keyring

        name, secret, rate = api
        api_server = ApiServer(server, Keyring([ApiKey.of(name, secret=secret)]),
                               host=server.host, port=0, rate=rate)
        await api_server.start()
    _ready(port, api_server.port if api_server is not None else None)
    await _until_signalled()
    if api_server is not None:
        await api_server.stop()
    await server.stop()


async def run_notify(host: str, port: int, api: Api = None) -> None:
    from notify.core import CoreConfig
    from notify.server.app import NotifyServer

    await _serve_notify(NotifyServer(CoreConfig(), host=host, port=port), port, api)


async def run_notify_sqlite(host: str, port: int, durability: str = "full",
                            api: Api = None) -> None:
    """What `notify serve` runs by default: the SQLite log with group commit, in a fresh dir
    (`durability="full"`: published after fsync; "normal": survives a killed process only)."""
    import tempfile
    from pathlib import Path

    from notify.core import CoreConfig
    from notify.server.app import NotifyServer
    from notify.storage.sqlite import SqliteLog

    with tempfile.TemporaryDirectory(prefix="notify-bench-") as d:
        server = NotifyServer(CoreConfig(), host=host, port=port,
                              store=SqliteLog(Path(d) / "notify.db",
                                              durability="normal" if durability == "normal"
                                              else "full"))
        await _serve_notify(server, port, api)


def _ready(port: int, api_port: int | None = None) -> None:
    print(f"READY {port}" + (f" api={api_port}" if api_port is not None else ""), flush=True)


def _quiet_logs() -> None:
    import logging

    import structlog

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
                        logger_factory=structlog.PrintLoggerFactory(sys.stderr))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.peers")
    p.add_argument("system", choices=["relay", "socketio", "notify", "notify-sqlite",
                                      "notify-sqlite-normal"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--event-loop", choices=["auto", "uvloop", "asyncio"], default="auto",
                   help="auto (default): uvloop if installed, as `notify serve` does")
    p.add_argument("--profile", metavar="FILE", default=None,
                   help="run under cProfile (timer: CPU time), dump stats to FILE on exit")
    p.add_argument("--api-key", metavar="NAME=SECRET", default=None,
                   help="notify: also serve the server API with this key, on a free port")
    p.add_argument("--api-rate", type=float, default=0.0,
                   help="the API's requests/s per key (default 0: no limit)")
    a = p.parse_args(argv)
    _quiet_logs()
    api: Api = None
    if a.api_key is not None:
        if not a.system.startswith("notify"):
            p.error("--api-key is for the notify servers")
        name, _, secret = a.api_key.partition("=")
        api = (name, secret, a.api_rate)
    runners: dict[str, Callable[[str, int], Awaitable[None]]] = {
        "relay": run_relay, "socketio": run_socketio,
        "notify": lambda h, p: run_notify(h, p, api),
        "notify-sqlite": lambda h, p: run_notify_sqlite(h, p, "full", api),
        "notify-sqlite-normal": lambda h, p: run_notify_sqlite(h, p, "normal", api)}
    coro = runners[a.system](a.host, a.port)
    if a.profile is None:
        eventloop.run(coro, a.event_loop)
        return
    import cProfile
    import time

    # CPU time, not wall time: on a machine shared with the clients (and anything else), wall
    # time would charge whatever ran while this process waited to the function it was in.
    prof = cProfile.Profile(time.process_time)
    prof.enable()
    try:
        eventloop.run(coro, a.event_loop)
    finally:
        prof.disable()
        with contextlib.suppress(OSError):
            prof.dump_stats(a.profile)


if __name__ == "__main__":
    main()
