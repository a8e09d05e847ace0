"""State transfer for joiners (G9): the snapshot codec shared by the server and the SDK."""

from state_transfer.codec import (
    CHUNK_BYTES,
    DEFAULT_MAX_SNAPSHOT,
    Assembler,
    Chunk,
    ChunkError,
    encode,
    verify,
)

__all__ = ["CHUNK_BYTES", "DEFAULT_MAX_SNAPSHOT", "Assembler", "Chunk", "ChunkError", "encode",
           "verify"]
