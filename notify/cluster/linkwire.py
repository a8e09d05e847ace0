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
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

from notify.core.auth import Grants, Identity, Perm

OPEN, FRAME, CLOSED, REFRESH = 1, 2, 3, 4
DATA, CLOSE = 1, 2

_UP = struct.Struct("<qBI")  # conn, kind, length
_DOWN = struct.Struct("<BHI")  # kind, number of conns, length
_CONN = struct.Struct("<q")

UpEntry = tuple[int, int, bytes]
DownEntry = tuple[int, list[int], bytes]


class LinkError(ValueError):
    """A batch that does not decode (a bug, or a foreign publisher on our subjects)."""


def up_size(data: bytes) -> int:
    return _UP.size + len(data)


def down_size(conns: list[int], data: bytes) -> int:
    return _DOWN.size + _CONN.size * len(conns) + len(data)


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
