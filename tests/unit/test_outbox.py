"""The per-member sender (`Outbox`) with runs: a `batch` push counts as the frames it holds."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from websockets.protocol import OPEN

from notify.runtime.frames import batch
from notify.server.outbox import Flusher, Outbox, text_frame


class _Socket:
    """Enough of a `ServerConnection`: records what is sent; `stuck` makes send() never end
    (a member that does not read)."""

    def __init__(self, *, stuck: bool = False) -> None:
        self.sent: list[bytes] = []
        self.closed: tuple[int, str] | None = None
        self.stuck = stuck

    async def send(self, data: bytes, text: bool = False) -> None:
        if self.stuck:
            await asyncio.Event().wait()
        self.sent.append(data)

    async def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


def _frame(n: int) -> bytes:
    return orjson.dumps({"type": "deliver", "offset": n})


def _offsets(sent: list[bytes]) -> list[int]:
    out: list[int] = []
    for data in sent:
        f: dict[str, Any] = orjson.loads(data)
        out.extend(x["offset"] for x in (f["frames"] if f["type"] == "batch" else [f]))
    return out


async def test_items_queued_together_leave_as_one_flat_batch_in_order() -> None:
    ws = _Socket()
    box = Outbox(ws, 100)  # type: ignore[arg-type]
    box.push(_frame(1))
    box.push(batch([_frame(2), _frame(3), _frame(4)]), frames=3)
    box.push(_frame(5))
    assert len(box) == 5
    await asyncio.sleep(0.01)
    await box.stop()
    assert len(ws.sent) == 1 and _offsets(ws.sent) == [1, 2, 3, 4, 5]
    assert ws.sent[0].count(b'"type":"batch"') == 1  # flat: no batch inside the batch
    assert len(box) == 0


async def test_a_lone_run_goes_as_it_is() -> None:
    ws = _Socket()
    box = Outbox(ws, 100)  # type: ignore[arg-type]
    run = batch([_frame(1), _frame(2)])
    box.push(run, frames=2)
    await asyncio.sleep(0.01)
    await box.stop()
    assert ws.sent == [run]


async def test_a_run_counts_its_frames_against_the_bound() -> None:
    ws = _Socket(stuck=True)
    slow: list[bool] = []
    box = Outbox(ws, 5, on_slow=lambda: slow.append(True))  # type: ignore[arg-type]
    await asyncio.sleep(0)  # the sender takes the first item and is stuck sending it
    box.push(_frame(0))
    await asyncio.sleep(0.01)
    box.push(batch([_frame(i) for i in range(1, 4)]), frames=3)
    assert not slow and len(box) == 3
    box.push(batch([_frame(i) for i in range(4, 7)]), frames=3)  # 6 queued > 5
    assert slow == [True]
    await box.stop()


async def test_a_batch_counted_as_one_frame_is_still_spliced_flat() -> None:
    # what another node's edge pushes: a run relayed as it is, counted as one frame
    ws = _Socket()
    box = Outbox(ws, 100)  # type: ignore[arg-type]
    box.push(batch([_frame(1), _frame(2)]))
    box.push(_frame(3))
    await asyncio.sleep(0.01)
    await box.stop()
    assert len(ws.sent) == 1 and ws.sent[0].count(b'"type":"batch"') == 1
    assert _offsets(ws.sent) == [1, 2, 3]


def _pong(n: int) -> bytes:  # (what the flusher writes is checked against the schema)
    return orjson.dumps({"type": "pong", "req": n})


def _reqs(sent: list[bytes]) -> list[int]:
    out: list[int] = []
    for data in sent:
        f: dict[str, Any] = orjson.loads(data)
        out.extend(x["req"] for x in (f["frames"] if f["type"] == "batch" else [f]))
    return out


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        #: bytes waiting in the transport (a socket that backed up)
        self.backlog = 0
        self.aborted = False

    def get_write_buffer_size(self) -> int:
        return self.backlog

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def abort(self) -> None:
        self.aborted = True


class _Protocol:
    state = OPEN
    extensions: list[object] = []
    expect_continuation_frame = False
    debug = False


class _Connection(_Socket):
    """A `ServerConnection` for an outbox with a flusher: a transport and a protocol too."""

    def __init__(self) -> None:
        super().__init__()
        self.transport = _Transport()
        self.protocol = _Protocol()


async def test_an_idle_outbox_with_a_flusher_holds_no_task_and_no_queue() -> None:
    # issue 34: the flusher writes while the socket keeps up; an idle connection costs no task
    ws = _Connection()
    box = Outbox(ws, 100, flusher=Flusher())  # type: ignore[arg-type]
    assert box._task is None and box._queue is None
    box.push(_pong(1))
    box.push(_pong(2))
    await asyncio.sleep(0.01)
    # one `batch` frame, written straight to the transport as the flusher serialises it
    assert len(ws.transport.written) == 1
    data = ws.transport.written[0][2:]  # (a text frame under 126 bytes: a 2-byte header)
    assert ws.transport.written[0] == text_frame(data) and _reqs([data]) == [1, 2]
    assert ws.sent == [] and box._task is None and box._queue is None and len(box) == 0


async def test_a_socket_that_backs_up_starts_the_task_which_ends_once_it_wrote_all() -> None:
    ws = _Connection()
    box = Outbox(ws, 100, flusher=Flusher())  # type: ignore[arg-type]
    ws.transport.backlog = 1 << 20
    box.push(_pong(1))
    await asyncio.sleep(0)  # the flusher's turn: it leaves the writing to a task
    assert box._task is not None
    box.push(_pong(2))  # queued behind: the task writes it too, in order
    await asyncio.sleep(0.01)
    assert ws.transport.written == [] and _reqs(ws.sent) == [1, 2]
    assert box._task is None and box._queue is None and len(box) == 0
    ws.transport.backlog = 0  # drained: the flusher writes again
    box.push(_pong(3))
    await asyncio.sleep(0.01)
    assert len(ws.transport.written) == 1 and box._task is None


async def test_a_draining_close_writes_what_is_queued_then_closes() -> None:
    ws = _Connection()
    box = Outbox(ws, 100, flusher=Flusher())  # type: ignore[arg-type]
    box.push(_pong(7))  # e.g. the `error` that says why
    box.close(4000, "bye", drain=True)
    await asyncio.sleep(0.01)
    assert _reqs(ws.sent) == [7] and ws.closed == (4000, "bye")
    await box.stop()


async def test_a_draining_close_with_nothing_queued_closes_at_once() -> None:
    ws = _Connection()
    box = Outbox(ws, 100, flusher=Flusher())  # type: ignore[arg-type]
    box.close(4000, "bye", drain=True)
    await asyncio.sleep(0.01)
    assert ws.sent == [] and ws.closed == (4000, "bye") and box._task is None


async def test_G13_a_sender_task_that_fails_drops_its_own_connection() -> None:
    # the task exists only while the socket is backed up, and nobody awaits it: its failure
    # must still reach the server, as a dropped connection (the hub hears a lost member,
    # which resumes; `_handle` forgets the outbox), and nothing more is queued for it
    ws = _Connection()
    box = Outbox(ws, 100, flusher=Flusher())  # type: ignore[arg-type]

    async def raises(data: bytes, text: bool = False) -> None:
        raise RuntimeError("injected")

    ws.send = raises  # type: ignore[method-assign]
    ws.transport.backlog = 1 << 20
    box.push(_pong(1))
    await asyncio.sleep(0)  # the flusher's turn: it leaves the writing to a task
    task = box._task
    assert task is not None
    await asyncio.sleep(0.01)
    assert task.done() and not task.cancelled() and task.exception() is None  # it reported
    assert ws.transport.aborted and box.closing
    box.push(_pong(2))
    assert box._queue is None and len(box) == 0
    await box.stop()


async def test_members_that_queued_the_same_frames_get_the_same_bytes_packed_once() -> None:
    # the flush is the hot path: a run queued alike by many members (two fan-outs in one turn
    # of the loop) is packed into a `batch` and serialised once, not once per member
    flusher = Flusher()
    first, second = _Connection(), _Connection()
    boxes = [Outbox(ws, 100, flusher=flusher) for ws in (first, second)]  # type: ignore[arg-type]
    one, two = _pong(1), _pong(2)
    for box in boxes:
        box.push(one)
        box.push(two)
    await asyncio.sleep(0.01)
    assert len(first.transport.written) == len(second.transport.written) == 1
    assert first.transport.written[0] is second.transport.written[0]
    assert _reqs([first.transport.written[0][2:]]) == [1, 2]
