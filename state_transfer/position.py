"""Positions: what a member's knowledge of a group log, or a snapshot, includes (G7, G8, G9).

A position is a log offset and, per stream, the last seq delivered. A message is included when
its offset is at or below the position's offset (everything up to there reached the member: an
install or a catch-up said so), or when its seq is at or below its stream's (it was delivered
though later messages of other streams were not: streams reach a member out of offset order).

This is the one rule both sides use: the server to replay exactly what a resuming member lacks
and to complete a checkpoint from the log, the SDK to drop from a joiner's buffer what the
donor's snapshot already holds.
"""

from __future__ import annotations

from collections.abc import Mapping


def includes(offset: int, streams: Mapping[str, int], m_offset: int, m_stream: str,
             m_seq: int) -> bool:
    """Whether the position (`offset`, `streams`) includes the message at `m_offset`, seq
    `m_seq` of `m_stream`."""
    return m_offset <= offset or m_seq <= streams.get(m_stream, 0)


__all__ = ["includes"]
