"""The per-member sender (`Outbox`) with runs: a `batch` push counts as the frames it holds."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from notify.runtime.frames import batch
from notify.server.outbox import Outbox


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
