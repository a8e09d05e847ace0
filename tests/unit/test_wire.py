"""The edge: every client frame parses to its core event; every bad one to a stable error (G12)."""

from __future__ import annotations

import orjson
import pytest

from notify.core import events as ev
from notify.core.actions import Deliver, Error, Message, ViewInstall
from notify.core.errors import ErrorCode
from notify.server.wire import batch, dumps, parse


def test_publish_parses_to_core_event() -> None:
    f = parse(b'{"type":"publish","req":"1","group":"g","id":"x","view":3,"order":"total",'
              b'"atomic":true,"same_view":true,"payload":{"a":[1,2]},"extra":"ignored"}')
    assert f == ev.Publish("1", "g", "x", 3, ev.Order.TOTAL, {"a": [1, 2]}, True, True)


def test_join_with_resume_point() -> None:
    f = parse('{"type":"join","req":"r","group":"g","accept_from":"any",'
              '"resume":{"epoch":5,"offset":10,"streams":{"fifo:a":3},"view":2}}')
    assert f == ev.Join("r", "g", False, ev.ResumePoint(5, 10, {"fifo:a": 3}, 2), ev.AcceptFrom.ANY)


@pytest.mark.parametrize(
    ("data", "code", "req"),
    [
        (b"{not json", ErrorCode.BAD_FRAME, None),
        (b"[1,2]", ErrorCode.BAD_FRAME, None),
        (b'{"req":"7"}', ErrorCode.BAD_FRAME, "7"),
        (b'{"type":"launch","req":"8"}', ErrorCode.UNKNOWN_TYPE, "8"),
        (b'{"type":"publish","req":"9","group":"g"}', ErrorCode.BAD_FRAME, "9"),
        (b'{"type":"publish","req":"9","group":"g","id":"x","view":-1}', ErrorCode.BAD_FRAME, "9"),
        (b'{"type":"publish","req":"9","group":"g","id":"x","view":1,"order":"random"}',
         ErrorCode.BAD_FRAME, "9"),
        (b'{"type":"ack","group":"g","offsets":[]}', ErrorCode.BAD_FRAME, None),
        (b'{"type":"join","req":"","group":"g"}', ErrorCode.BAD_FRAME, ""),
    ],
)
def test_bad_frames_get_stable_codes(data: bytes, code: ErrorCode, req: str | None) -> None:
    f = parse(data)
    assert isinstance(f, Error)
    assert f.code == code
    assert f.req == req
    assert f.message


def test_missing_fields_are_named() -> None:
    f = parse(b'{"type":"publish","req":"1","group":"g"}')
    assert isinstance(f, Error)
    assert "id" in f.message and "view" in f.message


def test_out_frames_serialise_with_their_type() -> None:
    m = Message("g", 4, "total", 2, "a", 1, False, {"x": 1}, 1.5, "id")
    assert orjson.loads(dumps(Deliver.of(m))) == {
        "type": "deliver", "group": "g", "offset": 4, "stream": "total", "seq": 2,
        "sender": "a", "view": 1, "atomic": False, "payload": {"x": 1}, "ts": 1.5}
    install = orjson.loads(dumps(ViewInstall("g", 2, ("a", "b"), ("b",), (), 9, 4)))
    assert install["type"] == "view_install" and install["members"] == ["a", "b"]


def test_batch_packs_without_reencoding() -> None:
    frames = [dumps(Error("x", "one")), dumps(Error("y", "two"))]
    packed = orjson.loads(batch(frames))
    assert packed["type"] == "batch"
    assert [f["code"] for f in packed["frames"]] == ["x", "y"]
