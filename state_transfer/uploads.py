"""Checkpoint uploads on the server (G9 with no donor): a member's snapshot comes in chunk by
chunk and is staged in storage until its last chunk; only then may it replace the group's
checkpoint. Pure bookkeeping of the uploads under way, one per member; the group in
notify/core/transfers.py checks the position against its log and emits the storage actions.
"""

from __future__ import annotations

from dataclasses import dataclass

MemberId = str


@dataclass(slots=True)
class Upload:
    """A checkpoint on its way in from one member."""

    id: str
    req: str | int
    next_index: int = 0
    bytes: int = 0


@dataclass(frozen=True, slots=True)
class BadChunk:
    """The chunk is refused and the upload dropped (`dropped`, if there was one): the member
    must start again at 0."""

    why: str
    code: str
    dropped: Upload | None


class Uploads:
    __slots__ = ("_count", "_max_bytes", "_uploads")

    def __init__(self, *, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._uploads: dict[MemberId, Upload] = {}
        self._count = 0

    def __len__(self) -> int:
        return len(self._uploads)

    def chunk(self, member: MemberId, req: str | int, index: int,
              size: int) -> tuple[Upload | None, Upload | BadChunk]:
        """Take chunk `index` of `member`'s upload. Returns the upload it replaced (a new one
        starts at index 0), and the upload to stage the chunk in, or why it is refused."""
        replaced = self._uploads.pop(member, None) if index == 0 else None
        if index == 0:
            self._count += 1
            self._uploads[member] = Upload(f"{member}.{self._count}", req)
        up = self._uploads.get(member)
        if up is None or index != up.next_index:
            dropped = self._uploads.pop(member, None)
            expected = 0 if up is None else up.next_index
            return replaced, BadChunk(f"checkpoint chunk {index} where {expected} was expected; "
                                      "start again at 0", "bad_chunk", dropped)
        up.next_index += 1
        up.bytes += size
        if up.bytes > self._max_bytes:
            del self._uploads[member]
            return replaced, BadChunk(f"checkpoint over {self._max_bytes} bytes",
                                      "state_too_large", up)
        return replaced, up

    def finish(self, member: MemberId) -> Upload:
        return self._uploads.pop(member)

    def drop(self, member: MemberId) -> Upload | None:
        return self._uploads.pop(member, None)


__all__ = ["BadChunk", "Upload", "Uploads"]
