"""The bytes between nodes: edge → owner batches (`notify.in.<owner>`) and owner → edge batches
(`notify.out.<edge>`), over core NATS (docs/cluster.md, "Routing").

A batch is one NATS message: a JSON header line (who sent it, its incarnation, the batch's
sequence on that link, `seq`), then entries, each a fixed binary prefix and its bytes. Client frames
and the frames for clients travel as the very bytes the WebSocket carried or will carry: the
owner parses a client frame with the same strict parser as the edge, and the edge forwards an
owner's frame without reading it.

Edge → owner entries are `(conn, kind, data)`:
- `OPEN`: the edge's session for the connection (member, token, the token the client presented
  to resume, the verified identity), sent before the first frame to that owner;
- `FRAME`: one client frame (join, publish, ack, ...), as received;
- `CLOSED`: the connection closed (code, reason);
- `REFRESH`: a new verified identity (a `refresh`).

Owner → edge entries are `(kind, conns, data)`: `DATA` is serialised frame(s) for each of
`conns` (a `deliver` to ten members on one edge crosses once); `CLOSE` closes them (code,
reason, drain). A *beat* (links.py, `DownlinkBeats`) is an owner → edge batch whose header
has `beat` (the last sequence sent on the link) instead of `seq`, and no entries.

An entry too large for one NATS message (a client frame near `max_frame_bytes`, a history page,
the view of a large group: the servers' `max_payload` is 1 MiB by default) crosses as `PIECE`
entries, in order, on its link: each holds its entry's own kind, its index and whether it is
the last, then a slice of the data (`in_pieces`); a down entry's conns ride on its last piece.
The receiving side joins them (`Pieces`). A link loses nothing silently (a lost owner batch is a
gap, a lost edge batch a give-up: both close the connections concerned), so a piece that is
missing only means that its entry is dropped with the rest of what was lost.
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

from notify.core.auth import Grants, Identity, Perm

OPEN, FRAME, CLOSED, REFRESH = 1, 2, 3, 4
DATA, CLOSE = 1, 2
#: a slice of an entry too large for one NATS message (either direction)
PIECE = 8

_UP = struct.Struct("<qBI")  # conn, kind, length
_DOWN = struct.Struct("<BHI")  # kind, number of conns, length
_CONN = struct.Struct("<q")
_PIECE = struct.Struct("<BBI")  # the entry's kind, 1 on its last piece, the piece's index
#: the most conns one down entry names (its count is 16 bits)
MAX_CONNS = 0xFFFF

UpEntry = tuple[int, int, bytes]
DownEntry = tuple[int, list[int], bytes]


class LinkError(ValueError):
    """A batch that does not decode (a bug, or a foreign publisher on our subjects)."""


def up_size(data: bytes) -> int:
    return _UP.size + len(data)


def down_size(conns: list[int], data: bytes) -> int:
    return _DOWN.size + _CONN.size * len(conns) + len(data)


def up_entries(conn: int, kind: int, data: bytes, room: int) -> list[UpEntry]:
    """The edge → owner entry `(conn, kind, data)` as entries that each fit in `room` bytes:
    itself, or its pieces."""
    if up_size(data) <= room:
        return [(conn, kind, data)]
    return [(conn, PIECE, piece) for piece in in_pieces(kind, data, room - _UP.size)]


def down_entries(entry: DownEntry, room: int) -> list[DownEntry]:
    """The owner → edge `entry` as entries that each fit in `room` bytes: its conns in chunks
    (a count is 16 bits), and a chunk's data in pieces when that is still too large, the
    chunk on the last piece."""
    kind, conns, data = entry
    per = max(1, min(MAX_CONNS, room // 2 // _CONN.size))
    out: list[DownEntry] = []
    for start in range(0, len(conns), per):
        chunk = conns[start:start + per]
        if down_size(chunk, data) <= room:
            out.append((kind, chunk, data))
            continue
        pieces = in_pieces(kind, data, room - _DOWN.size - _CONN.size * len(chunk))
        out.extend((PIECE, [], piece) for piece in pieces[:-1])
        out.append((PIECE, chunk, pieces[-1]))
    return out


def in_pieces(kind: int, data: bytes, room: int) -> list[bytes]:
    """`data` (an entry of kind `kind`) as the data of `PIECE` entries of at most `room` bytes
    each, in order."""
    step = room - _PIECE.size
    if step < 1:
        raise ValueError(f"no room for a piece in {room} bytes")
    count = max(1, -(-len(data) // step))
    view = memoryview(data)
    return [_PIECE.pack(kind, i == count - 1, i) + view[i * step:(i + 1) * step]
            for i in range(count)]


class Pieces:
    """The receiving side's pieces of entries not yet whole, at most one entry per sending
    node (a link carries one entry's pieces in a row, so a piece of another entry, or a whole
    entry, in between means the rest was lost). Emptied as entries complete, by `cut` when a
    whole entry arrives or the node goes, and by the next entry after a `lost`. `dropped`
    counts the entries lost in pieces (approximately: with no entry ids, one whose first and
    last pieces both went in the same loss as another's is not told apart)."""

    def __init__(self) -> None:
        #: node -> (its incarnation, the pieces so far, or None while the rest of an entry
        #: that lost a piece goes by)
        self._held: dict[str, tuple[str, list[bytes] | None]] = {}
        #: entries dropped because a piece of theirs was lost
        self.dropped = 0

    def join(self, node: str, inc: str, data: bytes) -> tuple[int, bytes] | None:
        """Take one `PIECE` entry's data from `node`: its entry's kind and whole data once
        this was the last piece, else None."""
        try:
            kind, last, index = _PIECE.unpack_from(data)
        except struct.error as e:
            raise LinkError(f"truncated piece: {e}") from e
        held = self._held.get(node)
        if index == 0:
            self.cut(node)
            held = self._held[node] = (inc, [])
        elif held is None or held[0] != inc or held[1] is None or len(held[1]) != index:
            # a piece before this one was lost: the entry is dropped, and counted once (its
            # later pieces find it dropping)
            dropping = held is not None and held[0] == inc and held[1] is None
            if not dropping:
                self.dropped += 1
            if last:
                self._held.pop(node, None)
            else:
                self._held[node] = (inc, None)
            return None
        parts = held[1]
        assert parts is not None
        parts.append(data[_PIECE.size:])
        if not last:
            return None
        del self._held[node]
        return kind, b"".join(parts)

    def cut(self, node: str) -> None:
        """A whole entry from `node`, or `node` went: an entry in pieces cannot complete."""
        held = self._held.pop(node, None)
        if held is not None and held[1] is not None:
            self.dropped += 1

    def lost(self, node: str) -> None:
        """`node`'s link lost a batch: an entry in pieces cannot complete, and the rest of its
        pieces may still come (they find it dropping, and are not counted again)."""
        held = self._held.get(node)
        if held is None:
            return
        if held[1] is None:  # (the pieces after the loss may be another entry's)
            del self._held[node]
        else:
            self.dropped += 1
            self._held[node] = (held[0], None)

    def __bool__(self) -> bool:
        return bool(self._held)


def encode_up(header: dict[str, Any], entries: list[UpEntry]) -> bytes:
    parts = [orjson.dumps(header), b"\n"]
    for conn, kind, data in entries:
        parts.append(_UP.pack(conn, kind, len(data)))
        parts.append(data)
    return b"".join(parts)


def decode_up(payload: bytes) -> tuple[dict[str, Any], list[UpEntry]]:
    header, body = _header(payload)
    out: list[UpEntry] = []
    view, i = memoryview(body), 0
    try:
        while i < len(body):
            conn, kind, n = _UP.unpack_from(view, i)
            i += _UP.size
            out.append((conn, kind, bytes(view[i:i + n])))
            i += n
    except struct.error as e:
        raise LinkError(f"truncated edge batch: {e}") from e
    return header, out


def encode_down(header: dict[str, Any], entries: list[DownEntry]) -> bytes:
    parts = [orjson.dumps(header), b"\n"]
    for kind, conns, data in entries:
        parts.append(_DOWN.pack(kind, len(conns), len(data)))
        parts.extend(_CONN.pack(c) for c in conns)
        parts.append(data)
    return b"".join(parts)


def decode_down(payload: bytes) -> tuple[dict[str, Any], list[DownEntry]]:
    header, body = _header(payload)
    out: list[DownEntry] = []
    view, i = memoryview(body), 0
    try:
        while i < len(body):
            kind, count, n = _DOWN.unpack_from(view, i)
            i += _DOWN.size
            conns = [_CONN.unpack_from(view, i + k * _CONN.size)[0] for k in range(count)]
            i += count * _CONN.size
            out.append((kind, conns, bytes(view[i:i + n])))
            i += n
    except struct.error as e:
        raise LinkError(f"truncated owner batch: {e}") from e
    return header, out


def _header(payload: bytes) -> tuple[dict[str, Any], bytes]:
    line, sep, body = payload.partition(b"\n")
    if not sep:
        raise LinkError("a batch without a header line")
    try:
        header = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise LinkError(f"a batch header that is not JSON: {e}") from e
    if not isinstance(header, dict):
        raise LinkError("a batch header that is not an object")
    return header, body


def identity_json(identity: Identity | None) -> Any:
    if identity is None:
        return None
    return {"member": identity.member, "expires": identity.expires,
            "grants": [[pattern, sorted(p.value for p in perms)]
                       for pattern, perms in identity.grants.rules]}


def identity_of(data: Any) -> Identity | None:
    if data is None:
        return None
    rules = tuple((str(pattern), frozenset(Perm(p) for p in perms))
                  for pattern, perms in data["grants"])
    return Identity(data["member"], Grants(rules), data["expires"])
