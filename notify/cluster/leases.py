"""Shard leases over NATS JetStream KV: the asyncio adapter of `ownership.Ownership` (DESIGN §9).

Buckets (created if missing, R`replicas`, file storage):

- `notify_nodes`: one key per node, the orjson of its `info` plus `"node"`, put every
  `heartbeat` s; history 1, `max_age` 3 x `node_ttl` (cleans up after crashed nodes; liveness
  itself is judged by each observer's clock, see ownership.py rule 1). Deleted on `stop`.
- `notify_shards`: key `<shard>` (decimal), value `{"node"}` when created and
  `{"node", "term"}` when renewed; history 1, `max_age` = `lease_ttl`, so a lease nobody renews
  disappears server-side (nats-py 2.16's `update()` takes no per-message TTL: the bucket's
  `max_age` is what expires leases). An existing bucket with another `max_age` is refused: a
  shorter one would let a lease expire before its holder's own clock says so.
  File storage on purpose: terms are the bucket's revisions and must never go back, which a
  memory bucket would do after a full cluster restart (so would deleting the bucket).

What runs: one watch per bucket; a tick task that sleeps until the machine's `next_deadline` or
the next heartbeat (both on the `clock` seam, in one task: a node that stops renewing stops
heartbeating too, or it would stay the preferred owner of shards it no longer renews, and
nobody would take them); one short task per KV operation and heartbeat put. Everything is on the
caller's event loop; `on_actions` gets `Acquired`/`Lost`/`OwnerChanged`/`NodeUp`/`NodeDown`
synchronously, in the machine's order (a `Lost` is delivered before the matching `Release`
is even sent). Every task is supervised: the first one that raises (or a long-lived one that
returns) is logged with its traceback and reported through `on_failure(reason)`. From then on
the machine may no longer be driven (no renewals, no own-clock expiry), so the node must stop
serving every shard at once and stop (G13); `stop()` still releases what it can.

The watches are our own ordered push consumers (`deliver_policy=last_per_subject`) rather than
nats-py's `kv.watchall()`, for one reason: `watchall()` leaves the consumer's idle heartbeat at
5 s and nats-py recreates an ordered consumer only after two missed heartbeats, so a watch
whose (R1, in-memory) consumer sat on a NATS server that died stalled for 20 s in our runs (the
first re-create failed). With `idle_heartbeat = min(1, node_ttl/4)` it resumed within 2 s
(0.5 s heartbeat). "Initial values delivered" is the same test nats-py uses: the consumer had
nothing pending when created, or a message arrives with `num_pending == 0`.

Choosing `lease_ttl`: a SIGKILL of the shards bucket's stream leader stops every KV write for
the Raft election, 3-6 s on loopback. With `lease_ttl=6` every node lost every shard (then took
them back under new terms, ~7 s after the kill); with 10 s nothing was lost. A smaller TTL
fails over faster after a node crash (takeover took 5.0-6.1 s at TTL 6) but turns a NATS
leader crash into a full reshuffle.

KV calls, all bounded by `op_timeout` (default `lease_ttl/4`):

- Campaign: `kv.create`. No retry (the machine retries after `lease_ttl/6`). On an existing
  key nats-py's `create` reads it back (to tell a delete marker from a value) with a direct get,
  which a lagging replica may answer "not found": that too is just a failed campaign.
- Renew: `kv.update(last=revision)`. Errors that may leave the request unsent or unanswered
  (timeouts, a reconnecting client, no stream leader) are retried until `Renew.until`, the
  moment the machine stops serving the shard by its own clock anyway (0.75 x TTL after the
  last success; renewals start at 1/4, so a stream-leader election of up to half a TTL is
  survived in any phase: cluster review S4). A "wrong last sequence" after an attempt that may
  have landed is resolved by reading the key: our node, our term and a newer revision means it
  did land. Anything else is `renewed(None)`, i.e. `Lost("renew_failed")`.
- Release: `kv.delete(last=revision)`, best effort.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import time
from collections.abc import Callable, Coroutine
from typing import Any

import nats.errors
import nats.js.errors
import orjson
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy, KeyValueConfig
from nats.js.kv import KeyValue

from notify.cluster.ownership import (
    Acquired,
    Action,
    Campaign,
    Lease,
    Lost,
    NodeDown,
    Ownership,
    Release,
    Renew,
)
from notify.cluster.shards import SHARDS
from notify.errortext import described
from notify.storage.natsloop import key_value, not_yet
from notify.supervision import death_of

log = structlog.get_logger("notify.cluster")

_KV_OP = "KV-Operation"
_MARKER = "Nats-Marker-Reason"  # server-placed delete markers (2.11+), if a bucket has them
#: errors after which a request may not have been sent or answered: worth another attempt
_TRANSIENT = (TimeoutError, nats.errors.Error)



def _valid_key(key: str) -> bool:
    return bool(key) and key[0] != "." and key[-1] != "." and all(
        c.isascii() and (c.isalnum() or c in "-/_=.") for c in key)


class ClusterLeases:
    def __init__(self, nc: Client, node: str, *, info: dict[str, object],
                 on_actions: Callable[[list[Action]], None],
                 on_failure: Callable[[str], None],
                 lease_ttl: float = 6.0, node_ttl: float = 3.0, heartbeat: float = 1.0,
                 replicas: int = 3, shards: int = SHARDS, settle: float = 1.0,
                 nodes_bucket: str = "notify_nodes", shards_bucket: str = "notify_shards",
                 clock: Callable[[], float] = time.monotonic,
                 op_timeout: float | None = None, standby: bool = False) -> None:
        if not _valid_key(node):
            raise ValueError(f"node id {node!r} is not a valid KV key")
        if not 0 < heartbeat < node_ttl:
            raise ValueError("heartbeat must be shorter than node_ttl")
        self.nc, self.node, self.info = nc, node, info
        self.lease_ttl, self.node_ttl, self.heartbeat = lease_ttl, node_ttl, heartbeat
        self.replicas, self.shards = replicas, shards
        self.nodes_bucket, self.shards_bucket = nodes_bucket, shards_bucket
        self.op_timeout = op_timeout if op_timeout is not None else lease_ttl / 4
        self._on_actions, self._on_failure, self._clock = on_actions, on_failure, clock
        self.machine = Ownership(node, shards=shards, lease_ttl=lease_ttl, node_ttl=node_ttl,
                                 settle=settle, standby=standby)
        #: set once synced, settled, and our first heartbeat is stored
        self.ready = asyncio.Event()
        #: names this process in the leases it creates (`_created`)
        self._nonce = secrets.token_hex(8)
        # counters (metrics)
        self.renewals = 0
        self.renew_failures = 0
        self.losses: dict[str, int] = {}
        self.campaigns = 0
        self.acquired = 0
        self.releases = 0
        self.heartbeat_failures = 0
        #: updates delivered by each bucket's watch
        self.watch_updates: dict[str, int] = {nodes_bucket: 0, shards_bucket: 0}
        #: the failure reported through on_failure, if any
        self.failure: str | None = None
        self._node_info: dict[str, dict[str, object]] = {}
        self._js: JetStreamContext | None = None
        self._nodes_kv: KeyValue | None = None
        self._shards_kv: KeyValue | None = None
        self._subs: list[JetStreamContext.PushSubscription] = []
        self._synced: set[str] = set()
        self._hb_stored = False
        self._next_beat = 0.0
        self._beat: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._loops: set[asyncio.Task[None]] = set()  # long-lived: must not end
        self._ops: set[asyncio.Task[None]] = set()  # one per KV operation
        self._stopping = False
        self._closed = False

    # -- queries ---------------------------------------------------------------------------------

    def owner(self, shard: int) -> Lease | None:
        return self.machine.owner(shard)

    def held(self) -> dict[int, int]:
        return self.machine.held()

    def term(self, shard: int) -> int | None:
        return self.machine.term(shard)

    def check(self, shard: int) -> None:
        """Before a frame is taken as `shard`'s owner's: a holding our clock has ended is
        lost now, not at the next tick (a woken process runs I/O callbacks first: S7)."""
        actions = self.machine.check(shard, self._clock())
        if actions:
            self._feed(actions)

    def live_nodes(self) -> frozenset[str]:
        return self.machine.live_nodes()

    def node_info(self, node: str) -> dict[str, object] | None:
        """The `info` a live node put with its heartbeat."""
        return self._node_info.get(node)

    # -- life cycle ------------------------------------------------------------------------------

    async def start(self, timeout: float = 15.0) -> None:
        """Bind (or create) the buckets, start the watches, store our first heartbeat, start
        the tick task.
        Right after a cluster starts (or loses a server) JetStream requests can fail while its
        meta layer settles: each step is retried until `timeout`. Returns before `ready`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            self._js = self.nc.jetstream(timeout=self.op_timeout)
            self._nodes_kv = await self._retry(
                deadline, "bucket",
                functools.partial(self._bucket, self.nodes_bucket, 3 * self.node_ttl))
            self._shards_kv = await self._retry(
                deadline, "bucket",
                functools.partial(self._bucket, self.shards_bucket, self.lease_ttl,
                                  strict_ttl=True))
            await self._retry(deadline, "watch",
                              functools.partial(self._watch, self.nodes_bucket,
                                                self._node_update))
            await self._retry(deadline, "watch",
                              functools.partial(self._watch, self.shards_bucket,
                                                self._shard_update))
            # only now: the others start counting our `settle` (before handing us shards)
            # from our first heartbeat, and we can campaign only once our watches have synced
            await self._retry(deadline, "heartbeat", self._put_heartbeat)
            self._hb_stored = True
            self._check_ready()
            self._next_beat = self._clock() + self.heartbeat
            self._spawn(self._tick_loop(), "tick", long_lived=True)
        except BaseException:
            await self.abort()
            raise

    async def stop(self, timeout: float = 5.0) -> None:
        """Graceful leave: `Lost("stopping")` for every held shard (delivered first), release the
        leases, delete our node key, end every task. Bounded by `timeout`."""
        if self._stopping or self._closed:
            return
        self._stopping = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self._feed(self.machine.stop(self._clock()))
        await self._cancel(self._loops)  # no heartbeat may re-create our key after its delete
        # in-flight operations answer the stopped machine, which releases any late success
        # (a heartbeat in flight finishes before the delete below)
        while self._ops and loop.time() < deadline:
            await asyncio.wait(set(self._ops), timeout=deadline - loop.time())
        if self._nodes_kv is not None:
            try:
                async with asyncio.timeout(max(0.0, min(self.op_timeout,
                                                        deadline - loop.time()))):
                    await self._nodes_kv.delete(self.node)
            except _TRANSIENT as e:
                log.warning("lease_node_delete_failed", node=self.node, error=described(e))
        await self.abort()

    async def abort(self) -> None:
        """End everything now, releasing nothing (a node that is dying anyway; tests that
        simulate a crash). Our leases expire server-side after `lease_ttl`."""
        self._closed = True
        await self._cancel(self._loops | self._ops)
        for sub in self._subs:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await sub.unsubscribe()
        self._subs.clear()

    # -- the machine -----------------------------------------------------------------------------

    def _feed(self, actions: list[Action], *, wake: bool = True) -> None:
        """Carry out the machine's actions: KV operations as tasks, the rest to the node; then
        let the tick task recompute the machine's next deadline, unless `wake` is False and
        nothing happened (a watch update that changed nothing only moves deadlines later: the
        renewals of every shard reach every node, and next_deadline() is O(shards))."""
        if self._closed:
            return
        notify: list[Action] = []
        lost: dict[str, list[int]] = {}
        for a in actions:
            if isinstance(a, Campaign):
                self.campaigns += 1
                self._spawn(self._campaign(a), f"campaign {a.shard}")
            elif isinstance(a, Renew):
                self._spawn(self._renew(a), f"renew {a.shard}")
            elif isinstance(a, Release):
                self.releases += 1
                self._spawn(self._release(a), f"release {a.shard}")
            else:
                if isinstance(a, Acquired):
                    self.acquired += 1
                elif isinstance(a, Lost):
                    self.losses[a.why] = self.losses.get(a.why, 0) + 1
                    lost.setdefault(a.why, []).append(a.shard)
                elif isinstance(a, NodeDown):
                    self._node_info.pop(a.node, None)
                notify.append(a)
        for why, shards in lost.items():
            log.debug("lease_lost", node=self.node, why=why, shards=shards)
        if notify:
            self._on_actions(notify)
        if wake or actions:
            self._wake.set()
        self._check_ready()

    def _check_ready(self) -> None:
        if (not self.ready.is_set() and self._hb_stored
                and (at := self.machine.settled_at) is not None and self._clock() >= at):
            self.ready.set()

    async def _tick_loop(self) -> None:
        """Ticks the machine at its deadlines, and puts our heartbeat every `heartbeat` s, both
        on the same clock and in the same task: a node whose renewals stall (its clock or this
        task stuck) also stops looking live, so the others take its shards instead of waiting
        for it as the preferred owner."""
        while True:
            self._wake.clear()
            now = self._clock()
            if now >= self._next_beat:
                self._next_beat = now + self.heartbeat
                if self._beat is not None and not self._beat.done():
                    # Its answer is a whole interval late (lost in a reconnect of our NATS
                    # connection, say): this beat replaces it, on time. Waiting for it held
                    # the next beats for up to `op_timeout`, past `node_ttl`, and the other
                    # nodes declared us dead and closed our members (cluster review C5).
                    self._beat.cancel()
                    self.heartbeat_failures += 1
                    log.warning("lease_heartbeat_late", node=self.node)
                self._beat = self._spawn(self._heartbeat(), "heartbeat")  # one in flight
            deadline = self.machine.next_deadline()
            if deadline is not None and deadline <= now:
                self._feed(self.machine.tick(now))
                continue
            wake = self._next_beat if deadline is None else min(deadline, self._next_beat)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wake - now, 0.005)):
                    await self._wake.wait()

    # -- KV operations ---------------------------------------------------------------------------

    def _key_value(self, bucket: str) -> KeyValue:
        kv = self._nodes_kv if bucket == self.nodes_bucket else self._shards_kv
        assert kv is not None, "start() binds the buckets first"
        return kv

    async def _campaign(self, a: Campaign) -> None:
        kv = self._key_value(self.shards_bucket)
        revision: int | None = None
        try:
            async with asyncio.timeout(self.op_timeout):
                revision = await kv.create(str(a.shard), orjson.dumps(
                    {"node": self.node, "by": self._nonce}))
        except nats.js.errors.KeyWrongLastSequenceError:
            pass  # someone holds it (or our view is ahead of the server's expiry)
        except _TRANSIENT as e:
            log.debug("lease_campaign_failed", shard=a.shard, error=described(e))
            revision = await self._created(a.shard)
        self._feed(self.machine.campaigned(a.shard, revision, self._clock()))

    async def _created(self, shard: int) -> int | None:
        """After a create whose answer was lost: did it land? Its value names this very
        process (`by`), which no earlier incarnation's lease does. Unasked, a lease that landed
        would name us without our knowing it: nobody, us included, would campaign for the
        shard until it expired, a shard dark for a whole TTL on top of the failover (cluster
        review S10). A stale read (a lagging replica) only makes this None, which is safe."""
        try:
            async with asyncio.timeout(self.op_timeout):
                entry = await self._key_value(self.shards_bucket).get(str(shard))
        except (nats.js.errors.KeyNotFoundError, *_TRANSIENT):
            return None
        try:
            value = orjson.loads(entry.value or b"{}")
        except orjson.JSONDecodeError:
            return None
        if isinstance(value, dict) and value.get("node") == self.node and \
                value.get("by") == self._nonce and "term" not in value:
            log.info("lease_create_landed", shard=shard, revision=entry.revision)
            return entry.revision
        return None

    async def _renew(self, a: Renew) -> None:
        kv = self._key_value(self.shards_bucket)
        value = orjson.dumps({"node": self.node, "term": a.term})
        revision: int | None = None
        maybe_landed = False
        while (left := a.until - self._clock()) > 0:
            try:
                async with asyncio.timeout(min(left, self.op_timeout)):
                    revision = await kv.update(str(a.shard), value, last=a.revision)
                break
            except nats.js.errors.KeyWrongLastSequenceError:
                if maybe_landed:
                    revision = await self._landed(a)
                break
            except nats.js.errors.ServiceUnavailableError as e:
                log.debug("lease_renew_retry", shard=a.shard, error=described(e))
            except nats.js.errors.APIError as e:  # refused for good
                log.warning("lease_renew_refused", shard=a.shard, error=described(e))
                break
            except _TRANSIENT as e:
                maybe_landed = maybe_landed or not isinstance(
                    e, (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError))
                log.debug("lease_renew_retry", shard=a.shard, error=described(e))
            await asyncio.sleep(min(0.05, max(0.0, a.until - self._clock())))
        if revision is None:
            self.renew_failures += 1
        else:
            self.renewals += 1
        self._feed(self.machine.renewed(a.shard, revision, self._clock()))

    async def _landed(self, a: Renew) -> int | None:
        """After an ambiguous attempt: did one of our updates land? (our node and term at a
        newer revision). A stale read (direct gets may be served by a lagging replica) only
        makes this answer None, which is safe."""
        try:
            async with asyncio.timeout(self.op_timeout):
                entry = await self._key_value(self.shards_bucket).get(str(a.shard))
            lease = self._parse_lease(entry.value or b"", entry.revision or 0)
        except (*_TRANSIENT, ValueError):
            return None
        if (lease is not None and lease.node == self.node and lease.term == a.term
                and lease.revision > a.revision):
            return lease.revision
        return None

    async def _release(self, a: Release) -> None:
        try:
            async with asyncio.timeout(self.op_timeout):
                await self._key_value(self.shards_bucket).delete(str(a.shard), last=a.revision)
        except _TRANSIENT as e:  # it expires anyway
            log.debug("lease_release_failed", shard=a.shard, error=described(e))

    async def _put_heartbeat(self) -> None:
        value = orjson.dumps({**self.info, "node": self.node})
        async with asyncio.timeout(self.op_timeout):
            await self._key_value(self.nodes_bucket).put(self.node, value)

    async def _heartbeat(self) -> None:
        try:
            await self._put_heartbeat()
        except _TRANSIENT as e:
            self.heartbeat_failures += 1
            log.warning("lease_heartbeat_failed", node=self.node, error=described(e))

    # -- buckets and watches ---------------------------------------------------------------------

    async def _bucket(self, bucket: str, ttl: float, *, strict_ttl: bool = False) -> KeyValue:
        assert self._js is not None
        kv = await key_value(self._js, KeyValueConfig(bucket=bucket, history=1, ttl=ttl,
                                                      replicas=self.replicas))
        status = await kv.status()
        if strict_ttl and abs((status.ttl or 0.0) - ttl) > 1e-3:
            raise ValueError(f"bucket {bucket} has max_age {status.ttl}, leases need {ttl}")
        cluster = status.stream_info.cluster
        if cluster is not None and not cluster.leader:
            raise TimeoutError(f"bucket {bucket} has no leader yet")
        return kv

    async def _watch(self, bucket: str, handle: Callable[[str, Msg, float], None]) -> None:
        assert self._js is not None
        sub = await self._js.subscribe(
            f"$KV.{bucket}.>", stream=f"KV_{bucket}", ordered_consumer=True,
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            idle_heartbeat=max(0.1, min(1.0, self.node_ttl / 4)),
            inactive_threshold=max(30.0, 5 * self.lease_ttl))
        try:
            async with asyncio.timeout(self.op_timeout):
                info = await sub.consumer_info()
        except BaseException:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            raise
        self._subs.append(sub)
        if info.num_pending == 0 and (info.delivered is None or not info.delivered.stream_seq):
            self._bucket_synced(bucket)
        self._spawn(self._watch_loop(bucket, sub, handle), f"watch {bucket}", long_lived=True)

    async def _watch_loop(self, bucket: str, sub: JetStreamContext.PushSubscription,
                          handle: Callable[[str, Msg, float], None]) -> None:
        prefix = f"$KV.{bucket}."
        async for msg in sub.messages:
            self.watch_updates[bucket] += 1
            handle(msg.subject[len(prefix):], msg, self._clock())
            if bucket not in self._synced and msg.metadata.num_pending == 0:
                self._bucket_synced(bucket)
        if not self._closed:
            raise RuntimeError(f"the watch of {bucket} ended")

    def _bucket_synced(self, bucket: str) -> None:
        self._synced.add(bucket)
        if self._synced == {self.nodes_bucket, self.shards_bucket}:
            self._feed(self.machine.synced(self._clock()))

    @staticmethod
    def _deleted(msg: Msg) -> bool:
        headers = msg.headers or {}
        return headers.get(_KV_OP) in ("DEL", "PURGE") or _MARKER in headers

    def _node_update(self, node: str, msg: Msg, now: float) -> None:
        if self._deleted(msg):
            self._feed(self.machine.node_gone(node, now), wake=False)
            return
        try:
            info = orjson.loads(msg.data)
        except orjson.JSONDecodeError:
            info = None
        if not isinstance(info, dict):
            log.warning("lease_bad_node_value", node=node)
            return
        if node != self.node:
            self._node_info[node] = info
        self._feed(self.machine.node_seen(node, now, standby=info.get("standby") is True),
                   wake=False)

    def _shard_update(self, key: str, msg: Msg, now: float) -> None:
        if not key.isdigit() or not 0 <= int(key) < self.shards:
            log.warning("lease_bad_key", key=key)
            return
        revision = msg.metadata.sequence.stream
        lease = None
        if not self._deleted(msg):
            try:
                lease = self._parse_lease(msg.data, revision)
            except ValueError as e:
                log.warning("lease_bad_value", key=key, error=described(e))
                return
        self._feed(self.machine.lease_seen(int(key), lease, now), wake=False)

    @staticmethod
    def _parse_lease(data: bytes, revision: int) -> Lease | None:
        """The value of a lease key at `revision` (a create has no term: its term is its own
        revision). Raises ValueError for a value no node writes."""
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise ValueError("not JSON") from e
        if not isinstance(value, dict) or not isinstance(value.get("node"), str):
            raise ValueError("no node")
        term = value.get("term", revision)
        if not isinstance(term, int):
            raise ValueError("bad term")
        return Lease(value["node"], term, revision)

    # -- tasks -----------------------------------------------------------------------------------

    async def _retry(self, deadline: float, what: str,
                     step: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """`step()`, asked again until `deadline` while what it fails with may pass (`not_yet`:
        the cluster settling); a refusal that will not pass (a bucket made with another
        config, say) ends the start at once, as `found_or_made` does. A last try that the
        deadline cuts short raises TimeoutError naming the refusal before it."""
        loop = asyncio.get_running_loop()
        last: Exception | None = None
        while True:
            try:
                async with asyncio.timeout(max(0.01, deadline - loop.time())):
                    return await step()
            except Exception as e:
                if not not_yet(e):
                    raise
                if loop.time() + 0.2 > deadline:
                    if isinstance(e, TimeoutError) and last is not None:
                        # the bound cut the last try short: the tries before say why
                        raise TimeoutError(f"{what}: not done by the deadline; before that: "
                                           f"{described(last)}") from last
                    raise
                if not isinstance(e, TimeoutError):
                    last = e  # (a refusal says more than a try that timed out)
                log.info("lease_start_retry", what=what, error=described(e))
            await asyncio.sleep(0.2)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str, *,
               long_lived: bool = False) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=f"leases {name}")
        tasks = self._loops if long_lived else self._ops
        tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            tasks.discard(t)
            error: BaseException | None
            if long_lived and not self._stopping and not self._closed:
                error = death_of(t)  # a loop must not end while we run, however it ends
            elif t.cancelled():
                return  # an operation given up on (a late beat), or anything at stop
            else:
                error = t.exception()
                if error is None:
                    return
            if self.failure is not None:  # reported already; the node is stopping
                log.debug("lease_task_failed", node=self.node, task=name, error=described(error))
                return
            self.failure = f"leases: {name}: {described(error)}"
            log.error("lease_task_failed", node=self.node, task=name, error=described(error),
                      exc_info=error)
            self._on_failure(self.failure)

        task.add_done_callback(done)
        return task

    @staticmethod
    async def _cancel(tasks: set[asyncio.Task[None]]) -> None:
        pending = [t for t in tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5.0)
