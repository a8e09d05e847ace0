"""State transfer for joiners (G9), shared by the server and the SDK.

- `codec`: snapshots as chunks (zlib, base64, <= 256 KiB, sha256), encoded and checked;
- `position`: the one rule of what a position (a resume point, a snapshot) includes;
- `relay`: the server's choice of donor, its replacement, the relay of chunks;
- `uploads`: checkpoint uploads coming in chunk by chunk.
"""

from state_transfer.codec import (
    CHUNK_BYTES,
    DEFAULT_MAX_SNAPSHOT,
    Assembler,
    Chunk,
    ChunkError,
    encode,
    verify,
)
from state_transfer.position import includes
from state_transfer.relay import Relay, Transfer
from state_transfer.uploads import Upload, Uploads

__all__ = ["CHUNK_BYTES", "DEFAULT_MAX_SNAPSHOT", "Assembler", "Chunk", "ChunkError", "Relay",
           "Transfer", "Upload", "Uploads", "encode", "includes", "verify"]
