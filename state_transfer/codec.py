"""Snapshots on the wire (DESIGN §5, G9): compressed, cut into chunks of at most 256 KiB, each
carried base64 in a `state_chunk` frame; the last chunk carries the sha256 of the whole snapshot.

The assembler is what makes a bad transfer harmless: it refuses a chunk out of order, a chunk
that is not base64, a total over the size limit, and a snapshot whose sha256 or compression does
not check out, so a joiner either restores exactly the donor's bytes or restores nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

#: bytes of compressed snapshot per chunk (DESIGN §5: ≤ 256 KiB)
CHUNK_BYTES = 256 * 1024
#: a joiner refuses snapshots larger than this once decompressed, unless told otherwise
DEFAULT_MAX_SNAPSHOT = 256 * 1024 * 1024


class ChunkError(Exception):
    """The transfer is unusable (order, encoding, size or checksum); nothing was restored."""


@dataclass(frozen=True, slots=True)
class Chunk:
    index: int
    last: bool
    data: str  # base64 of compressed bytes
    sha256: str | None = None  # of the uncompressed snapshot, on the last chunk only


def encode(snapshot: bytes, *, chunk_bytes: int = CHUNK_BYTES, level: int = 1) -> list[Chunk]:
    """Compress and cut; CPU-bound for large snapshots, so call it off the event loop."""
    digest = hashlib.sha256(snapshot).hexdigest()
    packed = zlib.compress(snapshot, level)
    pieces = [packed[i:i + chunk_bytes] for i in range(0, len(packed), chunk_bytes)] or [b""]
    last = len(pieces) - 1
    return [Chunk(i, i == last, base64.b64encode(p).decode("ascii"), digest if i == last else None)
            for i, p in enumerate(pieces)]


class Assembler:
    """Receives one transfer's chunks in order; `feed` returns the snapshot after the last."""

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_SNAPSHOT) -> None:
        self._max = max_bytes
        self._next = 0
        self._parts: list[bytes] = []
        self._size = 0
        self.done = False

    def feed(self, index: int, last: bool, data: str, sha256: str | None) -> bytes | None:
        if self.done:
            raise ChunkError("transfer already complete")
        if index != self._next:
            raise ChunkError(f"chunk {index} where {self._next} was expected")
        try:
            part = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as e:
            raise ChunkError(f"chunk {index} is not base64: {e}") from None
        self._size += len(part)
        if self._size > self._max:
            raise ChunkError(f"snapshot over the {self._max}-byte limit")
        self._parts.append(part)
        self._next += 1
        if not last:
            return None
        self.done = True
        return self._finish(sha256)

    def _finish(self, sha256: str | None) -> bytes:
        if not sha256:
            raise ChunkError("last chunk without sha256")
        d = zlib.decompressobj()
        try:
            snapshot = d.decompress(b"".join(self._parts), self._max + 1)
        except zlib.error as e:
            raise ChunkError(f"corrupt snapshot: {e}") from None
        if len(snapshot) > self._max or d.unconsumed_tail:
            raise ChunkError(f"snapshot over the {self._max}-byte limit")
        if not d.eof:
            raise ChunkError("truncated snapshot")
        if hashlib.sha256(snapshot).hexdigest() != sha256:
            raise ChunkError("sha256 mismatch: the snapshot is not the donor's")
        return snapshot


def verify(chunks: Iterable[str], sha256: str, *, max_bytes: int = DEFAULT_MAX_SNAPSHOT) -> int:
    """Check a stored snapshot without holding it: base64, compression, size and sha256, one
    chunk at a time (the server checks a checkpoint before it serves anyone from it). Returns
    the snapshot's size; raises `ChunkError`."""
    d = zlib.decompressobj()
    digest = hashlib.sha256()
    size = 0
    for index, data in enumerate(chunks):
        try:
            part = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as e:
            raise ChunkError(f"chunk {index} is not base64: {e}") from None
        while part:
            try:
                out = d.decompress(part, 1 << 20)
            except zlib.error as e:
                raise ChunkError(f"corrupt snapshot: {e}") from None
            size += len(out)
            if size > max_bytes:
                raise ChunkError(f"snapshot over the {max_bytes}-byte limit")
            digest.update(out)
            part = d.unconsumed_tail
            if d.eof:
                break
    tail = d.flush()
    size += len(tail)
    if size > max_bytes:
        raise ChunkError(f"snapshot over the {max_bytes}-byte limit")
    digest.update(tail)
    if not d.eof or d.unused_data:
        raise ChunkError("truncated snapshot" if not d.eof else "bytes after the snapshot")
    if digest.hexdigest() != sha256:
        raise ChunkError("sha256 mismatch")
    return size
