"""Shard leases on a real 3-node NATS cluster (notify/cluster/leases.py, DESIGN §9).

Short timers keep each test within seconds: lease TTL 1.5 s (node TTL 1 s, heartbeat 0.25 s,
settle 0.3 s) where a takeover is measured, 3 s where nothing may be lost. Every wait is
bounded. Each leases instance has its own NATS connection,
first to "its" server (instance i -> server i), so killing a server moves some of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from notify.cluster.ownership import Acquired, Action, Lost, NodeDown
from notify.cluster.shards import SHARDS, preferred
from tests.cluster.conftest import NatsCluster

pytest.importorskip("nats", reason="the cluster extra (nats-py) is not installed")

import nats
import nats.js.errors
from nats.aio.client import Client

from notify.cluster.leases import ClusterLeases

T = TypeVar("T")

#: for the takeover tests: what they measure is in units of the lease TTL
FAST: dict[str, Any] = {"lease_ttl": 1.5, "node_ttl": 1.0, "heartbeat": 0.25, "settle": 0.3}
TTL = FAST["lease_ttl"]
#: for the tests that assert nothing is lost: with 3 nodes in one test process each handling
#: every renewal of 256 shards, a host busy with other work can starve the loop for a good
#: part of a 1.5 s TTL, and then losing leases is the right (safe) outcome, not a bug
STEADY: dict[str, Any] = {"lease_ttl": 3.0, "node_ttl": 2.0, "heartbeat": 0.5, "settle": 0.3}
#: every test but the split one runs 64 shards, not 256: each renewal is an fsync'd R3 write
#: and reaches every node, and all of them share this host
FEW = 64


@dataclass
class Instance:
    name: str
    nc: Client
    leases: ClusterLeases
    #: (monotonic time, action) for every action delivered to the node, in order
    seen: list[tuple[float, Action]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def actions(self, kind: type, since: float = 0.0) -> list[Any]:
        return [a for t, a in list(self.seen) if isinstance(a, kind) and t >= since]


async def _quiet(_: Exception) -> None:
    pass  # nats-py logs every reconnect attempt otherwise


async def connect(cluster: NatsCluster, first: int) -> Client:
    urls = cluster.urls
    return await nats.connect(
        servers=[urls[first]] + [u for i, u in enumerate(urls) if i != first],
        dont_randomize=True, connect_timeout=2, reconnect_time_wait=0.1,
        max_reconnect_attempts=-1, error_cb=_quiet)


async def instance(cluster: NatsCluster, name: str, first: int,
                   clock: Callable[[], float] = time.monotonic, shards: int = FEW,
                   **kw: Any) -> Instance:
    nc = await connect(cluster, first)
    holder: list[Instance] = []

    def on_actions(actions: list[Action]) -> None:
        now = time.monotonic()
        holder[0].seen.extend((now, a) for a in actions)

    leases = ClusterLeases(nc, name, info={"server": first}, on_actions=on_actions,
                           on_failure=lambda why: holder[0].failures.append(why),
                           clock=clock, shards=shards, **{**FAST, **kw})
    holder.append(Instance(name, nc, leases))
    return holder[0]


async def close(*insts: Instance) -> None:
    for i in insts:
        with contextlib.suppress(Exception):
            await i.leases.abort()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(i.nc.close(), 5)


async def until(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll `check` every 20 ms; returns the time it held (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.02)
    return time.monotonic()


def holders(insts: list[Instance]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for i in insts:
        for shard in i.leases.held():
            out.setdefault(shard, []).append(i.name)
    return out


def split_as_preferred(insts: list[Instance]) -> bool:
    """Every shard held by exactly one instance, the one rendezvous hashing prefers."""
    names = [i.name for i in insts]
    h = holders(insts)
    return len(h) == insts[0].leases.shards and all(
        owners == [preferred(s, names)] for s, owners in h.items())


def views_agree(insts: list[Instance]) -> bool:
    for i in insts:
        for other in insts:
            for shard, term in other.leases.held().items():
                lease = i.leases.owner(shard)
                if lease is None or (lease.node, lease.term) != (other.name, term):
                    return False
    return True


async def started(cluster: NatsCluster, n: int = 3, **kw: Any) -> list[Instance]:
    insts = [await instance(cluster, f"node{i}", i, **kw) for i in range(n)]
    await asyncio.wait_for(asyncio.gather(*(i.leases.start(15) for i in insts)), 20)
    await asyncio.wait_for(asyncio.gather(*(i.leases.ready.wait() for i in insts)), 10)
    await until(lambda: split_as_preferred(insts), 10, "shards split as preferred")
    return insts


@pytest.mark.timeout(60)
async def test_three_nodes_split_every_shard_as_rendezvous_hashing_prefers(
        nats_cluster: NatsCluster) -> None:
    insts = await started(nats_cluster, shards=SHARDS, **STEADY)
    ttl = STEADY["lease_ttl"]
    try:
        names = [i.name for i in insts]
        # every node's routing view comes to agree with the holders, terms included
        await until(lambda: views_agree(insts), 2, "routing views agree")
        assert all(i.leases.live_nodes() == frozenset(names) for i in insts)
        assert all(i.leases.node_info(o.name) == {"server": k, "node": o.name}
                   for i in insts for k, o in enumerate(insts) if o is not i)
        # stable: a few TTLs later nothing moved and nothing was lost
        before = {i.name: i.leases.held() for i in insts}
        t0 = time.monotonic()
        await asyncio.sleep(2 * ttl)
        assert {i.name: i.leases.held() for i in insts} == before
        assert all(i.leases.renewals > 0 and not i.actions(Lost, t0) for i in insts)
        # (while starting, a node that synced first may have taken shards and handed them on)
        assert {a.why for i in insts for a in i.actions(Lost)} <= {"handoff"}
        assert not any(i.failures for i in insts)
    finally:
        await close(*insts)


@pytest.mark.timeout(60)
async def test_abrupt_kill_survivors_take_the_shards_after_the_ttl_with_larger_terms(
        nats_cluster: NatsCluster) -> None:
    insts = await started(nats_cluster)
    victim, survivors = insts[0], insts[1:]
    try:
        lost = victim.leases.held()
        assert lost
        await victim.leases.abort()  # as SIGKILL: nothing released, no node key deleted
        await victim.nc.close()
        killed = time.monotonic()

        def taken() -> bool:
            h = holders(survivors)
            return all(len(h.get(s, [])) == 1 for s in range(FEW))

        done = await until(taken, 4 * TTL, "survivors hold every shard")
        names = [i.name for i in survivors]
        assert split_as_preferred(survivors), (names, holders(survivors))
        got = {a.shard: (t, a.term) for i in survivors for t, a in i.seen
               if isinstance(a, Acquired) and a.shard in lost and t >= killed}
        assert set(got) == set(lost)
        assert all(term > lost[s] for s, (_, term) in got.items())
        first = min(t for t, _ in got.values()) - killed
        last = max(t for t, _ in got.values()) - killed
        # the victim's last renewal was sent at most TTL/4 before the kill (plus one in
        # flight): nobody may get in before its lease expires server-side
        assert first >= TTL * 2 / 3 - 0.1, first
        print(f"\n[abrupt kill] lease_ttl={TTL}s: first takeover {first:.2f}s, "
              f"last {last:.2f}s, all held {done - killed:.2f}s after the kill")
        assert any(NodeDown(victim.name) in i.actions(NodeDown) for i in survivors)
        assert not any(i.failures for i in survivors)
    finally:
        await close(*insts)


@pytest.mark.timeout(60)
async def test_graceful_stop_hands_shards_over_well_before_the_ttl(
        nats_cluster: NatsCluster) -> None:
    insts = await started(nats_cluster, **STEADY)
    ttl = STEADY["lease_ttl"]
    leaving, staying = insts[0], insts[1:]
    try:
        held = leaving.leases.held()
        assert held
        t0 = time.monotonic()
        await asyncio.wait_for(leaving.leases.stop(), 10)
        stopped = time.monotonic()
        lost = leaving.actions(Lost, t0)
        assert {a.shard: a.term for a in lost} == held
        assert {a.why for a in lost} == {"stopping"}
        assert leaving.leases.held() == {}
        done = await until(lambda: split_as_preferred(staying), ttl, "handed over")
        got = [a for i in staying for a in i.actions(Acquired, t0) if a.shard in held]
        assert {a.shard for a in got} == set(held)
        assert all(a.term > held[a.shard] for a in got)
        print(f"\n[graceful stop] lease_ttl={ttl}s: stop() took {stopped - t0:.2f}s, "
              f"all taken over {done - t0:.2f}s after it began")
        # by expiry it would take at least 2/3 TTL (the last renewal is about TTL/4 old)
        assert done - t0 < ttl / 3
        assert all(leaving.name not in i.leases.live_nodes() for i in staying)
        assert not any(i.failures for i in insts)
    finally:
        await close(*insts)


class LoopThread:
    """An event loop in a thread of its own, so that one instance can be paused (its loop
    blocked, as a process under SIGSTOP or a long GC pause) while the others run."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> Awaitable[T]:
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def pause(self, seconds: float, first: Callable[[], None]) -> None:
        """Block the loop for `seconds`, after calling `first` on it."""
        def freeze() -> None:
            first()
            time.sleep(seconds)

        self.loop.call_soon_threadsafe(freeze)

    def close(self) -> None:
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        assert not self.thread.is_alive()
        self.loop.close()


