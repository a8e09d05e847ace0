"""One chaos client process: a real SDK client (`client_sdk.connect`) as a publisher or a
subscriber, started by the runner with a JSON config file:

    python -m notify_chaos.client CONFIG.json

Both roles write the client event log (DESIGN §6) through `notify.eventlog.EventLog` into
`log_dir/events-<name>.jsonl`: `client.view`, `client.reset`, `client.disconnect`,
`client.reconnect`, and `client.deliver` (a publisher delivers its own messages too, G4) with
what the application was handed
(`offset, stream, seq, sender, sent_ts, recv_ts`, the view it was in, the message's own view
`msg_view`, a per-client index `n`, and the publish id `pid` and `epoch` the verdict keys on).

A publisher joins its groups, prints `ready`, waits for `start_at` (wall clock), then publishes
at `rate` msg/s (round-robin over its groups, each publish its own task so a slow ack does not
slow the rate; FIFO per sender is kept by the SDK's queue) until `stop_at`. Every
acknowledgement (`published`) goes to `acks_dir/acks-<name>.jsonl` as `{pid, group, offset, sent_ts,
ts}`; every failure as `{pid, group, error, ts}`. It then waits for the answers still due
(bounded) and prints `published`.

Every payload carries the publisher's send counter `c` (1, 2, 3, ... in the order its
application made the publishes, over all its groups), logged with each delivery as `ctr`: the
verdict checks that each member got each FIFO sender's counters in increasing order (the
sender's order, not only the server's seqs). With `windows` (the scenario's
`clients.schedule`) a publisher publishes only within them: a quiet sender, bursts.

A churner (role `churner`) joins its groups, stays `stay` s, leaves, stays away `away` s, and
again, from `start_at` until `stop_at`, logging each `client.churn{action: join|leave}`.

At the end every client logs `client.sdk_duplicates{group, dropped}` per group: the
deliveries its SDK dropped as duplicates (`Group.duplicates_dropped`; the verdict wants 0).

Then every client (a subscriber from the start) delivers until the runner writes `stop_file`
(JSON: group -> the offset of the last acknowledged message, and `_deadline`) and it has
delivered that offset in each group, or the deadline passes. SIGTERM ends either role cleanly
(logs flushed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from client_sdk import (
    Backoff,
    ClientOptions,
    ConnectionState,
    Message,
    Removed,
    Reset,
    ViewInstalled,
    connect,
)
from client_sdk.client import Client, Group
from notify.eventlog import EventLog


async def _until_set(event: asyncio.Event, seconds: float) -> None:
    """Wait up to `seconds` (none if negative), less once `event` is set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, seconds)):
            await event.wait()


def _options(o: dict[str, Any]) -> ClientOptions:
    return ClientOptions(
        backoff=Backoff(base=o["backoff_base"], cap=o["backoff_cap"]),
        heartbeat_interval=o["heartbeat_interval"], heartbeat_timeout=o["heartbeat_timeout"],
        request_timeout=o["request_timeout"], max_pending_publishes=o["max_pending_publishes"])


