"""The webhooks service's cluster rules (notify/webhooks/service.py, "Cluster mode"), without a
cluster: a `NotifyServer` on the memory log, fake shards (what `ClusterNode.held` says), and the
SQLite outbox with a baseline per shard (what the JetStream outbox records) behind the port.

- A shard acquired while another shard's catch-up is under way: this node's own write to one
  of its groups waits for that shard's catch-up, so its cursor never passes the events the
  previous owner stored and never wrote (they would be lost: the catch-up would start after
  them);
- a write hooked after its shard left this node is written as rows, without its cursor."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection, Mapping

from notify.cluster.shards import shard_of
from notify.core.actions import StoreView, ViewInstall, Write
from notify.server.app import NotifyServer
from notify.webhooks import service
from notify.webhooks.config import WebhookSettings
from notify.webhooks.events import Event
from notify.webhooks.outbox import Cursor, Outbox, Row
from notify.webhooks.source import Source
from tests.webhooks.conftest import SECRET

EVERYTHING = ["member.arrived", "member.left", "user.arrived", "user.left", "group.occupied",
              "group.vacated", "message"]
HOOK = WebhookSettings(url="http://127.0.0.1:9/hook", secret=SECRET,  # type: ignore[arg-type]
                       events=EVERYTHING, backoff=60.0, backoff_max=60.0)


class Shards:
    def __init__(self) -> None:
        self.now: dict[int, int] = {}

    def held(self) -> Mapping[int, int]:
        return self.now

    def term(self, shard: int) -> int | None:
        return self.now.get(shard)


class Parted:
    """The SQLite outbox, with a baseline per part; the catch-up's read of the cursors waits
    at `gate` (and says so in `at_gate`)."""

    def __init__(self, caps: dict[str, tuple[int, int]]) -> None:
        self.box = Outbox(":memory:", caps)
        self.parts: set[int] = set()
        self.gate, self.at_gate = threading.Event(), threading.Event()
        #: reads of the cursors that fail before they answer again
        self.fail = 0
        self.gate.set()
        self.count, self.bytes = self.box.count, self.box.bytes
        self.dropped, self.dropped_through = self.box.dropped, self.box.dropped_through

    def baselined(self, part: int | None = None) -> bool:
        return part in self.parts

    def set_baseline(self, cursors: list[Cursor], part: int | None = None) -> None:
        self.box.add([], cursors, {}, 0.0)
        assert part is not None
        self.parts.add(part)

    def cursors(self, groups: Collection[str] | None = None) -> dict[str, Cursor]:
        self.at_gate.set()
        assert self.gate.wait(10)
        if self.fail:
            self.fail -= 1
            raise TimeoutError("the stream did not answer (test)")
        return self.box.cursors(groups)

    def add(self, rows: list[tuple[str, Event]], cursors: list[Cursor],
            offsets: dict[str, int], now: float) -> list[str]:
        return self.box.add(rows, cursors, offsets, now)

    def peek(self, endpoint: str, limit: int) -> list[Row]:
        return self.box.peek(endpoint, limit)

    def delete(self, endpoint: str, seq: int) -> None:
        self.box.delete(endpoint, seq)

    def forget_except(self, endpoints: set[str]) -> dict[str, int]:
        return self.box.forget_except(endpoints)

    def close(self) -> None:
        self.box.close()


def ids(*writes: Write) -> list[str]:
    out: list[str] = []
    for w in writes:
        batch = Source([HOOK]).of_write(w, 0.0)
        assert batch is not None
        out += [e.id for _, e in batch.rows]
    return out


#: the views the tests store: a joins (1), b joins (2), a leaves (3)
VIEWS = {1: (("a#1",), ("a#1",), ()), 2: (("a#1", "b#2"), ("b#2",), ()),
         3: (("b#2",), (), ("a#1",))}


def view(group: str, version: int) -> StoreView:
    members, joined, left = VIEWS[version]
    return StoreView(version, ViewInstall(group, version, members, joined, left, 7, 0))


def store(server: NotifyServer, w: Write, hooks: service.Webhooks | None = None) -> None:
    """`w` stored in the log; with `hooks`, by this node (its hook hears of it), else by
    another owner (never hooked here)."""
    server.store.write(w, lambda e: None)
    if hooks is not None:
        hooks._stored(w)


def two_groups() -> tuple[str, str]:
    """Two groups in two shards, neither of them the endpoint's (this node never sends)."""
    mine = service.endpoint_shard(HOOK.key)
    names = (f"g{i}" for i in range(10_000))
    g1 = next(g for g in names if shard_of(g) != mine)
    g2 = next(g for g in names if shard_of(g) not in (mine, shard_of(g1)))
    return g1, g2