@pytest.mark.timeout(60)
async def test_a_paused_owner_stops_serving_first_and_its_renew_is_refused(
        nats_cluster: NatsCluster) -> None:
    apart = LoopThread()
    others = [await instance(nats_cluster, f"node{i}", i) for i in (1, 2)]
    paused = await apart.run(instance(nats_cluster, "node0", 0))
    insts = [paused, *others]
    try:
        await asyncio.wait_for(asyncio.gather(
            apart.run(paused.leases.start(15)), *(i.leases.start(15) for i in others)), 20)
        await until(lambda: split_as_preferred(insts), 10, "shards split as preferred")
        held = paused.leases.held()
        revisions = {s: paused.leases.owner(s).revision for s in held}  # type: ignore[union-attr]
        assert held
        mark: list[tuple[int, float]] = []  # (actions so far, time), when the pause began
        apart.pause(3 * TTL, lambda: mark.append((len(paused.seen), time.monotonic())))
        await until(lambda: bool(mark), 1, "paused")
        seen_before, t0 = mark[0]
        # while it sleeps the others take its shards, with larger terms
        await until(lambda: all(len(holders(others).get(s, [])) == 1 for s in held),
                    3 * TTL, "the others took the paused node's shards")
        assert all(max(t for i in others for t in [i.leases.held().get(s)] if t) > held[s]
                   for s in held)
        resumed = await until(lambda: bool(paused.actions(Lost, t0)), 4 * TTL, "a Lost")
        after = [a for _, a in list(paused.seen)[seen_before:]]
        # the first thing it does on waking is to stop serving every shard it held
        assert after[:len(held)] == [Lost(s, held[s], "expired_by_own_clock")
                                     for s in sorted(held)], after[:5]
        print(f"\n[pause {3 * TTL:.1f}s] Lost(expired_by_own_clock) x{len(held)} first, "
              f"{resumed - t0:.2f}s after the pause began")
        # its renewal, were it sent, is refused: the lease it renewed is gone
        kv = await nats_cluster_kv(others[0].nc)
        shard = min(held)
        with pytest.raises(nats.js.errors.KeyWrongLastSequenceError):
            await kv.update(str(shard), b'{"node":"node0","term":%d}' % held[shard],
                            last=revisions[shard])
        # and once live again it gets its shards back, under newer terms still
        await until(lambda: split_as_preferred(insts), 6 * TTL, "rebalanced after the pause")
        assert all(t > held[s] for s, t in paused.leases.held().items())
        assert not any(i.failures for i in insts)
    finally:
        await close(*others)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(apart.run(close(paused)), 10)
        apart.close()


