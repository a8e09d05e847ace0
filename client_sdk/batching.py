"""Frames into WebSocket messages: several frames in one `batch` where the server takes them.

A server whose `welcome.limits` says `max_batch_frames` handles a `batch{frames}` exactly as the
frames sent one by one, in order (docs/protocol.md). Packing what the writer has at hand into
as few messages as the limits allow saves a WebSocket message per frame at both ends (issue 34:
about a seventh of the server's and the publisher's CPU under load). A message never exceeds
the server's `max_frame_bytes` (the server closes a connection on one that does), so a frame
too large to share a message goes alone. Pure: the TypeScript SDK's web/sdk/src/batching.ts is
the same rule.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

_HEAD = b'{"type":"batch","frames":['
_TAIL = b"]}"
#: a batch's bytes beyond its frames' and the commas between them
_ENVELOPE = len(_HEAD) + len(_TAIL)


def batch_limits(limits: Mapping[str, Any]) -> tuple[int, int]:
    """(most frames, most bytes) of one batch this server takes; (1, 0) when it takes none."""
    frames, size = limits.get("max_batch_frames"), limits.get("max_frame_bytes")
    if type(frames) is not int or frames < 2 or type(size) is not int or size <= _ENVELOPE:
        return 1, 0
    return frames, size


def pack(encoded: list[bytes], max_frames: int, max_bytes: int) -> Iterator[bytes]:
    """`encoded` frames, in order, as messages: runs of two or more in a `batch` of at most
    `max_frames` frames and `max_bytes` bytes; a frame that shares with no other, alone."""
    if max_frames < 2 or len(encoded) < 2:
        yield from encoded
        return
    run: list[bytes] = []
    size = _ENVELOPE - 1  # (n frames, n - 1 commas)
    for f in encoded:
        if run and (len(run) == max_frames or size + len(f) + 1 > max_bytes):
            yield run[0] if len(run) == 1 else _HEAD + b",".join(run) + _TAIL
            run, size = [], _ENVELOPE - 1
        run.append(f)
        size += len(f) + 1
    if run:
        yield run[0] if len(run) == 1 else _HEAD + b",".join(run) + _TAIL
