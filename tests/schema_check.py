"""Every frame a `NotifyServer` sends, checked against docs/schema/protocol.schema.json.

`FrameCheck.install()` wraps two things for the whole test session: `NotifyServer._handle`, to
know which WebSocket connections are the server's (other servers in the tests, like the bench's
bare relay, are not checked), and the two places a text frame of the server is made into bytes:
websockets' `ServerProtocol.send_text` (an outbox's task sends through `ServerConnection.send`)
and `notify.server.outbox.text_frame` (the flusher serialises a frame once for the members it
goes to, and writes it straight to their transports). So what is checked is exactly what goes on
the wire, from every real-socket test (integration, security, ops), whichever client read it.

A frame the schema refuses is recorded, never raised inside the server (that would kill the
sender task under test); the autouse fixture in tests/conftest.py fails the test that caused it.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from websockets.asyncio.server import ServerConnection
from websockets.server import ServerProtocol

from notify.server import outbox
from notify.server.app import NotifyServer

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "docs" / "schema" / "protocol.schema.json"
SCHEMA: dict[str, Any] = orjson.loads(SCHEMA_PATH.read_bytes())


def validator(definition: str) -> Draft202012Validator:
    """A validator for one definition of the schema (`ServerFrame`, `ClientFrame`, `Deliver`)."""
    return Draft202012Validator({"$ref": f"#/$defs/{definition}", "$defs": SCHEMA["$defs"]})


def _single_server_types() -> dict[str, list[Draft202012Validator]]:
    """The definitions of each server frame type (`view_install` has two: the one every member
    gets, and the one a member removed without its asking gets, with its `reason`)."""
    out: dict[str, list[Draft202012Validator]] = {}
    for alt in SCHEMA["$defs"]["SingleServerFrame"]["oneOf"]:
        name = alt["$ref"].rsplit("/", 1)[1]
        out.setdefault(SCHEMA["$defs"][name]["properties"]["type"]["const"], []).append(
            validator(name))
    return out


SERVER_FRAME = validator("ServerFrame")
CLIENT_FRAME = validator("ClientFrame")
_BY_TYPE = _single_server_types()
_BATCH = validator("Batch")


def problems(message: str | bytes) -> list[str]:
    """Why one server → client WebSocket message does not match the schema ([] if it does)."""
    try:
        return problems_of(orjson.loads(message))
    except orjson.JSONDecodeError as e:
        return [f"not JSON: {e}"]


def frames_of(f: Any) -> list[Any]:
    """The frames one message holds (a batch unpacked)."""
    if isinstance(f, dict) and f.get("type") == "batch" and isinstance(f.get("frames"), list):
        return list(f["frames"])
    return [f]


def problems_of(f: Any) -> list[str]:
    """Each frame is checked against the definition its `type` names (the same answer as the
    schema's `oneOf`, in a fraction of the time); a batch's envelope against `Batch`."""
    if not isinstance(f, dict):
        return ["not an object"]
    out: list[str] = []
    if f.get("type") == "batch":
        out += [e.message for e in _BATCH.iter_errors({**f, "frames": []})]
    for inner in frames_of(f):
        vs = _BY_TYPE.get(inner.get("type")) if isinstance(inner, dict) else None
        if vs is None:
            out.append(f"no server frame has type {inner!r:.80}")
            continue
        found = [[f"{inner.get('type')}: {'.'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in v.iter_errors(inner)] for v in vs]
        if all(found):  # none of its definitions takes it: say why the closest does not
            out += min(found, key=len)
    return out


@dataclass
class FrameCheck:
    """What the hook saw: frames checked (by type), connections, failures."""

    frames: int = 0
    messages: int = 0
    connections: int = 0
    by_type: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    _conns: weakref.WeakSet[ServerProtocol] = field(default_factory=weakref.WeakSet)
    _servers: weakref.WeakSet[NotifyServer] = field(default_factory=weakref.WeakSet)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _full_checked: set[str] = field(default_factory=set)

    def check(self, message: Any) -> None:
        if not isinstance(message, str | bytes):  # the server sends only text frames
            self._fail(message, ["not a text frame"])
            return
        try:
            f = orjson.loads(message)
        except orjson.JSONDecodeError as e:
            self._fail(message, [f"not JSON: {e}"])
            return
        found = problems_of(f)
        inner = frames_of(f)
        for x in inner:  # the first frame of each type also against the whole `oneOf`
            t = x.get("type") if isinstance(x, dict) else None
            if t not in self._full_checked:
                self._full_checked.add(t)
                found += [f"{t} (oneOf): {e.message}" for e in SERVER_FRAME.iter_errors(x)]
        with self._lock:
            self.messages += 1
            self.frames += len(inner)
            self.by_type.update(str(x.get("type")) for x in inner if isinstance(x, dict))
        if found:
            self._fail(message, found)

    def _fail(self, message: Any, found: list[str]) -> None:
        with self._lock:
            self.failures.append(f"{message!r:.300} -> {found[:3]}")

    def received(self) -> int:
        """Frames the servers seen so far have received from their clients."""
        return sum(srv.stats.frames_in for srv in list(self._servers))

    def install(self) -> None:
        check = self
        handle = NotifyServer._handle
        send = ServerProtocol.send_text

        async def _handle(srv: NotifyServer, ws: ServerConnection) -> None:
            with check._lock:
                check.connections += 1
            check._conns.add(ws.protocol)
            check._servers.add(srv)
            await handle(srv, ws)

        def _send(protocol: ServerProtocol, data: Any, fin: bool = True) -> None:
            if protocol in check._conns:
                check.check(data)
            send(protocol, data, fin)

        framed = outbox.text_frame

        def _framed(data: bytes) -> bytes:  # only outboxes (notify servers) call it
            check.check(data)
            return framed(data)

        NotifyServer._handle = _handle  # type: ignore[method-assign]
        ServerProtocol.send_text = _send  # type: ignore[method-assign]
        outbox.text_frame = _framed
        self._restore = (handle, send, framed)

    def uninstall(self) -> None:
        NotifyServer._handle, ServerProtocol.send_text, outbox.text_frame = \
            self._restore  # type: ignore[method-assign]


CHECK = FrameCheck()