async def nats_cluster_kv(nc: Client) -> Any:
    return await nc.jetstream().key_value("notify_shards")


@pytest.mark.timeout(60)
async def test_a_frozen_clock_is_caught_by_the_watch_or_the_refused_renew(
        nats_cluster: NatsCluster) -> None:
    """A node whose clock stops (the clock seam frozen) while its tasks run: it renews nothing,
    its leases expire server-side, the others take them, and it learns it lost them (a watch
    update shows the new holder, or its renewal is refused) without its own clock's help."""
    frozen: list[float] = []

    def clock() -> float:
        return frozen[0] if frozen else time.monotonic()

    skewed = await instance(nats_cluster, "node0", 0, clock=clock)
    others = [await instance(nats_cluster, f"node{i}", i) for i in (1, 2)]
    insts = [skewed, *others]
    try:
        await asyncio.wait_for(asyncio.gather(*(i.leases.start(15) for i in insts)), 20)
        await until(lambda: split_as_preferred(insts), 10, "shards split as preferred")
        held = skewed.leases.held()
        assert held
        frozen.append(time.monotonic())
        t0 = time.monotonic()
        try:
            await until(lambda: {a.shard for a in skewed.actions(Lost, t0)} >= set(held),
                        4 * TTL, "Lost for every held shard")
        except AssertionError:
            missing = sorted(set(held) - {a.shard for a in skewed.actions(Lost, t0)})
            raise AssertionError(
                f"no Lost for {missing[:5]} (of {len(missing)}): skewed view "
                f"{[skewed.leases.owner(s) for s in missing[:3]]}, others hold "
                f"{[[i.leases.held().get(s) for i in others] for s in missing[:3]]}, views "
                f"{[[i.leases.owner(s) for i in others] for s in missing[:3]]}, live "
                f"{[sorted(i.leases.live_nodes()) for i in others]}, watch updates "
                f"{skewed.leases.watch_updates}") from None
        lost = skewed.actions(Lost, t0)
        assert {a.why for a in lost} <= {"taken", "renew_failed"}, lost
        assert skewed.leases.held() == {}
        for s in held:  # each lost shard is now someone else's, under a larger term
            lease = skewed.leases.owner(s)
            assert lease is None or (lease.node != skewed.name and lease.term > held[s])
    finally:
        await close(*insts)


