"""Checkpoint I/O: the adapter side of `notify.core.checkpoint` (DESIGN §5, G9).

Why a room of its own: checkpoints are tens of megabytes, and none of it may touch the event loop.
Storage calls run in a worker thread, one at a time and in the order the core asked for them (a
chunk is staged before the commit that checks it); the commit decompresses and hashes the staged
snapshot chunk by chunk (`state_transfer.verify`) so a corrupt upload never becomes the group's
checkpoint. Serving reads one chunk at a time and pushes it to the joiner's outbox.

Storage keys carry a random per-process prefix: the core numbers uploads from 1 after every
restart, and a new upload must never land on a stored checkpoint's chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import structlog

from notify.core.actions import (
    CommitCheckpoint,
    DiscardCheckpoint,
    Error,
    StateChunkOut,
    StoreCheckpointChunk,
)
from notify.core.actions import ServeCheckpoint as Serve
from notify.core.checkpoint import Checkpoint
from notify.core.errors import ErrorCode
from notify.core.events import Req
from notify.runtime.frames import dumps
from notify.storage.base import CheckpointSuperseded, MessageLog
from state_transfer import ChunkError, verify

log = structlog.get_logger("notify.server")


class Push(Protocol):
    """The server's `Transport.push` (notify/runtime/ports.py)."""

    def __call__(self, conn: int, data: bytes, *, bounded: bool = True,
                 frames: int = 1) -> None: ...

#: (group, stored checkpoint, conn, req) once a checkpoint is durable and checked
Committed = Callable[[str, Checkpoint, int, Req], None]
#: (group, transfer, joiner, bytes, seconds) once a joiner got a checkpoint
Served = Callable[[str, str, int, int, float], None]


class CheckpointIO:
    def __init__(self, store: MessageLog, push: Push, committed: Committed, served: Served, *,
                 max_snapshot: int) -> None:
        self._store = store
        self._push = push
        self._committed = committed
        self._served = served
        self._max_snapshot = max_snapshot
        self._prefix = secrets.token_hex(4)
        self._jobs: asyncio.Queue[Callable[[], None] | None] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._serving: set[asyncio.Task[None]] = set()

    def key(self, upload: str) -> str:
        return f"{self._prefix}:{upload}"

    # -- uploads (in order, in the worker thread) ----------------------------------------------

    def stage(self, a: StoreCheckpointChunk) -> None:
        key = self.key(a.upload)
        self._run(lambda: self._store.stage_checkpoint_chunk(a.group, key, a.index, a.data))

    def discard(self, a: DiscardCheckpoint) -> None:
        key = self.key(a.upload)
        self._run(lambda: self._store.discard_checkpoint(a.group, key))

    def commit(self, a: CommitCheckpoint) -> None:
        loop = asyncio.get_running_loop()
        stored = replace(a.checkpoint, id=self.key(a.checkpoint.id))

        def job() -> None:
            try:
                verify(self._store.checkpoint_chunks(a.group, stored.id), stored.sha256,
                       max_bytes=self._max_snapshot)
            except ChunkError as e:
                self._store.discard_checkpoint(a.group, stored.id)
                frame = Error(ErrorCode.BAD_CHECKPOINT, f"checkpoint refused: {e}", a.req)
                loop.call_soon_threadsafe(self._push, a.conn, dumps(frame))
                log.info("checkpoint_refused", group=a.group, member=stored.member, reason=str(e))
                return
            try:
                self._store.commit_checkpoint(a.group, stored)
            except CheckpointSuperseded as e:  # another owner's, further on (a cluster)
                frame = Error(ErrorCode.BAD_CHECKPOINT, f"checkpoint superseded: {e}", a.req)
                loop.call_soon_threadsafe(self._push, a.conn, dumps(frame))
                log.info("checkpoint_superseded", group=a.group, member=stored.member,
                         reason=str(e))
                return
            loop.call_soon_threadsafe(self._committed, a.group, stored, a.conn, a.req)

        self._run(job)

    def _run(self, job: Callable[[], None]) -> None:
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._work())
        self._jobs.put_nowait(job)

    async def _work(self) -> None:
        while (job := await self._jobs.get()) is not None:
            try:
                await asyncio.to_thread(job)
            except Exception:  # storage failure: the upload is lost, the server is not
                log.exception("checkpoint_storage_failed")

    # -- serving ---------------------------------------------------------------------------------

    def serve(self, a: Serve) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(a))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def _serve(self, a: Serve) -> None:
        cp = a.checkpoint
        started = asyncio.get_running_loop().time()
        chunks = self._store.checkpoint_chunks(a.group, cp.id)
        for index in range(cp.chunks):
            data = await asyncio.to_thread(next, chunks, None)
            if data is None:  # replaced (and deleted) since the core chose it
                frame = Error(ErrorCode.STATE_UNAVAILABLE,
                              "the checkpoint was replaced during the transfer; join again",
                              a.req)
                self._push(a.conn, dumps(frame))
                return
            last = index == cp.chunks - 1
            self._push(a.conn, dumps(StateChunkOut(
                a.group, a.transfer, index, last, data, cp.sha256 if last else None,
                cp.position.streams if last else None, a.offset)), bounded=False)
        self._served(a.group, a.transfer, a.conn, cp.bytes,
                     asyncio.get_running_loop().time() - started)

    async def stop(self) -> None:
        for t in list(self._serving):
            t.cancel()
        await asyncio.gather(*self._serving, return_exceptions=True)
        if self._worker is not None:
            self._jobs.put_nowait(None)
            with contextlib.suppress(Exception):
                await self._worker