class ChaosClient:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.name: str = cfg["name"]
        self.log = EventLog(cfg["log_dir"], self.name)
        self.stop = asyncio.Event()
        self.client: Client | None = None
        self.view: dict[str, int] = {}
        self.epoch: dict[str, int] = {}
        self.delivered: dict[str, int] = {}  # group -> highest offset in the current epoch
        self.n = 0
        self._lost_at: float | None = None
        #: every group handle this client joined (a churner joins a group many times)
        self.joined: list[Group] = []

    @property
    def member(self) -> str:
        """The member id the views list (`name#instance`: the SDK picks the instance; or
        `user#name` for an instance of a scenario's `users`), which the logs must say for the
        verdict to match deliveries to views."""
        if self.client is not None:
            return self.client.member
        user = self.cfg.get("user")
        return self.name if user is None else f"{user}#{self.name}"

    def _state(self, old: ConnectionState, new: ConnectionState) -> None:
        now = time.time()
        if new is ConnectionState.RECONNECTING and old is ConnectionState.CONNECTED:
            self._lost_at = now
            self.log.write("client.disconnect", now, member=self.member, reason="lost")
        elif new is ConnectionState.CONNECTED and self._lost_at is not None:
            self.log.write("client.reconnect", now, member=self.member,
                           gap_ms=round((now - self._lost_at) * 1000, 3), resumed=True)
            self._lost_at = None

    async def consume(self, group: Group) -> None:
        g = group.name
        async for e in group:
            now = time.time()
            if isinstance(e, Message):
                self.n += 1
                p = e.payload if isinstance(e.payload, dict) else {}
                self.log.write("client.deliver", now, group=g, member=self.member,
                               view=self.view.get(g), offset=e.offset, stream=e.stream,
                               seq=e.seq, sender=e.sender, atomic=e.atomic, msg_view=e.view,
                               sent_ts=p.get("t"), recv_ts=now, n=self.n, pid=p.get("id"),
                               ctr=p.get("c"), bytes=p.get("b"), epoch=self.epoch.get(g, 0))
                self.delivered[g] = max(self.delivered.get(g, 0), e.offset)
            elif isinstance(e, ViewInstalled):
                self.view[g] = e.view
                self.log.write("client.view", now, group=g, member=self.member, view=e.view,
                               members=list(e.members), epoch=self.epoch.get(g, 0))
            elif isinstance(e, Reset):
                self.epoch[g] = e.new_epoch
                self.delivered[g] = 0
                self.log.write("client.reset", now, group=g, member=self.member, reason=e.reason,
                               from_offset=e.old_offset, offset=e.new_offset,
                               old_epoch=e.old_epoch, epoch=e.new_epoch)
            elif isinstance(e, Removed):
                self.log.write("client.view", now, group=g, member=self.member, view=e.view,
                               members=[], removed=True, epoch=self.epoch.get(g, 0))
                return

    async def run(self) -> None:
        cfg = self.cfg
        # a user's instance (scenario `users`): named after this client; else a user of its own
        user = cfg.get("user")
        who: dict[str, Any] = ({"member": self.name} if user is None
                               else {"member": user, "instance": self.name})
        async with connect(cfg["url"], **who, options=_options(cfg["options"])) as c:
            self.client = c
            c.on_state_change(self._state)
            groups: list[Group] = []
            consumers: list[asyncio.Task[None]] = []
            if cfg["role"] == "churner":
                print("ready", flush=True)
                try:
                    await self.churn(c)
                finally:
                    self.log_duplicates()
                return
            subscriber = cfg["role"] == "subscriber"
            for g in cfg["groups"]:
                grp = await c.join(g)
                groups.append(grp)
                self.joined.append(grp)
                consumers.append(asyncio.create_task(self.consume(grp)))
            print("ready", flush=True)
            try:
                if not subscriber:
                    await self.publish(groups)
                    print("published", flush=True)
                # every member (a publisher too) delivers up to the last acknowledged offset
                await self.subscribe()
            finally:
                self.log_duplicates()
                for t in consumers:
                    t.cancel()
                await asyncio.gather(*consumers, return_exceptions=True)

    def log_duplicates(self) -> None:
        """The deliveries the SDK dropped as duplicates, per group (summed over this client's
        joins of it): a duplicate the server sent is a fault even when the SDK hides it."""
        dropped: dict[str, int] = {}
        for grp in self.joined:
            dropped[grp.name] = dropped.get(grp.name, 0) + grp.duplicates_dropped
        now = time.time()
        for g, n in sorted(dropped.items()):
            self.log.write("client.sdk_duplicates", now, group=g, member=self.member, dropped=n)

    async def churn(self, c: Client) -> None:
        """Join, stay, leave, stay away, again (each join a new `Group` of the same name),
        until `stop_at`; the events are consumed (not logged: nothing is owed to a churner)."""
        cfg = self.cfg

        async def drain(grp: Group) -> None:
            async for _ in grp:
                pass

        await _until_set(self.stop, cfg["start_at"] - time.time())
        while not self.stop.is_set() and time.time() < cfg["stop_at"]:
            for g in cfg["groups"]:
                try:
                    grp = await c.join(g)
                except Exception as e:
                    self.log.write("client.churn", time.time(), group=g, member=self.member,
                                   action="join", error=type(e).__name__)
                    continue
                self.joined.append(grp)
                self.log.write("client.churn", time.time(), group=g, member=self.member,
                               action="join", view=grp.view.version if grp.view else None)
                task = asyncio.create_task(drain(grp))
                await _until_set(self.stop, cfg["stay"])
                try:
                    await grp.leave()
                    self.log.write("client.churn", time.time(), group=g, member=self.member,
                                   action="leave")
                except Exception as e:
                    self.log.write("client.churn", time.time(), group=g, member=self.member,
                                   action="leave", error=type(e).__name__)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await _until_set(self.stop, cfg["away"])

    async def subscribe(self) -> None:
        stop_file = Path(self.cfg["stop_file"])
        while not self.stop.is_set():
            if stop_file.exists():
                with contextlib.suppress(ValueError, OSError):
                    want: dict[str, int] = json.loads(stop_file.read_text())
                    deadline = float(want.pop("_deadline", 0))
                    if all(self.delivered.get(g, 0) >= o for g, o in want.items()) \
                            or time.time() >= deadline:
                        return
            await _until_set(self.stop, 0.1)

    async def publish(self, groups: list[Group]) -> None:
        cfg = self.cfg
        acks = open(Path(cfg["acks_dir"]) / f"acks-{self.name}.jsonl", "ab")  # noqa: SIM115
        pad = "x" * cfg["size"]
        inflight: set[asyncio.Task[None]] = set()

        async def one(group: Group, k: int) -> None:
            pid = f"{self.name}-{k}"
            sent = time.time()
            try:
                # `c`: the send counter (1, 2, 3, ... in the order the application published)
                r = await group.publish({"id": pid, "c": k + 1, "t": sent, "b": cfg["size"],
                                         "pad": pad},
                                        order=cfg["order"], atomic=cfg["atomic"],
                                        publish_id=pid)
                rec: dict[str, Any] = {"pid": pid, "group": group.name, "offset": r.offset,
                                       "sent_ts": sent, "ts": time.time()}
                if r.committed is False:
                    rec["aborted"] = r.reason or True
            except Exception as e:
                rec = {"pid": pid, "group": group.name, "sent_ts": sent, "ts": time.time(),
                       "error": type(e).__name__, "detail": str(e)[:200]}
            acks.write(orjson.dumps(rec) + b"\n")

        try:
            delay = cfg["start_at"] - time.time()
            if delay > 0:
                await _until_set(self.stop, delay)
            interval = 1.0 / cfg["rate"]
            t0, k = time.monotonic(), 0
            stop_s = cfg["stop_at"] - cfg["start_at"]
            # (from, to) seconds from t=0; the scenario's schedule, or the whole run
            windows = [(a, min(b, stop_s)) for a, b in cfg.get("windows") or [(0.0, stop_s)]]
            for w_from, w_to in windows:
                j = 0  # the j-th publish of this window is due at w_from + j / rate
                while not self.stop.is_set():
                    due = t0 + w_from + j * interval
                    now = time.monotonic()
                    if due >= t0 + w_to:
                        break
                    if due > now:
                        await _until_set(self.stop, due - now)
                        continue
                    t = asyncio.create_task(one(groups[k % len(groups)], k))
                    inflight.add(t)
                    t.add_done_callback(inflight.discard)
                    k += 1
                    j += 1
            if inflight:  # answers still due: bounded by request_timeout (+ a margin)
                await asyncio.wait(set(inflight), timeout=cfg["options"]["request_timeout"] + 5)
        finally:
            for t in inflight:
                t.cancel()
            await asyncio.gather(*inflight, return_exceptions=True)
            acks.close()


async def _main(cfg: dict[str, Any]) -> int:
    cc = ChaosClient(cfg)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, cc.stop.set)
    try:
        await cc.run()
    finally:
        cc.log.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cfg = json.loads(Path(args[0]).read_text())
    return asyncio.run(_main(cfg))


if __name__ == "__main__":
    sys.exit(main())