@pytest.mark.timeout(60)
async def test_killing_one_nats_server_leases_keep_renewing(nats_cluster: NatsCluster) -> None:
    insts = await started(nats_cluster, **STEADY)
    ttl = STEADY["lease_ttl"]
    try:
        js = insts[0].nc.jetstream()
        leaders = {(await js.stream_info(f"KV_{b}")).cluster.leader  # type: ignore[union-attr]
                   for b in ("notify_nodes", "notify_shards")}
        names = [n.name for n in nats_cluster.nodes]
        victim = next(i for i, n in enumerate(names) if n not in leaders)
        before = {i.name: i.leases.held() for i in insts}
        renewals = {i.name: i.leases.renewals for i in insts}
        t0 = time.monotonic()
        nats_cluster.kill(victim)  # instance `victim` was connected to it
        await asyncio.sleep(3 * ttl)
        print(f"\n[server kill] killed {names[victim]} (KV leaders {sorted(leaders)}); "
              f"renewals during {3 * ttl:.0f}s: "
              f"{ {i.name: i.leases.renewals - renewals[i.name] for i in insts} }")
        for i in insts:
            assert i.actions(Lost, t0) == [], (i.name, i.actions(Lost, t0)[:3])
            assert i.leases.held() == before[i.name]
            # each held shard renewed about every TTL/4 throughout (12 times in 3 TTL)
            assert i.leases.renewals - renewals[i.name] >= len(before[i.name]) * 6
        assert not any(i.failures for i in insts)
    finally:
        await close(*insts)


def _raise(*_: object) -> Any:
    raise RuntimeError("boom")


@pytest.mark.parametrize(("kind", "task"), [
    ("tick", "tick"), ("watch_update", "watch notify_shards"), ("renew_answer", "renew"),
    ("heartbeat", "heartbeat"), ("watch_ends", "watch notify_nodes"),
    ("cancelled", "tick"),
])
@pytest.mark.timeout(60)
async def test_a_task_that_dies_is_reported_not_silent(nats_cluster: NatsCluster, kind: str,
                                                       task: str) -> None:
    """Each kind of task, killed: the failure reaches on_failure (once) with the task's name."""
    inst = await instance(nats_cluster, "node0", 0)
    try:
        await asyncio.wait_for(inst.leases.start(15), 20)
        await asyncio.wait_for(inst.leases.ready.wait(), 10)
        await until(lambda: len(inst.leases.held()) == FEW, 5, "all shards held")
        leases, machine = inst.leases, inst.leases.machine
        if kind == "tick":
            machine.tick = _raise  # type: ignore[method-assign]
        elif kind == "watch_update":
            machine.lease_seen = _raise  # type: ignore[method-assign]
        elif kind == "renew_answer":
            machine.renewed = _raise  # type: ignore[method-assign]
        elif kind == "heartbeat":
            leases._put_heartbeat = _raise  # type: ignore[method-assign]
        elif kind == "cancelled":  # cancelled, not by stop(): a failure too
            tick, = (t for t in leases._loops if t.get_name() == "leases tick")
            tick.cancel()
        else:  # a long-lived task that ends without an error is a failure too
            await leases._subs[0].unsubscribe()
        await until(lambda: bool(inst.failures), 3 * TTL, "on_failure called")
        assert inst.failures[0].startswith(f"leases: {task}"), inst.failures
        assert leases.failure == inst.failures[0] and len(inst.failures) == 1
    finally:
        await close(inst)