async def started(shards: Shards) -> tuple[NotifyServer, service.Webhooks, Parted]:
    server = NotifyServer()
    box: list[Parted] = []

    def opener(caps: dict[str, tuple[int, int]]) -> Parted:
        box.append(Parted(caps))
        return box[0]

    hooks = service.Webhooks(server, [HOOK], "test", opener=opener, shards=shards)
    await hooks.start()
    return server, hooks, box[0]


async def until_true(pred: object, what: str) -> None:
    async def wait() -> None:
        while not pred():  # type: ignore[operator]
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(wait(), 10)
    except TimeoutError:
        raise AssertionError(what) from None


async def test_a_shard_acquired_meanwhile_is_caught_up_before_its_writes_go_in() -> None:
    shards = Shards()
    server, hooks, box = await started(shards)
    g1, g2 = two_groups()
    box.parts |= {shard_of(g1), shard_of(g2)}  # baselined long ago: g2 is a new group
    try:
        # g2's previous owner stored view 1 and died before its writer took it
        v1 = view(g2, 1)
        store(server, v1)
        box.gate.clear()
        shards.now = {shard_of(g1): 1}  # this node acquires g1's shard: its catch-up waits
        await until_true(box.at_gate.is_set, "the catch-up of g1's shard started")
        # meanwhile it acquires g2's shard too, and stores g2's view 2 at once
        shards.now = {shard_of(g1): 1, shard_of(g2): 1}
        v2 = view(g2, 2)
        store(server, v2, hooks)
        box.gate.set()
        want = ids(v1, v2)

        def first_arrivals() -> list[str]:
            return list(dict.fromkeys(r.id for r in box.peek(HOOK.key, 100)))

        await until_true(lambda: first_arrivals() == want,
                         "view 1's events (from the catch-up), then view 2's")
        assert box.box.cursors([g2])[g2].view == 2
    finally:
        await hooks.stop()


async def test_a_write_hooked_after_its_shard_left_is_written_without_its_cursor() -> None:
    shards = Shards()
    server, hooks, box = await started(shards)
    g1, _ = two_groups()
    box.parts.add(shard_of(g1))
    try:
        shards.now = {shard_of(g1): 1}
        v1 = view(g1, 1)
        store(server, v1, hooks)
        await until_true(lambda: g1 in box.box.cursors(), "g1's first events and cursor")
        shards.now = {}  # the shard went; this node had stored view 2 as the owner
        v2 = view(g1, 2)
        store(server, v2, hooks)
        await until_true(lambda: list(dict.fromkeys(r.id for r in box.peek(HOOK.key, 100)))
                         == ids(v1, v2), "view 2's rows")
        assert box.box.cursors([g1])[g1].view == 1  # its cursor is the next owner's to move
    finally:
        await hooks.stop()


async def test_a_write_the_old_owner_stored_after_the_shards_catch_up_is_not_passed() -> None:
    """The old owner, paused past its lease, wakes and stores one more write after this node
    caught the shard up, but before this node loaded (fenced) the group, and dies before its
    writer takes it. This node's first write to the group then waits for what the log holds
    before it (`Source.before`): the old owner's write is announced, and this node's own is
    not derived twice (without that step, its cursor passes the old write: lost)."""
    shards = Shards()
    server, hooks, box = await started(shards)
    g1, _ = two_groups()
    box.parts.add(shard_of(g1))
    try:
        shards.now = {shard_of(g1): 1}
        await until_true(lambda: shard_of(g1) in hooks._caught, "the shard's catch-up")
        v1 = view(g1, 1)
        store(server, v1)  # the old owner's, never hooked here
        v2 = view(g1, 2)
        store(server, v2)  # this node's first, after its fence
        hooks._stored(v2)
        await until_true(lambda: box.box.cursors([g1]).get(g1, Cursor(g1, 0, 0, 0, ())).view
                         == 2, "view 2's cursor")
        assert [r.id for r in box.peek(HOOK.key, 100)] == ids(v1, v2)  # in order, once
        # the group's next write goes straight in
        v3 = view(g1, 3)
        store(server, v3, hooks)
        await until_true(lambda: [r.id for r in box.peek(HOOK.key, 100)] == ids(v1, v2, v3),
                         "view 3's events")
    finally:
        await hooks.stop()


