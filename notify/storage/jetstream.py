"""The log on NATS JetStream: a replicated `MessageLog` (DESIGN §9, docs/cluster.md).

Layout. One stream (R3 by default; `replicas`) holds every group; each group has a subject
space of its own, `<prefix>.<g>.>`, where `<g>` is the group name escaped into ONE subject token
(`escape_group`: letters, digits and `-` as they are, every other byte `_XX`, so `.`, `:`, `/`,
`@` and non-ASCII names are safe and the escape is reversible). The records:

- `<prefix>.<g>.m`: one accepted message. Its body is the message's metadata as JSON, a newline,
  and the payload bytes exactly as the edge wrote them (read back as an `orjson.Fragment`, never
  parsed again). The metadata's `c` is the group's payload bytes up to and with this message
  (the bytes rule's measure, see "Retention");
- `<prefix>.<g>.v`: one stored view (`StoreView`): the install and the atomic messages it aborted
  (with count retention, also the earlier aborts whose messages may still be retained);
- `<prefix>.<g>.s`: with count retention, every stream's last seq, in an append's batch every
  N/2 messages, so that seqs outlive the messages (see "The stream seqs outlive count retention");
- `<prefix>.<g>.f`: cluster mode, the fence a node appends when it loads the group;
- `<prefix>.<g>.p`: the last prune's record: the seqs and publish ids of the messages it purged
  (and of those the records before it purged), so that they outlive them (see "Retention").

Writes. Each `write` is ONE JetStream atomic batch (`Nats-Batch-Id/-Sequence/-Commit`, the stream
has `allow_atomic`): an `Append`'s messages, or a view's one record. The first record carries
`Nats-Expected-Last-Subject-Sequence` with `-Subject: <prefix>.<g>.>`: the sequence of the last
record of the group this log instance knows (from loading the group, then from its own acks).
If anyone else appended to the group since (a second owner), JetStream refuses the whole batch
(10071 "wrong last sequence") and the write is answered `done(reason)`: nothing of it is stored.
Every record carries `Nats-Msg-Id` (`<writer>:<ticket>:<i>`), which names this writer's records.
`done(None)` is answered only after the commit's ack, i.e. after the batch is stored on a quorum
of the stream's replicas (with `sync_interval: always`, fsynced there).

A batch larger than `max_batch` messages is split into consecutive atomic batches, each fenced
on the previous one's ack (NOT atomic as a whole: if a later part fails, the earlier parts stay
in the log, so the write is answered `Fenced`, see below). The server's own limit on an atomic
batch is 1000 messages.

Ambiguous answers (issue 32, C2/C3). A publish that times out (or loses its connection) may or
may not be stored, and a write is never answered as refused unless the log shows that nothing
of it is stored: the core retracts a refused append and gives its offsets to the next messages,
so a refused-but-stored append would be delivered to a new owner's members (refused to its
publisher), and after a later view record, in a view later than the one it was sent in (G2).
An unclear write is resolved against the log by its msg ids, within the write's bound:

- the group's last record (read from the stream leader) is this write's last record: stored;
- otherwise the batch is sent again with the same msg ids, and JetStream itself says whether
  they are stored: 10201 ("atomic publish batch contains duplicate message id", checked before
  the fence's CAS) means stored; then, if the group's last record is still this write's, it is
  a success, else another writer appended after it (a new owner's fence) and it is `FENCED`.
  An ack means stored now, 10071 that it was not and the group has another writer (`FENCED`);
- if the bound passes first (no stream leader, no answer), the write is answered as a `Fenced`
  `UNRESOLVED`, never as a refusal: the driver drops the group, as it does for a fence, and its
  next load rebuilds it from what the log holds (with the write, or without it). The group is
  marked unknown until then: a later write to it without a load is answered the same way, so
  nothing (a view record, say) is ever written on top of a write the core may have retracted.

The same holds for a write split into several batches: once a part is stored, a later part
that fails makes the whole write `Fenced` (rebuilt from the log), not refused.
The duplicate window (`duplicate_window`, 2 min) is far longer than a write's bound
(`timeout` x 4 at most), so a re-send always finds the ids of an attempt that was stored.

Reading back (`load`, `load_group`). The group's last sequence is read from the stream leader
(`STREAM.MSG.GET`, last per subject); then batched direct gets (`next_by_subj` over
`<prefix>.<g>.>`, `read_batch` records per request, no consumer) read the group's retained
records in log order up to it (a follower that is behind is asked again). A message record at
an offset at or below the head so far supersedes what was there (the core reuses the offsets of
a retracted append): the log is replayed as redo with truncation. Cost: four leader gets
(together), then every retained record of the group in requests of `read_batch`, O(retention)
per load, as SQLite's `GROUP BY` over a group's messages. `load` lists the groups by
`STREAM.INFO` with a `subjects_filter` of `<prefix>.*.v` (one request; a huge number of groups
would need paging) and loads those whose last view has members; `list_groups` (the server API's
listing) reads the same list, then the listed groups' last records, and loads none.

Paging (`read_page`: catch-up past the in-memory window, history). A page reads the group's
last records from the stream leader (its head, the stream sequence to read up to: records
stored after that are the next page's, so pages read while the group is written never skip or
repeat a message), the first retained message (one direct get: `first`), then, with the same
batched direct gets as a load, the records from just past the message at `after` until the
page is full and the next message is seen: the view records in between are the installs it
covers (one installed at offset o sits after message o, so the ones at the page's last offset
come too). Its atomic messages' aborts are in the view records that decided them, after them:
those read, the last one, and if some atomic message is still undecided the group's later view
records (views only, `next_by_subj` `<prefix>.<g>.v`). Where `after` ends in the stream is
remembered from the page that ended there (the last 1,024 pages read), so paging through a
group costs one batch per page and never reads it again from the start; an offset no page
ended at is found by a binary search over stream sequences (`_page_start`). The view history
is the `.v` records themselves: with `max_msgs_per_subject` N, a group keeps its newest N
messages and, separately, its newest N views, so a page over messages older than the oldest
view record kept lacks the installs that were there (it says nothing else: each message
carries the view it was sent in, so a caller sees the gap), and its aborts are still complete
(each view record carries every earlier abort whose message may be retained, see `_aborts`).
`max_age` removes old records of every kind alike.

Retention. The stream's `max_msgs_per_subject` N is the upper bound (the largest count of any
rule, `notify serve` sets it so); N is what the invariants above are built on (`_state_record`,
`_aborts`), and they hold for any group that keeps fewer. Each group's own rule (`retention`,
`CoreConfig.retention_for`: count, bytes, age; the first matching rule wins) is applied by
`prune`, with SQLite's semantics: a message goes if it is not among the newest `messages`, or
it and the newer ones hold more than `bytes` of payload (`c` at the head minus `c` before it),
or it is older than `age` by its time; the head message always stays (so the head does). What
goes is a prefix of the group's `.m` records (the first one the rule keeps ends it; a record
from before `c` is kept by the bytes rule), purged with one `STREAM.PURGE` (`filter`: the
group's `.m`, `seq`: the first kept). Before that purge, a `.p` record is appended (an atomic
batch of one, fenced like a write): the highest seq of each stream among the purged messages
and the last `.p` record (C1: a stream whose last message is purged keeps its seq; `.s` records
cover those that N took), and the publish ids of the purged messages and of the last `.p`
record, kept for a day after their message's time, the last `RECENT_IDS` per sender, and at
most `ids_bytes` (and half the servers' `max_payload`), the newest first; then the older `.p`
records are purged. So a reader sees, for each purged message, either it or a `.p` record after
it: a load brings back the head, the seqs, `first` and the ids (`StoredGroup.ids`) as before.
The ids of a `.p` record expire only when a later prune of the group writes the next one.

A `.p` record can be the group's last record: `_last_record` reads `.p` too. The purge and the
record are done alone with the group: writes and loads of it wait (`_using`), and a prune
leaves a group with one under way for the next pass (a load that read the group's last record
before the `.p` record was stored would read on past the purged messages without it). A page
is not excluded: one read while a prune purged what it wanted says so by `first` (`_read_page`).
A pass lists the groups with more than one message record (one `STREAM.INFO`; in cluster mode
only those this node holds), goes round robin from where the last pass finished, and stops after
`prune_groups` groups, `prune_records` records read, or `4 x timeout`; a group costs two gets
(together) when nothing goes, and otherwise reads each purged record once, then the `.p` record
(read with the scan), its append and the two purges (together): measured on a loopback R3
cluster, about 1 ms a group when nothing goes and 11 ms when something does, and 4,100
records a second purged from one group. It runs on the log's loop (the
caller's thread waits, bounded), so the server's event loop never waits for it. Views are not
pruned by the rule: `.v` keeps the stream's N (a page still has the installs of the messages it
holds). Without `retention`, `prune` does nothing (the stream's limits only).

Threads. The seam is partly blocking (`load` is called on the event loop at start-up,
`load_group`/`prune` from worker threads) and nats-py is asyncio, so the connection lives on a
private event loop in a thread of its own (as SQLite has its writer thread). `write` hands the
publish to that loop and `done` is answered on the caller's loop; every wait is bounded.

Not built (yet): floors for the stream's `max_age` (a group whose records all aged out loses
its head and stream seqs; a rule's `age`, applied by `prune`, keeps them; `notify serve` sets no
stream `max_age`), and the publish ids of messages N took rather than a prune (a group whose
rule keeps the most: its messages past the newest N leave with their ids, and a retry of one
after a reload is accepted as new; groups with a smaller count are purged by prune first).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import uuid
from collections import OrderedDict
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Sequence,
)
from concurrent.futures import Future
from typing import Any, NamedTuple, TypeVar

import nats
import nats.errors
import nats.js.errors
import orjson
import structlog
from nats.aio.client import Client
from nats.js.api import KeyValueConfig, ObjectStoreConfig, StreamConfig
from nats.js.errors import KeyNotFoundError, NotFoundError, ObjectNotFoundError
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from notify.core.actions import Append, Message, StoreView, ViewInstall, Write
from notify.core.checkpoint import Checkpoint
from notify.core.config import Retention
from notify.core.events import ResumePoint
from notify.errortext import described
from notify.runtime.ports import Done, Fenced
from notify.storage.base import (
    MAX_LIST,
    RECENT_IDS,
    SENDER_IDS_AGE,
    CheckpointSuperseded,
    GroupInfo,
    LogPage,
    StoredGroup,
    installs_between,
    last_ids,
)
from notify.storage.natsloop import (
    LoopThread,
    close_within,
    found_or_made,
    key_value,
    open_stream,
)

log = structlog.get_logger("notify.storage")

T = TypeVar("T")

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")


def revocations_bucket(stream: str) -> str:
    """The KV bucket of the disconnects of a log's users (key: the user, escaped like a group;
    value: `{"user", "at"}`), beside the log's stream."""
    return f"{stream}_revocations"


