"""The snapshot codec: exactly the donor's bytes, or a ChunkError and nothing (G9)."""

from __future__ import annotations

import base64
import os

import pytest

from state_transfer import CHUNK_BYTES, Assembler, ChunkError, encode


def feed_all(chunks: list, assembler: Assembler | None = None) -> bytes | None:
    a = assembler or Assembler()
    out = None
    for c in chunks:
        out = a.feed(c.index, c.last, c.data, c.sha256)
    return out


def test_round_trip_in_chunks_of_at_most_256_kib() -> None:
    snapshot = os.urandom(3 * CHUNK_BYTES + 123)  # incompressible: 4 chunks
    chunks = encode(snapshot)
    assert len(chunks) == 4 and all(len(base64.b64decode(c.data)) <= CHUNK_BYTES for c in chunks)
    assert [c.sha256 is not None for c in chunks] == [False, False, False, True]
    assert feed_all(chunks) == snapshot
    assert feed_all(encode(b"")) == b""


def test_out_of_order_truncated_corrupt_and_forged_are_refused() -> None:
    snapshot = os.urandom(2 * CHUNK_BYTES)
    chunks = encode(snapshot)
    with pytest.raises(ChunkError, match="expected"):
        feed_all([chunks[1]])
    with pytest.raises(ChunkError, match="base64"):
        Assembler().feed(0, True, "***", "0" * 64)
    truncated = [chunks[0], type(chunks[0])(1, True, "", chunks[-1].sha256)]
    with pytest.raises(ChunkError, match="truncated"):
        feed_all(truncated)
    flipped = bytearray(base64.b64decode(chunks[1].data))
    flipped[100] ^= 0xFF
    middle = type(chunks[1])(1, chunks[1].last, base64.b64encode(flipped).decode(),
                             chunks[1].sha256)
    bad = [chunks[0], middle, *chunks[2:]]
    with pytest.raises(ChunkError):
        feed_all(bad)
    forged = [type(c)(c.index, c.last, c.data, "0" * 64 if c.last else None) for c in chunks]
    with pytest.raises(ChunkError, match="sha256"):
        feed_all(forged)


def test_size_limit_counts_the_decompressed_snapshot() -> None:
    bomb = encode(b"\0" * (10 << 20))  # compresses to a few KiB
    assert len(bomb) == 1
    with pytest.raises(ChunkError, match="limit"):
        feed_all(bomb, Assembler(max_bytes=1 << 20))