@pytest.mark.timeout(60)
async def test_a_heartbeat_lost_in_a_reconnect_does_not_make_the_node_look_dead(
        nats_cluster: NatsCluster) -> None:
    """C5 (cluster review 2026-11-26): a heartbeat whose answer is lost (the node's NATS
    connection was reset with the put in flight) held every later one for `op_timeout`
    (lease_ttl/4 = 2.5 s at the defaults), so with `node_ttl` 3 s the others declared the node
    dead and closed every member on it. Now the next beat replaces a late one, on time, and one
    lost answer never reaches `node_ttl`."""
    ttl = {"lease_ttl": 10.0, "node_ttl": 3.0, "heartbeat": 1.0, "settle": 0.3}  # `notify serve`
    insts = await started(nats_cluster, **ttl)
    try:
        victim = insts[0]
        kv = victim.leases._nodes_kv
        assert kv is not None
        real_put = kv.put
        lost: list[float] = []

        async def put(*args: Any, **kw: Any) -> int:
            if not lost:  # the first put after this: its answer never comes
                lost.append(time.monotonic())
                await asyncio.Event().wait()
            return await real_put(*args, **kw)

        kv.put = put  # type: ignore[method-assign]
        t0 = time.monotonic()
        await until(lambda: bool(lost), 5, "a heartbeat put")
        await asyncio.sleep(3 * ttl["node_ttl"])
        for other in insts[1:]:
            down = [a for a in other.actions(NodeDown, t0) if a.node == victim.name]
            assert down == [], (other.name, down)
        assert victim.leases.heartbeat_failures == 1
        assert not any(i.failures for i in insts)
    finally:
        await close(*insts)


@pytest.mark.timeout(60)
async def test_a_campaign_whose_answer_is_lost_but_landed_is_known_as_ours(
        nats_cluster: NatsCluster, monkeypatch: Any) -> None:
    """Cluster review S10: a create that timed out but landed left a lease naming us that we
    did not know we held; nobody, us included, campaigned for the shard until it expired, a
    whole TTL dark. The campaign now reads the key back and knows its own create (`by`)."""
    from nats.js.kv import KeyValue

    real = KeyValue.create
    lost: list[str] = []

    async def create(self: KeyValue, key: str, value: bytes, *a: Any, **kw: Any) -> int:
        revision = await real(self, key, value, *a, **kw)
        if self._name.endswith("shards") and len(lost) < 5:  # landed; the answer is lost
            lost.append(key)
            raise nats.errors.TimeoutError
        return revision

    monkeypatch.setattr(KeyValue, "create", create)
    ttl = {"lease_ttl": 10.0, "node_ttl": 3.0, "heartbeat": 1.0, "settle": 0.3}
    (solo,) = [await instance(nats_cluster, "solo", 0, **ttl)]
    try:
        await asyncio.wait_for(solo.leases.start(15), 20)
        started_at = time.monotonic()
        await until(lambda: len(solo.leases.held()) == FEW, 5, "every shard held")
        assert len(lost) == 5 and time.monotonic() - started_at < ttl["lease_ttl"] / 2
        assert all(int(k) in solo.leases.held() for k in lost)
    finally:
        await close(solo)


async def squat(nc: Client, bucket: str) -> None:
    """A stream holding the KV `bucket`'s subjects: the cluster then refuses the bucket for
    good (10065, "subjects overlap with an existing stream")."""
    js = nc.jetstream(timeout=5)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while True:  # the cluster just started: its meta layer may not answer yet
        try:
            await js.add_stream(nats.js.api.StreamConfig(
                name="squatter", subjects=[f"$KV.{bucket}.>"], num_replicas=3))
            return
        except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError,
                nats.js.errors.BadRequestError):
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.2)


