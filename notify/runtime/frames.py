"""The outbound frame encoding: the core's frame dataclasses to bytes, and `batch` frames.

Every host sends what the driver encodes here (the asyncio server to sockets, the cluster over
its links, the simulator and the replay to their simulated members), so a frame has one byte
form wherever it goes. A frame object that goes to many members is encoded once; a run of
frames to one member is packed into one `batch` frame without re-encoding (DESIGN §3).
"""

from __future__ import annotations

import importlib.machinery
from collections.abc import Sequence
from typing import Any, Final

import orjson

from notify.core import actions

#: Are the core's frame classes compiled by mypyc (spark_analysis/compiled_replay.py loads them
#: for the replay)? orjson serialises a CPython dataclass through its internals, which a
#: compiled class does not have (the process crashes), so those get their fields copied out.
COMPILED_FRAMES: Final = (getattr(actions, "__file__", None) or "").endswith(
    tuple(importlib.machinery.EXTENSION_SUFFIXES))

#: a compiled frame class's field names (the wire fields), by class
_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(frame: Any) -> dict[str, Any]:
    names = _FIELDS.get(type(frame))
    if names is None:
        names = _FIELDS[type(frame)] = tuple(frame.__dataclass_fields__)
    return {k: getattr(frame, k) for k in names}


def exact(data: bytes) -> bytes:
    """`data` in a bytes object of its own size. What `orjson.dumps` returns keeps its whole
    write buffer, about eight times its length (8 KiB for 1 KiB, 1 MiB for 100 KiB; measured
    with orjson 3.13), so bytes that are kept (a frame waiting in an outbox, whose bound counts
    its length, G11, G14; a payload in a group's window) are copied once."""
    return memoryview(data).tobytes()


def dumps(frame: object) -> bytes:
    """Serialise an out-frame dataclass (its fields are the wire fields).

    One definition with the test inside, not one definition per case: mypyc compiles this
    module for the replay and takes no conditional function definitions. A frame may wait in
    an outbox: `exact`."""
    if COMPILED_FRAMES:
        data = orjson.dumps(frame, default=_fields, option=orjson.OPT_PASSTHROUGH_DATACLASS)
    else:
        data = orjson.dumps(frame)
    return exact(data)


#: a `batch` frame holds at most this many frames, and about this many bytes: well under any
#: client's maximum message size
BATCH_FRAMES = 512
BATCH_BYTES = 256 * 1024
BATCH_HEAD = b'{"type":"batch","frames":['
BATCH_TAIL = b"]}"


def batch(frames: Sequence[bytes | memoryview]) -> bytes:
    """Pack already-serialised frames into one `batch` frame without re-encoding them."""
    return BATCH_HEAD + b",".join(frames) + BATCH_TAIL


def unbatch(frame: dict[str, Any]) -> list[dict[str, Any]]:
    """The frames a decoded server frame stands for: a `batch`'s, in order, or itself."""
    if frame.get("type") == "batch":
        frames: list[dict[str, Any]] = frame["frames"]
        return frames
    return [frame]


def runs(items: Sequence[tuple[bytes, int]]) -> list[tuple[list[bytes], int]]:
    """`items` (each a frame, or a `batch` of several, and how many frames it holds), in order,
    cut into runs that each fit one `batch` frame: at most `BATCH_FRAMES` frames and, unless one
    item alone is larger, `BATCH_BYTES` bytes. Each run with its frame count."""
    out: list[tuple[list[bytes], int]] = []
    run: list[bytes] = []
    count = size = 0
    for data, n in items:
        if run and (size + len(data) > BATCH_BYTES or count + n > BATCH_FRAMES):
            out.append((run, count))
            run, count, size = [], 0, 0
        run.append(data)
        count += n
        size += len(data)
    if run:
        out.append((run, count))
    return out


def packed(run: list[bytes]) -> bytes:
    """One message for a run (see `runs`): a lone item as it is, several as one flat `batch`
    (an item that is itself a `batch` has its frames spliced in: no batch ever holds a batch)."""
    if len(run) == 1:
        return run[0]
    return batch([batch_body(d) for d in run])


def batch_body(frame: bytes) -> bytes | memoryview:
    """The frames of a `batch` frame made by `batch` (comma-separated, not copied), or `frame`
    itself: what `batch` joins to put several of them in one."""
    if frame.startswith(BATCH_HEAD):
        return memoryview(frame)[len(BATCH_HEAD):-len(BATCH_TAIL)]
    return frame