def escape_group(group: str) -> str:
    """The group name as one subject token, reversibly (`unescape_group`)."""
    if not group:
        return "_"
    return "".join(chr(b) if b in _SAFE else f"_{b:02X}" for b in group.encode())


def unescape_group(token: str) -> str:
    if token == "_":
        return ""
    out = bytearray()
    i = 0
    while i < len(token):
        if token[i] == "_":
            out.append(int(token[i + 1:i + 3], 16))
            i += 3
        else:
            out.append(ord(token[i]))
            i += 1
    return out.decode()


#: how many page starts `_page_start` remembers
_PAGE_STARTS = 1024
#: groups whose last records `list_groups` reads at once
LIST_BATCH = 32


class _Tail(NamedTuple):
    """A group's end as the stream leader has it, for a page."""

    #: the stream sequence of its last record (0: the log never had the group)
    last: int
    #: its last offset: the last message's, or the last view's if later (age retention)
    head: int
    #: the stream sequence of its last view record (0: none), and that record
    view_seq: int
    view: dict[str, Any] | None


class _Unclear(Exception):
    """A batch's commit got no answer (timeout, lost connection): it may or may not be stored."""


class _Unresolved(Exception):
    """A batch that may be stored, and the log could not say within the write's bound."""


class FenceError(Exception):
    """JetStream refused a write (e.g. 10071: another writer appended to the group)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


#: bytes of a message record besides its payload, at most: the metadata line (its strings
#: are 256 characters each, 6 bytes a character when escaped), the headers of its batch
#: (`_batch_once`: the expected subject holds the escaped group name) and room to spare
RECORD_ROOM = 16 << 10
#: the smallest max_frame_bytes a server takes (notify/config.py)
MIN_FRAME_BYTES = 1024


class MaxPayloadTooSmall(ValueError):
    """The NATS servers' `max_payload` cannot hold the record of the largest message the
    server accepts: found at start, not at the first such message (whose append would have
    the servers drop the node's connection, again at every try)."""


def fits(max_payload: int, max_payload_bytes: int) -> None:
    """Refuse to start (`MaxPayloadTooSmall`) where a message of `max_payload_bytes` of payload
    (the server's `max_frame_bytes`) would not fit in one NATS message of `max_payload`."""
    need = max_payload_bytes + RECORD_ROOM
    if max_payload < need:
        raise MaxPayloadTooSmall(
            f"the NATS servers' max_payload is {max_payload} bytes, and the record of a message "
            f"of max_frame_bytes ({max_payload_bytes}) needs up to {need}: set max_payload to "
            f"at least {need} in every nats-server's configuration (`max_payload: 8MB`)"
            + (f", or lower max_frame_bytes to {max_payload - RECORD_ROOM} or less"
               if max_payload - RECORD_ROOM >= MIN_FRAME_BYTES else ""))


#: the reason a write is answered with when another writer appended to the group since this
#: one loaded it (10071): the group has a new owner, and this one must stop serving it
FENCED = "fenced: another writer owns the group now"
#: the reason a write is answered with (as a `Fenced`) when the log could not say, within the
#: write's bound, whether it is stored: the group is dropped and rebuilt from the log
UNRESOLVED = "unresolved: the log could not say whether the write is stored"
#: "wrong last sequence": 10071 for a single publish, 10164 inside an atomic batch
WRONG_LAST_SEQUENCE = frozenset({10071, 10164})
#: "atomic publish batch contains duplicate message id": a re-sent batch is already stored
DUPLICATE_MSG_ID = 10201


class JetStreamLog:
    def __init__(self, servers: str | Sequence[str], *, stream: str = "NOTIFY",
                 prefix: str = "nlog", replicas: int = 3,
                 max_msgs_per_subject: int | None = None, max_age: float | None = None,
                 timeout: float = 5.0, connect_timeout: float = 15.0,
                 max_batch: int = 500, read_batch: int = 256,
                 owner: str | None = None,
                 retention: Callable[[str], Retention] | None = None,
                 prune_groups: int = 10_000, prune_records: int = 100_000,
                 ids_bytes: int = 512 << 10, max_payload_bytes: int | None = None) -> None:
        self.servers = [servers] if isinstance(servers, str) else list(servers)
        self.stream, self.prefix, self.replicas = stream, prefix, replicas
        self.max_msgs_per_subject, self.max_age = max_msgs_per_subject, max_age
        self.timeout, self.max_batch, self.read_batch = timeout, max_batch, read_batch
        #: each group's rule (`CoreConfig.retention_for`), applied by `prune` below the
        #: stream's limits (module docstring, "Retention"); None: the stream's limits only
        self.retention = retention
        #: a `prune` pass examines at most this many groups and reads at most this many
        #: message records; the next pass goes on from there
        self.prune_groups, self.prune_records = prune_groups, prune_records
        #: the publish ids a pruned record carries, in bytes at most (and half the servers'
        #: max_payload at most)
        self.ids_bytes = ids_bytes
        self.writer = uuid.uuid4().hex[:12]
        #: cluster mode: who this writer is (a node id); loading a group then appends a fence
        #: record, after which nobody who loaded the group before can append to it
        self.owner = owner
        self.fences = 0
        #: numbers this writer's writes: a msg id must never repeat within the stream's
        #: duplicate window (2 min), and the core's tickets start again at 1 when a group is
        #: dropped and loaded again (cluster mode), which JetStream would refuse as duplicates
        self._writes = itertools.count(1)
        #: groups this writer holds (loaded, fenced when `owner` is set, not refused since):
        #: loading one again needs no new fence
        self._held: set[str] = set()
        #: the checkpoint buckets, made on first use
        self._cp: tuple[ObjectStore, KeyValue] | None = None
        #: the stream sequence of the group's last record, as this writer knows it
        self._last: dict[str, int] = {}
        #: groups with a write that may be stored and was answered `Fenced` (`UNRESOLVED`) ->
        #: why: no write goes on top of it until the group is loaded again
        self._unknown: dict[str, str] = {}
        #: each group's stream seqs as stored (loaded, then from this writer's acked appends),
        #: and how many message records were stored since its last state record (`.s`);
        #: its head and the aborts that may still be retained (carried by each view record)
        self._seqs: dict[str, dict[str, int]] = {}
        self._since: dict[str, int] = {}
        self._head: dict[str, int] = {}
        self._aborted: dict[str, set[int]] = {}
        #: each group's payload bytes up to its last stored message (`c` of the message
        #: records: the bytes rule's measure), as this writer knows it
        self._bytes: dict[str, int] = {}
        #: writes and loads under way per group, and the groups a prune is purging (each
        #: waits for the other: module docstring, "Retention"); entries leave when done
        self._busy: dict[str, int] = {}
        self._pruning: dict[str, asyncio.Event] = {}
        #: groups forgotten while their purge ran (`_forget` then waits for its end)
        self._forgotten: set[str] = set()
        #: the group token the last prune pass finished with: the next goes on after it
        self._prune_after = ""
        self._tasks: set[Future[Any]] = set()
        #: (group, offset) -> the stream sequence a page after that offset reads from
        #: (`_page_start`); used on the log's loop only
        self._page_starts: OrderedDict[tuple[str, int], int] = OrderedDict()
        self.batches = 0
        self._runner = LoopThread("jetstream-log")
        self._loop = self._runner.loop
        self._closed = False
        try:
            self._nc: Client = self._call(self._connect(connect_timeout),
                                          connect_timeout + 5)
            if max_payload_bytes is not None:  # (the servers' limit is known once connected)
                try:
                    fits(self._nc.max_payload, max_payload_bytes)
                except MaxPayloadTooSmall:
                    self._call(self._nc.close(), 5)
                    raise
            # now, not on first use: making a bucket is a meta-layer operation, which stalls
            # for seconds right after a server died, when loads are needed most (if it cannot
            # be done now, it is tried again by the first checkpoint operation)
            try:
                self._call(self._buckets(), connect_timeout + 5)
            except Exception as e:
                log.warning("checkpoint_buckets_unavailable", error=described(e))
        except BaseException:
            self._stop_loop()
            raise

    # -- plumbing --------------------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run `coro` on the log's loop and wait for it (bounded), from any other thread."""
        return self._runner.call(coro, timeout)

    async def _connect(self, timeout: float) -> Client:
        return await open_stream(self.servers, StreamConfig(
            name=self.stream, subjects=[f"{self.prefix}.>"], num_replicas=self.replicas,
            allow_atomic=True, allow_direct=True, duplicate_window=120.0,
            max_msgs_per_subject=self.max_msgs_per_subject or -1, max_age=self.max_age),
            timeout, "jetstream")

    def _subject(self, group: str, kind: str) -> str:
        return f"{self.prefix}.{escape_group(group)}.{kind}"

    # -- writing ---------------------------------------------------------------------------------

    def write(self, write: Write, done: Done) -> None:
        if self._closed:
            raise RuntimeError("the log is closed")
        caller = asyncio.get_running_loop()
        fut = asyncio.run_coroutine_threadsafe(self._write(write), self._loop)
        self._tasks.add(fut)

        def answer(f: Future[str | None]) -> None:
            self._tasks.discard(f)
            try:
                reason = f.result()
            except BaseException as e:  # cancelled at close, or a bug: never leave it hanging
                reason = described(e)
            with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting
                caller.call_soon_threadsafe(done, reason)

        fut.add_done_callback(answer)

    async def _write(self, w: Write) -> str | None:
        async with self._using(w.group):
            return await self._write_now(w)

    @contextlib.asynccontextmanager
    async def _using(self, group: str) -> AsyncIterator[None]:
        """A write or a load of `group`: it waits while a prune purges the group, and a prune
        leaves the group alone while one is under way (module docstring, "Retention")."""
        while (pruning := self._pruning.get(group)) is not None:
            await pruning.wait()
        self._busy[group] = self._busy.get(group, 0) + 1
        try:
            yield
        finally:
            n = self._busy.pop(group) - 1
            if n:
                self._busy[group] = n

    async def _write_now(self, w: Write) -> str | None:
        group = w.group
        if group in self._unknown:
            # an earlier write of this group may be stored, and the core was told `Fenced`
            # for it (it drops the group): nothing goes on top of it until it is loaded again
            self._held.discard(group)
            return Fenced(f"{UNRESOLVED} (an earlier write of {group!r})")
        stored_parts = 0
        try:
            if group not in self._last:
                self._last[group] = await self._last_seq(group)
            state: tuple[str, bytes] | None = None
            total = 0
            if isinstance(w, Append):
                if group not in self._bytes:
                    self._bytes[group] = await self._bytes_stored(group)
                total = self._bytes[group]
                records = []
                for m in w.messages:
                    record, total = _encode_message(m, total)
                    records.append((self._subject(group, "m"), record))
                # (not when the last part would hold the last message alone: the record must be
                # stored with it, all or nothing; the next append carries it, within N/2)
                state = self._state_record(group, w.messages) \
                    if len(w.messages) % self.max_batch else None
                if state is not None:  # before the last message: in the batch's last part
                    records.insert(len(records) - 1, state)
            else:
                assert isinstance(w, StoreView)
                records = [(self._subject(group, "v"), _encode_view(w, self._aborts(group, w)))]
            n = next(self._writes)
            ids = [f"{self.writer}:{n}:{i}" for i in range(len(records))]
            for start in range(0, len(records), self.max_batch):
                part = slice(start, start + self.max_batch)
                await self._batch(group, records[part], ids[part])
                stored_parts += 1
            self._acked(group, w, state is not None, total)
            return None
        except FenceError as e:
            if e.code in WRONG_LAST_SEQUENCE:
                # its writes keep failing (the fence stays where it was) until it is loaded,
                # and fenced, again
                self._held.discard(group)
                return Fenced(f"{FENCED} ({e})")
            if stored_parts:
                return self._unresolved(group, f"part {stored_parts + 1} refused: {e}")
            return f"refused by JetStream: {e}"
        except _Unresolved as e:
            return self._unresolved(group, str(e))
        except Exception as e:
            if stored_parts:
                return self._unresolved(group, f"part {stored_parts + 1}: {described(e)}")
            return described(e)

    def _unresolved(self, group: str, why: str) -> Fenced:
        """The write may be (partly) stored: the group is rebuilt from the log, never told
        refused (module docstring, "Ambiguous answers")."""
        self._held.discard(group)
        self._unknown[group] = why
        log.warning("jetstream_unresolved", group=group, error=why)
        return Fenced(f"{UNRESOLVED} ({why})")

    # The stream seqs outlive count retention (C1). `max_msgs_per_subject` keeps a group's
    # newest N message records, all senders together: a sender whose last message is older
    # would start again at seq 1 after a reload, and every receiver drop its next messages as
    # duplicates. So an append that brings the message records stored since the group's last
    # state record to N/2 carries a new one (`.s`, a subject of its own, so its own retention):
    # every stream's seq after that append, and the append's last offset. A stream's last
    # message therefore leaves the newest N only after a state record that holds its seq was
    # stored (N/2 is slack: a writer counts only the records of its acknowledged writes and
    # of its last load, not, say, a write stored although its answer was lost). The record sits
    # before the append's last message: the batch's last part (all or nothing with it), and the
    # group's last record is still a message (`_last_record`). Cost: one record of
    # O(streams) per N/2 messages.

    def _state_record(self, group: str, messages: Sequence[Message]) -> tuple[str, bytes] | None:
        n = self.max_msgs_per_subject
        if n is None or n <= 0:
            return None
        if self._since.get(group, 0) + len(messages) < max(1, n // 2):
            return None
        seqs = dict(self._seqs.get(group, {}))
        for m in messages:
            seqs[m.stream] = m.seq
        return self._subject(group, "s"), orjson.dumps({"o": messages[-1].offset, "seqs": seqs})

    def _aborts(self, group: str, w: StoreView) -> list[int]:
        """The aborts a view record carries: its own, and (with count retention) every earlier
        one whose message may still be retained, i.e. is among the newest N offsets. A view
        record leaves retention after N more views; its aborted messages may not (S12), and
        an aborted message read back without its abort would come back as committed (G5)."""
        n = self.max_msgs_per_subject
        if n is None or n <= 0:
            return list(w.aborted)
        floor = max(self._head.get(group, 0), w.install.offset) - n
        kept = {o for o in self._aborted.get(group, ()) if o > floor}
        self._aborted[group] = kept
        return sorted(kept.union(w.aborted))

    def _acked(self, group: str, w: Write, state: bool, total: int) -> None:
        """`w` was stored (acked), with a state record if `state`; an append's messages bring
        the group's payload bytes to `total`."""
        if isinstance(w, StoreView):
            self._aborted.setdefault(group, set()).update(w.aborted)
            return
        seqs = self._seqs.setdefault(group, {})
        for m in w.messages:
            seqs[m.stream] = m.seq
        self._head[group] = max(self._head.get(group, 0), w.messages[-1].offset)
        self._since[group] = 0 if state else self._since.get(group, 0) + len(w.messages)
        self._bytes[group] = max(self._bytes.get(group, 0), total)

    async def _bytes_stored(self, group: str) -> int:
        """The group's payload bytes up to its last stored message (its `c`; 0: none, or a
        record from before `c` existed)."""
        last = await self._last_of(group, "m")
        return 0 if last is None else _counted(last[1])

    async def _batch(self, group: str, records: list[tuple[str, bytes]],
                     ids: list[str]) -> None:
        """One atomic batch, fenced on the group's last known record. Raises `FenceError`
        only when nothing of it is stored, `_Unresolved` when it may be; on an unclear answer
        it is resolved by its msg ids (module docstring, "Ambiguous answers")."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout * 2
        delay = 0.1
        unclear: str | None = None  # why an earlier attempt's outcome is not known
        for attempt in itertools.count():
            try:
                return await self._batch_once(group, records, ids, attempt)
            except FenceError as e:
                if e.code == DUPLICATE_MSG_ID:  # an earlier attempt is stored
                    return await self._stored(group, ids[-1], deadline, str(e))
                if unclear is not None and e.code not in WRONG_LAST_SEQUENCE:
                    # (10071 is checked after 10201: then the earlier attempt is not stored)
                    raise _Unresolved(f"{unclear}; then {e}") from e
                raise
            except nats.errors.NoRespondersError as e:
                # nobody listens on the subject (the stream has no leader at the moment: just
                # created, or electing after a server died, which takes seconds): this attempt
                # is not stored. Try again until the deadline, rather than refuse the
                # publishers of a batch a few seconds would have stored.
                if loop.time() + delay > deadline:
                    if unclear is not None:
                        raise _Unresolved(f"{unclear}; then {described(e)}") from e
                    raise
            except _Unclear as e:
                unclear = str(e)
                if await self._try_resolve(group, ids[-1], deadline):
                    return  # the group's last record is this batch's: stored
                # not the last record (not stored, or someone appended after it), or not
                # readable: sent again with the same msg ids, which JetStream answers 10201
                # if they are stored
                if loop.time() + delay > deadline:
                    raise _Unresolved(f"no answer from JetStream ({unclear})") from e
            except Exception as e:
                if unclear is not None:
                    raise _Unresolved(f"{unclear}; then {described(e)}") from e
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    async def _stored(self, group: str, mine: str, deadline: float, why: str) -> None:
        """The batch whose last msg id is `mine` is stored (JetStream said 10201): a success
        if it is still the group's last record, else another writer appended after it."""
        if not await self._is_last(group, mine, deadline, why):
            raise FenceError(f"10071 stored, then another writer appended after it ({why})",
                             10071)

    async def _is_last(self, group: str, mine: str, deadline: float, why: str) -> bool:
        """Is the group's last record the batch whose last msg id is `mine`? If so it is
        stored, and the fence moves onto it. `_Unresolved` if the log cannot say by then."""
        seq, last_id = await self._last_record_by(group, deadline, why)
        if last_id != mine:
            return False
        self._last[group] = max(self._last.get(group, 0), seq)
        self.batches += 1
        return True

    async def _last_record_by(self, group: str, deadline: float,
                              why: str) -> tuple[int, str | None]:
        """The group's last record, asked again (a stream electing a leader answers nothing
        for a few seconds) until a second past `deadline`; `_Unresolved` if it cannot be read."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                async with asyncio.timeout(self.timeout):
                    return await self._last_record(group)
            except Exception as e:
                if loop.time() + 0.25 > deadline + 1.0:
                    raise _Unresolved(f"{why}; last record unreadable: {described(e)}") from e
                await asyncio.sleep(0.25)

    async def _batch_once(self, group: str, records: list[tuple[str, bytes]],
                          ids: list[str], attempt: int) -> None:
        # unique per writer, write, part and attempt
        batch = ids[0].replace(":", "-") + f"-{attempt}"
        n = len(records)
        try:
            for i, ((subject, body), msg_id) in enumerate(zip(records, ids, strict=True), 1):
                headers = {"Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(i),
                           "Nats-Msg-Id": msg_id}
                if i == 1:
                    headers["Nats-Expected-Last-Subject-Sequence"] = str(self._last[group])
                    headers["Nats-Expected-Last-Subject-Sequence-Subject"] = (
                        f"{self.prefix}.{escape_group(group)}.>")
                if i < n:
                    await self._nc.publish(subject, body, headers=headers)
                    continue
                headers["Nats-Batch-Commit"] = "1"
                reply = await self._nc.request(subject, body, headers=headers,
                                               timeout=self.timeout)
        except nats.errors.NoRespondersError:
            raise
        except Exception as e:
            raise _Unclear(described(e)) from e
        ack = orjson.loads(reply.data) if reply.data else {}
        if "error" in ack:
            err = ack["error"]
            raise FenceError(f"{err.get('err_code')} {err.get('description')}",
                             err.get("err_code"))
        if "seq" not in ack:
            raise RuntimeError(f"unexpected answer from JetStream: {reply.data!r}")
        # never backwards: an ack that arrives after a newer record of ours is old
        self._last[group] = max(self._last.get(group, 0), int(ack["seq"]))
        self.batches += 1

    async def _try_resolve(self, group: str, mine: str, deadline: float) -> bool:
        """After an unclear answer: True if the group's last record is `mine` (stored; the
        fence moves onto it). False if it is not, or cannot be read by `deadline` (a stream
        electing a leader answers nothing for a few seconds): the batch is then sent again."""
        try:
            return await self._is_last(group, mine, deadline, "")
        except _Unresolved:
            return False

    async def _last_record(self, group: str) -> tuple[int, str | None]:
        """(stream seq, msg id) of the group's last record; (0, None) if it has none. A `.s`
        record is never the last (it sits before its append's last message); a `.p` record
        is, right after a prune."""
        async def last(kind: str) -> tuple[int, str | None]:
            try:
                # STREAM.MSG.GET, answered by the stream leader: a direct get may be answered
                # by a follower that is behind, and the fence must be set on the last record
                raw = await self._nc.jsm().get_msg(self.stream, subject=self._subject(group, kind))
            except NotFoundError:
                return 0, None
            return raw.seq or 0, (raw.headers or {}).get("Nats-Msg-Id")

        return max(await asyncio.gather(*(last(kind) for kind in ("m", "v", "f", "p"))),
                   key=lambda r: r[0])

    async def _last_seq(self, group: str) -> int:
        async with asyncio.timeout(self.timeout):
            return (await self._last_record(group))[0]

    # -- reading ---------------------------------------------------------------------------------

    def load_group(self, group: str, recent: int) -> StoredGroup | None:
        return self._call(self._load_group(group, recent), self.timeout * 6)

    def load(self, recent: int) -> list[StoredGroup]:
        return self._call(self._load(recent), self.timeout * 60)

    def list_groups(self, prefix: str, after: str, limit: int) -> list[GroupInfo]:
        return self._call(self._list_groups(prefix, after, limit), self.timeout * 6)

    async def _list_groups(self, prefix: str, after: str, limit: int) -> list[GroupInfo]:
        """The names from one `STREAM.INFO` of the view subjects (as `load`), then each
        listed group's last records (`_tail`, three gets), `LIST_BATCH` groups at a time."""
        info = await self._nc.jsm().stream_info(self.stream,
                                                 subjects_filter=f"{self.prefix}.*.v")
        names = sorted(g for g in (unescape_group(s.split(".")[-2])
                                   for s in info.state.subjects or {})
                       if g > after and g.startswith(prefix))[:min(limit, MAX_LIST)]
        out: list[GroupInfo] = []
        for i in range(0, len(names), LIST_BATCH):
            batch = names[i:i + LIST_BATCH]
            async with asyncio.timeout(self.timeout):
                tails = await asyncio.gather(*(self._tail(g) for g in batch))
            out.extend(GroupInfo(g, t.view["view"], tuple(t.view["members"]), t.head)
                       for g, t in zip(batch, tails, strict=True) if t.view is not None)
        return out

    async def _load(self, recent: int) -> list[StoredGroup]:
        info = await self._nc.jsm().stream_info(self.stream,
                                                 subjects_filter=f"{self.prefix}.*.v")
        out = []
        for subject in sorted(info.state.subjects or {}):
            group = unescape_group(subject.split(".")[-2])
            raw = await self._nc.jsm().get_msg(self.stream, subject=subject)
            if not orjson.loads(raw.data or b"{}").get("members"):
                continue
            sg = await self._load_group(group, recent)
            if sg is not None:
                out.append(sg)
        return out

    async def _load_group(self, group: str, recent: int) -> StoredGroup | None:
        async with self._using(group):
            return await self._load_group_now(group, recent)

    async def _load_group_now(self, group: str, recent: int) -> StoredGroup | None:
        # A group this writer already holds (it loaded or wrote it, and was not refused since)
        # needs no new fence: nobody else can have appended. Fencing it again would move the
        # group's last record under a write of ours that is under way, and refuse it.
        fence = self.owner is not None and group not in self._held
        for _attempt in range(5):
            last = await self._last_seq(group)
            # the fence: what this writer knows of the group (never backwards: a write of ours
            # may have been acknowledged since that read)
            self._last[group] = max(self._last.get(group, 0), last)
            self._unknown.pop(group, None)
            if last == 0:
                self._held.add(group)  # a new group: its first write is fenced on nothing
                self._bytes.setdefault(group, 0)
                return None
            if not fence or await self._fence(group):
                self._held.add(group)
                return await self._replay(group, recent, self._last[group])
        raise RuntimeError(f"could not fence {group!r}: its owner keeps appending")

    def revoke(self, user: str, at: float) -> None:
        """A KV put in the log's revocations bucket (`revocations_bucket`: R`replicas`, one
        value per user, kept until deleted by hand), returned once a quorum stored it. Every
        node of a cluster watches the bucket (notify/cluster/revocations.py). A later
        revocation replaces an earlier one; one older than what is stored (nodes' clocks
        differ) changes nothing."""
        self._call(self._revoke(user, at), self.timeout * 4 + 1)

    async def _revoke(self, user: str, at: float) -> None:
        kv = await self._again(self._revocations_kv, self.timeout * 2, (NotFoundError,))
        key = escape_group(user)
        try:
            entry = await self._again(lambda: kv.get(key), self.timeout)
        except KeyNotFoundError:
            entry = None
        if entry is not None and entry.value and orjson.loads(entry.value)["at"] >= at:
            return
        # (the same value put twice is the same revocation: it may be asked again)
        await self._again(lambda: kv.put(key, orjson.dumps({"user": user, "at": at})),
                          self.timeout * 2)

    def revocations(self) -> dict[str, float]:
        """Every revocation stored (read at start-up: one pass over the bucket)."""
        return self._call(self._revocations(), self.timeout * 4 + 1)

    async def _revocations(self) -> dict[str, float]:
        return await self._again(self._read_revocations, self.timeout * 3, (NotFoundError,))

    async def _read_revocations(self) -> dict[str, float]:
        """Every key's last value, read to the end the stream had: the entry delivered with
        nothing pending after it (`delta == 0`). Not to the watcher's `None`: nats-py puts that
        marker first when its consumer info says nothing is pending and nothing has arrived
        yet, which is also true while the entries are on their way (a local run of
        test_revocations_are_kept_on_jetstream... read {} with two users revoked)."""
        kv = await self._revocations_kv()
        if not (await kv.status()).values:
            return {}
        watcher = await kv.watchall()
        out: dict[str, float] = {}
        try:
            while True:
                entry = await watcher.updates(self.timeout)  # type: ignore[no-untyped-call]
                if entry is None:
                    continue  # the marker, maybe early: the entries say where the end is
                if entry.value:  # (a delete or purge marker revokes nothing)
                    record = orjson.loads(entry.value)
                    out[record["user"]] = float(record["at"])
                if not entry.delta:
                    return out
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]

    async def _revocations_kv(self) -> KeyValue:
        js = self._nc.jetstream(timeout=self.timeout)
        name = revocations_bucket(self.stream)
        kv = await key_value(js, KeyValueConfig(bucket=name, history=1, replicas=self.replicas))
        info = (await kv.status()).stream_info
        if info.cluster is not None and not info.cluster.leader:
            raise TimeoutError(f"bucket {name} has no leader yet")
        return kv

    def forget(self, group: str) -> None:
        """This node no longer owns `group` (cluster mode): its next load fences it again, and
        rebuilds what the log keeps of it per group (G14: nothing of it stays here)."""
        self._loop.call_soon_threadsafe(self._forget, group)

    def _forget(self, group: str) -> None:
        if group in self._pruning:  # its purge's record is fenced on `_last`: when it ends
            self._forgotten.add(group)
            return
        self._held.discard(group)
        for table in (self._seqs, self._since, self._head, self._aborted, self._last,
                      self._bytes):
            table.pop(group, None)

    async def _fence(self, group: str) -> bool:
        """Take the group over (cluster mode): append a fence record on its last record. From
        then on, a writer that loaded the group before (a deposed owner, paused or cut off) is
        refused its next append (10071), and stops serving the group. False if that writer
        appended in between (its record is then read like any other: load again)."""
        record = orjson.dumps({"owner": self.owner, "writer": self.writer})
        msg_id = f"{self.writer}:fence:{self.fences}"
        self.fences += 1
        try:
            await self._batch(group, [(self._subject(group, "f"), record)], [msg_id])
        except FenceError as e:
            if e.code in WRONG_LAST_SEQUENCE:
                return False
            raise
        return True

    async def _replay(self, group: str, recent: int, last: int) -> StoredGroup | None:
        messages: list[Message] = []
        #: state records: (the last offset they cover, the stream seqs then)
        states: list[tuple[int, dict[str, int]]] = []
        since = 0  # message records after the last state record
        own = False  # the next message record is the last of the last state record's append
        aborted: set[int] = set()
        view: dict[str, Any] | None = None
        #: the last pruned record's publish ids (each carries the earlier ones it keeps)
        pruned: list[tuple[str, str, int]] = []
        last_message = b""  # the last message record: its `c` is the group's payload bytes
        async for subject, _seq, data in self._read(group, last):
            if subject.endswith(".m"):
                m, last_message = _decode_message(group, data), data
                while messages and messages[-1].offset >= m.offset:
                    messages.pop()  # a retracted append's offsets, reused: superseded
                if not (own and m.offset == states[-1][0]):
                    while states and states[-1][0] >= m.offset:
                        states.pop()  # (its append's state, the same)
                own = False
                messages.append(m)
                since += 1
            elif subject.endswith(".s"):
                state = orjson.loads(data)
                states.append((state["o"], state["seqs"]))
                own = True
                since = 0
            elif subject.endswith(".p"):  # a prune's: the seqs and ids of what it purged
                state = orjson.loads(data)
                states.append((state["o"], state["seqs"]))
                own = False
                pruned = [(sender, i, o) for sender, entries in state["ids"].items()
                          for i, o, _ts in entries]
            elif subject.endswith(".v"):
                view = orjson.loads(data)
                aborted.update(view["aborted"])
        if view is None:
            return None
        members = tuple(view["members"])
        install = ViewInstall(group, view["view"], members, tuple(view["joined"]),
                              tuple(view["left"]), view["epoch"], view["offset"])
        head = max(messages[-1].offset if messages else 0, view["offset"])
        # the streams' last seqs, over what was not superseded: the retained messages and the
        # state records (which hold the streams whose last message left retention)
        seqs: dict[str, int] = {}
        for _o, st in states:
            for stream, seq in st.items():
                seqs[stream] = max(seqs.get(stream, 0), seq)
        for m in messages:
            seqs[m.stream] = max(seqs.get(m.stream, 0), m.seq)
        known = self._seqs.setdefault(group, {})  # (never backwards: a write may have been
        for stream, seq in seqs.items():          # acked meanwhile)
            known[stream] = max(known.get(stream, 0), seq)
        self._since[group] = max(self._since.get(group, 0), since)
        self._head[group] = max(self._head.get(group, 0), head)
        self._aborted.setdefault(group, set()).update(aborted)
        self._bytes[group] = max(self._bytes.get(group, 0), _counted(last_message))
        window = messages[-recent:] if recent > 0 else []
        first = messages[0].offset if messages else head + 1
        # the publish ids before the window: of pruned messages (a `.p` record), then of the
        # retained ones, the last RECENT_IDS of each sender
        ids = last_ids(itertools.chain(
            sorted((x for x in pruned if x[2] < first), key=lambda x: x[2]),
            ((m.sender, m.id, m.offset) for m in messages[:len(messages) - len(window)])))
        return StoredGroup(group, view["epoch"], view["view"], members, head, seqs,
                           window, frozenset(aborted),
                           await self._checkpoint_or_none(group), install, first, ids)

    async def _read(self, group: str, last: int, *, start: int = 1, kind: str = ">",
                    batch: int | None = None) -> AsyncGenerator[tuple[str, int, bytes], None]:
        """The group's records in log order from stream sequence `start` up to `last`:
        (subject, seq, data); `kind` narrows them to one record kind (`v`: views only). Batched
        direct gets (`next_by_subj` over the group's subjects, `batch` records per request): no
        consumer, so nothing for the meta layer to create (which stalls while a killed node's
        meta leadership moves). A direct get may be answered by a follower that is behind: a
        batch that ends short of `last` is asked again (bounded). A record past `last` ends the
        read: records come in stream order, so none is left before it (the one at `last` was
        removed by retention, a newer record of its subject having been stored since).

        The caller may stop early (`contextlib.aclosing`): the subscription goes with it."""
        inbox = self._nc.new_inbox()
        # One batch at a time is in the inbox (the next is asked once this one ended), so a
        # pending limit of a whole batch of the largest records means none is ever dropped as
        # a slow consumer's (nats-py's default, 128 MiB, is less than 256 records of 1 MiB:
        # a dropped record would have been skipped silently, a view record too; cluster
        # review S9)
        size = min(batch or self.read_batch, self.read_batch)
        room = size + 2
        sub = await self._nc.subscribe(inbox, pending_msgs_limit=room,
                                       pending_bytes_limit=room * max(self._nc.max_payload,
                                                                      1 << 20))
        request = f"$JS.API.DIRECT.GET.{self.stream}"
        subjects = f"{self.prefix}.{escape_group(group)}.{kind}"
        deadline = asyncio.get_running_loop().time() + self.timeout * 4
        try:
            while start <= last:
                await self._nc.publish(request, orjson.dumps(
                    {"seq": start, "next_by_subj": subjects, "batch": size}), reply=inbox)
                got = 0
                while True:
                    m = await sub.next_msg(timeout=self.timeout)
                    headers = m.headers or {}
                    if headers.get("Status"):  # 204: end of this batch; 404: nothing more
                        break
                    seq = int(headers["Nats-Sequence"])
                    if seq > last:  # newer than what was asked for: not ours to read, and the
                        start = last + 1  # end of what was
                        continue
                    got += 1
                    start = seq + 1
                    yield headers["Nats-Subject"], seq, m.data
                if got == 0 and start <= last:  # a follower behind: ask again
                    if asyncio.get_running_loop().time() > deadline:
                        raise TimeoutError(f"could not read {group!r} up to {last}")
                    await asyncio.sleep(0.05)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    # -- paging (catch-up, history) ----------------------------------------------------------------

    def read_page(self, group: str, after: int, limit: int,
                  max_bytes: int) -> LogPage | None:
        return self._call(self._read_page(group, after, limit, max_bytes), self.timeout * 6)

    async def _read_page(self, group: str, after: int, limit: int,
                         max_bytes: int) -> LogPage | None:
        """One page (module docstring, "Paging"): the group's ends from the stream leader, the
        first retained message, where `after` ends in the stream, then the records from there
        in batches until the page is full and the next message is seen (the views at the
        page's last offset sit between the two), and the aborts of its atomic messages.

        Messages purged while the page is read (a prune, which purges a prefix of the group's
        messages) show as `first` past `after + 1`, from what the page read, never as a page
        that skips them: a page whose first message is past `after + 1`, or that has none
        below the head, says those offsets are gone."""
        if limit < 1:
            raise ValueError(f"a page holds at least one message (limit {limit})")
        async with asyncio.timeout(self.timeout):
            tail = await self._tail(group)
        if tail.last == 0:
            return None
        oldest = await self._next_record(self._subject(group, "m"), 1)
        head = tail.head
        first = _decode_message(group, oldest[1]).offset \
            if oldest is not None and oldest[0] <= tail.last else head + 1
        start = await self._page_start(group, after, tail.last)
        taken: list[Message] = []
        seqs: list[int] = []  # each taken message's record
        total = 0
        views: list[dict[str, Any]] = []
        read = start - 1  # the last record the scan read
        records = self._read(group, tail.last, start=start, batch=limit + 8)
        async with contextlib.aclosing(records):
            async for subject, seq, data in records:
                if subject.endswith(".m"):
                    m = _decode_message(group, data)
                    while taken and taken[-1].offset >= m.offset:  # superseded (`_replay`)
                        total -= taken.pop().size
                        seqs.pop()
                    if m.offset > after:
                        if taken and (len(taken) >= limit or total >= max_bytes
                                      or total + m.size > max_bytes):
                            break  # the next page's first message
                        taken.append(m)
                        seqs.append(seq)
                        total += m.size
                elif subject.endswith(".v"):
                    views.append(orjson.loads(data))
                read = seq
        end = taken[-1].offset if taken else head
        aborted = {o for v in views for o in v["aborted"]}
        if tail.view is not None:
            aborted.update(tail.view["aborted"])
        if any(m.atomic and m.offset not in aborted for m in taken) and tail.view_seq > read:
            # an atomic message's abort is stored with the view that decided it, after it: the
            # view records after the page (each with its own aborts; with count retention the
            # last one also carries the earlier ones, and it is already in hand)
            later = self._read(group, tail.view_seq, start=read + 1, kind="v")
            async with contextlib.aclosing(later):
                async for _subject, _seq, data in later:
                    aborted.update(orjson.loads(data)["aborted"])
        if taken:
            self._remember_start(group, end, seqs[-1] + 1)
            # (offsets are consecutive: a first message past `after + 1` says those before it
            # are gone; else a message stored after the ends were read may be older than it)
            first = taken[0].offset if taken[0].offset > after + 1 else \
                min(first, taken[0].offset)
            head = max(head, end)
        elif after < head:  # nothing below the head: purged while this page was read
            first = max(first, head + 1)
        installs = installs_between((_decode_install(group, v) for v in views), after, end)
        return LogPage(group, after, tuple(taken), installs,
                       frozenset(m.offset for m in taken if m.offset in aborted), first, head)

    async def _tail(self, group: str) -> _Tail:
        """The group's last record of each kind a page needs (not `.p`), from the stream
        leader (a direct get may be answered by a follower that is behind)."""
        m, v, f = await asyncio.gather(*(self._last_of(group, kind) for kind in "mvf"))
        view = orjson.loads(v[1]) if v is not None else None
        head = max(_decode_message(group, m[1]).offset if m is not None else 0,
                   view["offset"] if view is not None else 0)
        return _Tail(max(r[0] if r is not None else 0 for r in (m, v, f)), head,
                     v[0] if v is not None else 0, view)

    async def _next_record(self, subject: str, seq: int) -> tuple[int, bytes] | None:
        """The first record of `subject` at or after stream sequence `seq`: (seq, data), or
        None if there is none (or the follower that answered has none yet)."""
        reply = await self._nc.request(
            f"$JS.API.DIRECT.GET.{self.stream}",
            orjson.dumps({"seq": seq, "next_by_subj": subject}), timeout=self.timeout)
        headers = reply.headers or {}
        if headers.get("Status"):
            return None
        return int(headers["Nats-Sequence"]), reply.data

    async def _page_start(self, group: str, after: int, last: int) -> int:
        """The stream sequence a page after `after` reads from: just past the record of the
        last message at or below `after`, so the views installed at `after` are read too.

        Remembered from the page that ended at `after` (sequential paging costs nothing);
        otherwise found by a binary search over stream sequences, one direct get per step
        (`log2(last)`: about 30 for a billion records), each asking for the first message
        record at or after the middle: offsets grow with stream sequence, so "that record's
        offset is above `after`" is false up to the start and true from it on. A follower
        that is behind can only answer "none" for a record it lacks, which moves the search
        lower: the scan then reads more records, and never skips one."""
        known = self._page_starts.get((group, after))
        if known is not None:
            self._page_starts.move_to_end((group, after))
            return known
        if after <= 0:
            return 1
        subject = self._subject(group, "m")
        lo, hi = 1, last + 1
        while lo < hi:
            mid = (lo + hi) // 2
            found = await self._next_record(subject, mid)
            if found is None or found[0] > last or \
                    _decode_message(group, found[1]).offset > after:
                hi = mid
            else:
                lo = found[0] + 1
        return lo

    def _remember_start(self, group: str, end: int, seq: int) -> None:
        """The next page after `end` reads from `seq`: kept for the `_PAGE_STARTS` pages read
        last (bounded, G14), across groups and readers."""
        self._page_starts[(group, end)] = seq
        self._page_starts.move_to_end((group, end))
        while len(self._page_starts) > _PAGE_STARTS:
            self._page_starts.popitem(last=False)

    # -- retention (module docstring, "Retention") ----------------------------------------------

    def prune(self, now: float) -> int:
        """Apply each group's rule below the stream's limits: how many message records were
        purged. Bounded (`prune_groups`, `prune_records`, a deadline); blocking: called off
        the event loop, and the work is on the log's own loop."""
        if self.retention is None:
            return 0  # the stream's limits (max_msgs_per_subject, max_age) only
        return self._call(self._prune(now), self.timeout * 20)

    async def _prune(self, now: float) -> int:
        assert self.retention is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout * 4  # no group is started after it
        async with asyncio.timeout(self.timeout):
            info = await self._nc.jsm().stream_info(self.stream,
                                                    subjects_filter=f"{self.prefix}.*.m")
        # groups with more than their head message, in token order from where the last pass
        # finished (round robin); in cluster mode, only those this node holds
        tokens = sorted(subject.split(".")[-2]
                        for subject, n in (info.state.subjects or {}).items() if n > 1)
        if self.owner is not None:
            held = {escape_group(g) for g in self._held}
            tokens = [t for t in tokens if t in held]
        start = bisect.bisect_right(tokens, self._prune_after)
        purged = read = 0
        order = itertools.chain(tokens[start:], tokens[:start])
        for token in itertools.islice(order, self.prune_groups):
            if read >= self.prune_records or loop.time() > deadline:
                break
            group = unescape_group(token)
            try:
                n, r, done = await self._prune_group(group, self.retention(group), now,
                                                     self.prune_records - read)
            except Exception as e:  # this group waits for the next pass; the others go on
                log.warning("prune_group_failed", group=group, error=described(e))
                n, r, done = 0, 1, True
            purged, read = purged + n, read + r
            if not done:  # the budget ran out inside it: the next pass starts with it
                break
            self._prune_after = token
        return purged

    async def _prune_group(self, group: str, rule: Retention, now: float,
                           budget: int) -> tuple[int, int, bool]:
        """Purge the group's oldest messages that `rule` does not keep (as SQLite's `prune`:
        beyond the newest `messages`, or past `bytes` of payload counted from the newest, or
        older than `age`; never the head). Those go as a prefix of the group's messages: the
        first one the rule keeps ends it. Returns (messages purged, records read, False if
        `budget` records were read before the end)."""
        if group in self._busy:  # (a write or a load: `_purge_group` would give up on it)
            return 0, 0, True
        subject = self._subject(group, "m")
        # the common case, nothing goes, is these two gets: the head, the oldest message
        newest, oldest = await asyncio.gather(self._last_of(group, "m"),
                                              self._next_record(subject, 1))
        if newest is None:
            return 0, 2, True
        last, (head, _size) = newest[0], _meta(newest[1])
        top = int(head.get("c", 0))
        cutoff = now - rule.age if rule.age is not None else float("-inf")

        def goes(meta: dict[str, Any], size: int) -> bool:
            c = meta.get("c")  # (none in a record from before `c`: the bytes rule keeps it)
            return (meta["o"] <= head["o"] - rule.messages or meta["t"] < cutoff
                    or (c is not None and top - (int(c) - size) > rule.bytes))

        if oldest is None or oldest[0] >= last or not goes(*_meta(oldest[1])):
            return 0, 2, True
        gone: list[dict[str, Any]] = []
        cut, read, done = 0, 2, True  # `cut`: the stream sequence the purge keeps from
        async with asyncio.TaskGroup() as tasks:
            # the last `.p` record meanwhile: one written after this read would be by another
            # writer, and its record moves the fence, so this one's is refused
            pruned = tasks.create_task(self._last_of(group, "p"))
            records = self._read(group, last - 1, start=oldest[0], kind="m",
                                 batch=min(budget, self.read_batch))
            async with contextlib.aclosing(records):
                async for _subject, seq, data in records:
                    meta, size = _meta(data)
                    read += 1
                    if not goes(meta, size):
                        break
                    gone.append(meta)
                    cut = seq + 1
                    if read >= budget:
                        done = False
                        break
        if not gone:
            return 0, read, done
        last_pruned = pruned.result()
        before = {"seqs": {}, "ids": {}} if last_pruned is None else orjson.loads(last_pruned[1])
        return await self._purge_group(group, head["o"], gone, cut, now, before), read, done

    async def _last_of(self, group: str, kind: str) -> tuple[int, bytes] | None:
        """The group's last record of `kind` (seq, data), from the stream leader; None: none."""
        try:
            async with asyncio.timeout(self.timeout):
                raw = await self._nc.jsm().get_msg(self.stream,
                                                   subject=self._subject(group, kind))
        except NotFoundError:
            return None
        return raw.seq or 0, raw.data or b""

    async def _purge_group(self, group: str, head: int, gone: list[dict[str, Any]], cut: int,
                           now: float, before: dict[str, Any]) -> int:
        """Purge `gone` (the group's message records below stream sequence `cut`), once a
        `.p` record holds what must outlive them: the streams' seqs and the publish ids, with
        those of the last one, `before`. Alone with the group meanwhile: no write nor load of
        it runs (a load that read the group's last record before the `.p` record would read on
        past the purged messages without it). A group busy for `timeout` waits for the next
        pass."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while group in self._busy or group in self._pruning:
            if loop.time() > deadline:
                return 0
            await asyncio.sleep(0.005)
        if group in self._unknown or (self.owner is not None and group not in self._held):
            return 0  # (it left this node, or a write's outcome is not known: a load first)
        known = group in self._last
        done = self._pruning[group] = asyncio.Event()
        try:
            return await self._purge_now(group, head, gone, cut, now, before)
        finally:
            del self._pruning[group]
            done.set()
            if group in self._forgotten:
                self._forgotten.discard(group)
                self._forget(group)
            elif not known and group not in self._held and group not in self._busy:
                self._last.pop(group, None)  # (G14: no table here for a group nobody loaded)

    async def _purge_now(self, group: str, head: int, gone: list[dict[str, Any]], cut: int,
                         now: float, before: dict[str, Any]) -> int:
        seqs: dict[str, int] = dict(before["seqs"])
        for meta in gone:
            seqs[meta["s"]] = max(seqs.get(meta["s"], 0), meta["q"])
        bare = len(orjson.dumps({"o": head, "seqs": seqs}))
        room = min(self.ids_bytes, self._nc.max_payload // 2,
                   self._nc.max_payload - bare - 1024)
        record = orjson.dumps({"o": head, "seqs": seqs, "ids": _kept_ids(
            before["ids"], gone, now - SENDER_IDS_AGE, room)})
        if len(record) > self._nc.max_payload:  # (its seqs alone: the group keeps its messages)
            log.warning("prune_record_too_large", group=group, bytes=len(record))
            return 0
        if group not in self._last:
            self._last[group] = await self._last_seq(group)
        msg_id = f"{self.writer}:{next(self._writes)}:0"
        try:
            await self._batch(group, [(self._subject(group, "p"), record)], [msg_id])
        except FenceError as e:  # nothing stored
            if e.code in WRONG_LAST_SEQUENCE:
                self._held.discard(group)  # another writer has it now: its own to prune
            log.info("prune_refused", group=group, error=str(e))
            return 0
        except (_Unresolved, asyncio.CancelledError) as e:
            # it may be stored, past the fence this writer knows: its next write of the group
            # would be refused (10071), and the core would retract it. As after a write: the
            # group is loaded again first (`Fenced`, UNRESOLVED), and nothing is purged
            self._unresolved(group, f"a pruned record: {described(e)}")
            if isinstance(e, asyncio.CancelledError):
                raise
            return 0
        stored = self._last[group]
        purged, _ = await asyncio.gather(  # (each `.p` record holds the ones before it)
            self._purge(self._subject(group, "m"), cut),
            self._purge(self._subject(group, "p"), stored))
        return purged

    async def _purge(self, subject: str, below: int) -> int:
        """Purge the records of `subject` below stream sequence `below`: how many went."""
        reply = await self._nc.request(
            f"$JS.API.STREAM.PURGE.{self.stream}",
            orjson.dumps({"filter": subject, "seq": below}), timeout=self.timeout)
        answer = orjson.loads(reply.data or b"{}")
        if "error" in answer:
            raise RuntimeError(f"purge refused: {answer['error']}")
        return int(answer.get("purged", 0))

    # -- checkpoints -------------------------------------------------------------------------------

    # Checkpoints (blocking; called off the event loop). A checkpoint's chunks are objects in
    # an Object Store (`<stream>_checkpoints`, chunked by nats-py, so a chunk of any size fits
    # the servers' max_payload), named `<group token>/<key>/<index>`; the group's committed
    # checkpoint is a KV entry (`<stream>_checkpoint`, key: the group token) pointing at them.
    # Neither is in the group's subjects: a record there would move the fence under the core's
    # own writes. An old owner could still commit a checkpoint after losing the group; any
    # committed checkpoint is a true snapshot at its position, so that costs nothing but the
    # newer one.

    def stage_checkpoint_chunk(self, group: str, key: str, index: int, data: str) -> None:
        self._call(self._stage(group, key, index, data), self.timeout * 2)

    def checkpoint_chunks(self, group: str, key: str) -> Iterator[str]:
        index = 0
        while True:  # one object per step: a checkpoint is never all in memory
            data = self._call(self._chunk(group, key, index), self.timeout * 5)
            if data is None:
                return
            yield data
            index += 1

    def commit_checkpoint(self, group: str, checkpoint: Checkpoint) -> None:
        self._call(self._commit(group, checkpoint), self.timeout * 4)

    def discard_checkpoint(self, group: str, key: str) -> None:
        self._call(self._discard(group, key), self.timeout * 4)

    async def _buckets(self) -> tuple[ObjectStore, KeyValue]:
        """The checkpoint buckets (found or made, asked again while the meta layer is busy)."""
        if self._cp is not None:
            return self._cp
        return await self._again(self._make_buckets, self.timeout * 2, (NotFoundError,))

    @staticmethod
    async def _again(op: Callable[[], Awaitable[T]], budget: float,
                     also: tuple[type[Exception], ...] = ()) -> T:
        """`op()`, asked again while it times out (or JetStream answers 503, "temporarily
        unavailable", as it does while it elects a leader), for up to `budget` seconds: only
        for what may be asked twice (a read, finding or making a bucket, a put of the same
        value).
        Object-store reads and bucket lookups are meta-layer requests (a consumer, a stream),
        which can stall for seconds on a busy or recovering cluster while the stream itself
        answers; a bucket just made may have no leader yet ("no response from stream"), or be
        unknown yet to the server that answers (`also=(NotFoundError,)`, for a bucket that
        nodes starting together make)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        retried: tuple[type[Exception], ...] = (
            TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError,
            nats.js.errors.NoStreamResponseError, nats.js.errors.ServiceUnavailableError, *also)
        while True:
            try:
                return await op()
            except retried:
                if loop.time() + 0.2 > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def _make_buckets(self) -> tuple[ObjectStore, KeyValue]:
        if self._cp is None:
            js = self._nc.jetstream()
            name = f"{self.stream}_checkpoints"
            obs = await found_or_made(name, lambda: js.object_store(name),
                                      lambda: js.create_object_store(name, ObjectStoreConfig(
                                          bucket=name, replicas=self.replicas)))
            kv = await key_value(js, KeyValueConfig(bucket=f"{self.stream}_checkpoint", history=1,
                                                    replicas=self.replicas))
            # A bucket just made may not have elected its stream's leader yet, and then every
            # request to it gets "no response from stream": not ready until both have one
            # (asked again by `_buckets`).
            for info in ((await obs.status()).stream_info, (await kv.status()).stream_info):
                if info.cluster is not None and not info.cluster.leader:
                    raise TimeoutError(f"checkpoint bucket {info.config.name} has no leader yet")
            self._cp = (obs, kv)
        return self._cp

    async def _stage(self, group: str, key: str, index: int, data: str) -> None:
        obs, _kv = await self._buckets()
        # the same chunk put again replaces it with itself: it may be asked twice
        await self._again(lambda: obs.put(f"{escape_group(group)}/{key}/{index}", data.encode()),
                          self.timeout * 2)

    async def _chunk(self, group: str, key: str, index: int) -> str | None:
        obs, _kv = await self._buckets()
        try:
            got = await self._again(lambda: obs.get(f"{escape_group(group)}/{key}/{index}"),
                                    self.timeout * 2)
        except ObjectNotFoundError:
            return None
        return bytes(got.data or b"").decode()

    async def _commit(self, group: str, cp: Checkpoint) -> None:
        """Point the group at `cp`, only forward and only over the pointer it read: two owners
        (a deposed one that has not noticed yet, and the new one) may commit at once, and a
        blind put let the one behind take the pointer back and delete the chunks of the one
        the other owner serves (cluster review S13). The one that loses gets
        `CheckpointSuperseded` and its chunks are deleted; the pointer's chunks never are."""
        _obs, kv = await self._buckets()
        old, revision = await self._pointer(group)
        rp = cp.position
        if old is not None and old.id != cp.id and old.position.offset > rp.offset:
            await self._delete_chunks(group, cp.id)
            raise CheckpointSuperseded(f"a checkpoint at offset {old.position.offset} is "
                                       f"committed already (this one is at {rp.offset})")
        pointer = orjson.dumps({
            "id": cp.id, "member": cp.member, "epoch": rp.epoch, "offset": rp.offset,
            "view": rp.view, "streams": rp.streams, "accept_any": cp.accept_any,
            "bytes": cp.bytes, "chunks": cp.chunks, "sha256": cp.sha256, "ts": cp.ts})
        key = escape_group(group)
        try:  # asked again while the bucket cannot answer; one that landed reads back as ours
            if revision is None:
                await self._again(lambda: kv.create(key, pointer), self.timeout * 2)
            else:
                await self._again(lambda: kv.update(key, pointer, last=revision),
                                  self.timeout * 2)
        except nats.js.errors.KeyWrongLastSequenceError:
            now, _rev = await self._pointer(group)
            if now is None or now.id != cp.id:  # another owner's commit came first
                await self._delete_chunks(group, cp.id)
                raise CheckpointSuperseded("another checkpoint was committed meanwhile") \
                    from None
            # ours, stored by an attempt whose answer was lost
        if old is not None and old.id != cp.id:
            await self._delete_chunks(group, old.id)

    async def _discard(self, group: str, key: str) -> None:
        current = await self._checkpoint(group)
        if current is None or current.id != key:
            await self._delete_chunks(group, key)

    async def _delete_chunks(self, group: str, key: str) -> None:
        obs, _kv = await self._buckets()
        for index in itertools.count():
            try:
                await obs.delete(f"{escape_group(group)}/{key}/{index}")
            except (ObjectNotFoundError, NotFoundError):
                return

    async def _checkpoint_or_none(self, group: str) -> Checkpoint | None:
        """The group's checkpoint for a load. Its bucket is a stream of its own, which may be
        electing a leader right when groups are loaded (a server died): asked again until
        twice `timeout`, then the group loads without it (a joiner with no donor then gets
        `state_unavailable`, never a wrong state) and says so."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout * 2
        while True:
            try:
                return await self._checkpoint(group)
            except (TimeoutError, nats.errors.Error) as e:
                if loop.time() + 0.25 > deadline:
                    log.warning("checkpoint_unreadable", group=group, error=described(e))
                    return None
                await asyncio.sleep(0.25)

    async def _checkpoint(self, group: str) -> Checkpoint | None:
        return (await self._pointer(group))[0]

    async def _pointer(self, group: str) -> tuple[Checkpoint | None, int | None]:
        """The group's committed checkpoint and the pointer's revision (None: no pointer)."""
        _obs, kv = await self._buckets()
        try:
            entry = await self._again(lambda: kv.get(escape_group(group)), self.timeout * 2)
        except KeyNotFoundError:
            return None, None
        if not entry.value:
            return None, entry.revision
        d = orjson.loads(entry.value)
        return Checkpoint(d["id"], d["member"],
                          ResumePoint(d["epoch"], d["offset"], d["streams"], d["view"]),
                          d["accept_any"], d["bytes"], d["chunks"], d["sha256"],
                          d["ts"]), entry.revision

    # -- closing ---------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        pending = [asyncio.wrap_future(f) for f in list(self._tasks)]
        if pending:  # every write in flight answers (each is bounded by the publish timeout)
            await asyncio.wait(pending, timeout=self.timeout * 3)
        with contextlib.suppress(Exception):
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(
                close_within(self._nc, 5), self._loop))
        await asyncio.to_thread(self._stop_loop)

    def _stop_loop(self) -> None:
        self._runner.stop()


def _encode_message(m: Message, total: int) -> tuple[bytes, int]:
    """The record of `m`, after messages of `total` payload bytes: its `c` is that total with
    its own payload (the bytes rule's measure, `_prune_group`); and that total."""
    body = orjson.dumps(m.payload)
    total += len(body)
    meta = orjson.dumps({"o": m.offset, "s": m.stream, "q": m.seq, "f": m.sender, "v": m.view,
                         "a": m.atomic, "t": m.ts, "i": m.id, "fm": m.from_member, "c": total})
    return meta + b"\n" + body, total


def _decode_message(group: str, data: bytes) -> Message:
    meta, _, body = data.partition(b"\n")
    d = orjson.loads(meta)
    return Message(group, d["o"], d["s"], d["q"], d["f"], d["v"], d["a"], orjson.Fragment(body),
                   d["t"], d["i"], d["fm"], len(body))


def _counted(record: bytes) -> int:
    """A message record's `c`: the group's payload bytes up to it (0: no record, or one from
    before `c` existed)."""
    return int(_meta(record)[0].get("c", 0)) if record else 0


def _meta(data: bytes) -> tuple[dict[str, Any], int]:
    """A message record's metadata, and its payload's size, without the payload."""
    meta, _, body = data.partition(b"\n")
    return orjson.loads(meta), len(body)


def _kept_ids(before: dict[str, list[list[Any]]], gone: list[dict[str, Any]], since: float,
              room: int) -> dict[str, list[list[Any]]]:
    """The publish ids a `.p` record carries: those of the one before it and of the messages
    purged now (their metadata), of messages newer than `since`, the last `RECENT_IDS` of each
    sender, the newest first while they fit in `room` bytes: {sender: [[id, offset, ts], ...]}
    oldest first."""
    entries = [(sender, i, o, ts) for sender, xs in before.items() for i, o, ts in xs]
    entries += [(m["f"], m["i"], m["o"], m["t"]) for m in gone]
    entries.sort(key=lambda x: x[2], reverse=True)
    kept: dict[str, list[list[Any]]] = {}
    seen: set[tuple[str, int]] = set()
    size = 2
    for sender, i, o, ts in entries:
        xs = kept.get(sender)
        if ts < since or (sender, o) in seen or (xs is not None and len(xs) >= RECENT_IDS):
            continue
        entry = [i, o, ts]
        n = len(orjson.dumps(entry)) + 1 + (len(orjson.dumps(sender)) + 3 if xs is None else 0)
        if size + n > room:
            break
        size += n
        seen.add((sender, o))
        kept.setdefault(sender, []).append(entry)
    return {sender: xs[::-1] for sender, xs in kept.items()}


def _decode_install(group: str, v: dict[str, Any]) -> ViewInstall:
    return ViewInstall(group, v["view"], tuple(v["members"]), tuple(v["joined"]),
                       tuple(v["left"]), v["epoch"], v["offset"])


def _encode_view(w: StoreView, aborted: list[int]) -> bytes:
    i = w.install
    return orjson.dumps({"epoch": i.epoch, "view": i.view, "members": list(i.members),
                         "joined": list(i.joined), "left": list(i.left), "offset": i.offset,
                         "aborted": aborted})