@pytest.mark.timeout(60)
async def test_a_refusal_that_will_not_pass_ends_the_start_at_once(
        nats_cluster: NatsCluster) -> None:
    """A bucket the cluster refuses for good (a stream already holds its subjects: 10065)
    ends the start with what the cluster said, at once; a start asked it again for its whole
    budget before (review: `_retry` took any `BadRequestError` as "not yet")."""
    inst = await instance(nats_cluster, "node0", 0)
    try:
        await squat(inst.nc, inst.leases.nodes_bucket)
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(nats.js.errors.BadRequestError) as refused:
            await asyncio.wait_for(inst.leases.start(15), 20)
        assert refused.value.err_code == 10065, refused.value
        assert loop.time() - began < 8, "the start asked a lasting refusal again (15 s)"
        assert inst.leases.failure is None and inst.failures == []
    finally:
        await close(inst)


@pytest.mark.timeout(60)
async def test_a_stream_refused_for_good_is_not_asked_again(nats_cluster: NatsCluster) -> None:
    """`open_stream` (the log's and the webhooks' streams) ends at once on a refusal that
    lasts (`not_yet`): it asked any refusal again for its whole timeout before."""
    from nats.js.api import StreamConfig

    from notify.storage.natsloop import close_within, open_stream

    nc = await connect(nats_cluster, 0)
    try:
        await squat(nc, "taken")
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(nats.js.errors.BadRequestError) as refused:
            await open_stream(nats_cluster.urls, StreamConfig(
                name="late", subjects=["$KV.taken.>"], num_replicas=3), 15, "test")
        assert refused.value.err_code == 10065, refused.value
        assert loop.time() - began < 8, "open_stream asked a lasting refusal again (15 s)"
    finally:
        await close_within(nc, 5)


async def test_a_start_cut_short_by_its_deadline_says_why_the_tries_before_failed() -> None:
    """The tries that were refused "not yet" (a settling cluster's 500), then one the deadline
    cut short: the start's error names the refusal, not a bare TimeoutError."""
    from nats.js.errors import ServerError

    leases = ClusterLeases(None, "n1", info={},  # type: ignore[arg-type]  (no NATS is used)
                           on_actions=lambda _: None, on_failure=lambda _: None)
    tries: list[int] = []

    async def step() -> None:
        tries.append(1)
        if len(tries) < 3:
            raise ServerError(code=500, err_code=10009,
                              description="JetStream cluster can not handle request")
        await asyncio.sleep(10)  # (the deadline cuts this one short)

    deadline = asyncio.get_running_loop().time() + 4.0  # (room for the two 0.2 s waits)
    with pytest.raises(TimeoutError) as cut:
        await leases._retry(deadline, "the nodes bucket", step)
    assert len(tries) == 3
    assert "10009" in str(cut.value) and "the nodes bucket" in str(cut.value), cut.value
    assert isinstance(cut.value.__cause__, ServerError)


@pytest.mark.timeout(60)
async def test_a_node_whose_start_fails_undoes_it_and_reports_no_death_after(
        nats_cluster: NatsCluster) -> None:
    """A node's leases refused for good (10065, as above): the start raises that refusal, and
    what it had begun (the revocation watch, the NATS connection) is stopped with it, not
    left to end with the loop and be reported as a death after the real error (review of
    c716929)."""
    from notify.cluster.node import ClusterConfig, ClusterNode

    squatter_nc = await connect(nats_cluster, 0)
    try:
        await squat(squatter_nc, "notify_nodes")
        halts: list[str] = []

        class Host:  # the server, as far as a node's start asks it
            url, draining = "ws://127.0.0.1:1", False

            def revoked(self, user: str, at: float) -> None:
                pass

            def halt(self, reason: str) -> None:
                halts.append(reason)

        node = ClusterNode(ClusterConfig(servers=nats_cluster.urls, node_id="n1",
                                         connect_timeout=15.0))
        with pytest.raises(nats.js.errors.BadRequestError):
            await asyncio.wait_for(node.start(Host()), 20)  # type: ignore[arg-type]
        watch = node._revocations
        assert watch is not None and watch._task is not None and watch._task.done()
        assert node._nc is not None and node._nc.is_closed
        await asyncio.sleep(0.1)
        assert halts == [] and node._failed is None
    finally:
        await asyncio.wait_for(squatter_nc.close(), 5)