async def test_a_shard_lost_and_taken_back_between_two_looks_is_a_new_holding() -> None:
    """The shard is lost and held again under a new term before the writer looked (a NATS
    disruption that reshuffled leases while the writer waited on the outbox): the batch that
    waited under the old term goes in as rows only (its cursor could pass what the owner in
    between has not written), the new term's first write waits for the new catch-up, and in
    the end every event is there, first arrivals in order."""
    shards = Shards()
    server, hooks, box = await started(shards)
    g1, _ = two_groups()
    s = shard_of(g1)
    box.parts.add(s)
    try:
        box.gate.clear()
        shards.now = {s: 1}
        await until_true(box.at_gate.is_set, "term 1's catch-up started")
        v1 = view(g1, 1)
        store(server, v1, hooks)
        assert hooks._waiting[s][0] == 1 and hooks._due[g1][1] == 1
        shards.now = {s: 2}  # lost and taken back, unseen by the writer
        v2 = view(g1, 2)
        store(server, v2, hooks)
        # term 1's batch went in as rows only; v2 waits under term 2, due under term 2
        assert hooks._waiting[s][0] == 2 and hooks._due[g1][1] == 2
        assert ids(v1) == [e.id for _, e in hooks._pending.rows] and not hooks._pending.cursors
        box.gate.set()
        await until_true(lambda: list(dict.fromkeys(r.id for r in box.peek(HOOK.key, 100)))
                         == ids(v1, v2), "every event, first arrivals in order")
        await until_true(lambda: box.box.cursors([g1]).get(g1, Cursor(g1, 0, 0, 0, ())).view
                         == 2, "view 2's cursor")
    finally:
        await hooks.stop()


async def test_a_catch_up_that_fails_is_tried_again_and_its_writes_wait_for_it() -> None:
    shards = Shards()
    server, hooks, box = await started(shards)
    g1, _ = two_groups()
    box.parts.add(shard_of(g1))
    box.fail = 2
    try:
        shards.now = {shard_of(g1): 1}
        v1 = view(g1, 1)
        store(server, v1, hooks)
        await until_true(lambda: box.fail == 0 and hooks._reconcile_failures == 0
                         and shard_of(g1) in hooks._caught, "caught up at the third try")
        # (derived by the catch-up from the log, and by the hook: the same ids)
        await until_true(lambda: list(dict.fromkeys(r.id for r in box.peek(HOOK.key, 100)))
                         == ids(v1), "view 1's events, once the catch-up succeeded")
        assert box.box.cursors([g1])[g1].view == 1
    finally:
        await hooks.stop()


async def test_a_write_stored_after_the_catch_up_with_no_write_here_is_found_by_the_recheck(
        ) -> None:
    """The old owner, paused past its lease, stores one last write (a leave) after this node
    caught the shard up and dies; nobody writes to the group here again. The shard's second
    catch-up (`recheck_after` later) derives it; without it the event would wait for the
    group's next write, forever if there is none."""
    shards = Shards()
    server, hooks, box = await started(shards)
    hooks.recheck_after = 0.3
    g1, _ = two_groups()
    box.parts.add(shard_of(g1))
    try:
        shards.now = {shard_of(g1): 1}
        await until_true(lambda: shard_of(g1) in hooks._caught, "the shard's catch-up")
        v1 = view(g1, 1)
        store(server, v1)  # the old owner's, never hooked here
        await until_true(lambda: [r.id for r in box.peek(HOOK.key, 100)] == ids(v1),
                         "view 1's events, from the second catch-up")
        assert box.box.cursors([g1])[g1].view == 1 and not hooks._recheck
    finally:
        await hooks.stop()
