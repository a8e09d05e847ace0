"""docs/schema/protocol.schema.json: up to date with the code, a valid draft 2020-12 schema, and
in agreement with the edge on what a client may send (the server's own frames are checked in
every real-socket test by tests/conftest.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from jsonschema import Draft202012Validator

from notify.core.actions import (
    Abort,
    CatchupDone,
    CheckpointStored,
    Confirm,
    Deliver,
    Error,
    Message,
    Outcome,
    Published,
    Rejected,
    StateChunkOut,
    StateRequest,
    ViewChange,
    ViewInstall,
    ViewResume,
    Welcome,
)
from notify.core.errors import ErrorCode, RejectCode
from notify.runtime.frames import batch, dumps
from notify.server.schema import render
from notify.wire import parse_any
from tests.schema_check import CLIENT_FRAME, SCHEMA, SCHEMA_PATH, problems


def test_checked_in_schema_is_up_to_date() -> None:
    assert SCHEMA_PATH.read_text() == render(), (
        "docs/schema/protocol.schema.json is stale: run "
        "`python -m notify.server.schema > docs/schema/protocol.schema.json`")


def test_schema_is_valid_draft_2020_12() -> None:
    Draft202012Validator.check_schema(SCHEMA)


FRAGMENT = orjson.Fragment(b'{"x":[1,"y",null]}')
SERVER_FRAMES: list[object] = [
    Welcome("s", "a#t1", 5000, {"max_frame_bytes": 1}, False, "a", "t1"),
    Welcome("s", "a", 5000, {"max_frame_bytes": 1}, False, "a", None),
    Published("r", "id", 3), Published(7, "id", 3),
    Rejected("r", "id", RejectCode.BAD_PAYLOAD), Rejected(-1, "id", RejectCode.STALE_VIEW),
    Outcome("id", "g", 4, True), Outcome("id", "g", 4, False, "ack_timeout"),
    Confirm("g", (1, 2)), Abort("g", (3,), "ack_timeout"),
    ViewChange("g", 3, ("a", "b"), ("b",), (), "join"),
    ViewInstall("g", 3, ("a", "b"), ("b",), (), 17, 40),
    ViewResume("g", 2), CatchupDone("g", 40, 0),
    Error(ErrorCode.BAD_FRAME, "m"), Error(ErrorCode.INTERNAL, "m", 7), Error("no_group", "m", "r"),
    Deliver.of(Message("g", 1, "fifo:a", 1, "a", 2, False, FRAGMENT, 1.5, "id")),
    Deliver.of(Message("g", 1, "total", 1, "a", 2, True, None, 1.5, "id")),
    StateRequest("g", "t", "c", 9),
    StateChunkOut("g", "t", 0, False, "AAAA", None, None, 9),
    StateChunkOut("g", "t", 1, True, "AAAA", "0" * 64, {"fifo:a": 2}, 9),
    CheckpointStored("r", "g", 9, 100),
]


@pytest.mark.parametrize("frame", SERVER_FRAMES, ids=lambda f: type(f).__name__)
def test_every_server_frame_kind_matches(frame: object) -> None:
    assert problems(dumps(frame)) == []


def test_batch_and_refreshed_match() -> None:
    assert problems(batch([dumps(f) for f in SERVER_FRAMES])) == []
    assert problems(b'{"type":"refreshed","expires":1700000000}') == []
    assert problems(b'{"type":"refreshed","expires":null}') == []


@pytest.mark.parametrize("bad", [
    {"type": "published", "req": "r", "id": "x"},  # a field missing
    {"type": "published", "req": "r", "id": "x", "offset": 1, "extra": 1},  # one too many
    {"type": "published", "req": True, "id": "x", "offset": 1},  # req is no bool
    {"type": "error", "code": "made_up", "message": "m", "req": None},  # an undocumented code
    {"type": "rejected", "req": "r", "id": "x", "code": "bad_frame"},  # an error code, not a reject
    {"type": "deliver", "group": "g"},
    {"type": "nope"},
    {"type": "batch", "frames": [{"type": "batch", "frames": []}]},  # batches do not nest
])
def test_schema_refuses_what_the_server_must_not_send(bad: dict[str, Any]) -> None:
    assert problems(orjson.dumps(bad)) != []


CLIENT_OK = [
    {"type": "hello", "protocol": 1, "member": "a"},
    {"type": "hello", "protocol": 1, "token": "t", "resume_session": "s"},
    {"type": "join", "req": "r", "group": "g"},
    {"type": "join", "req": 5, "group": "g", "want_state": True, "accept_from": "any",
     "resume": {"epoch": 1, "offset": 2, "streams": {"fifo:a": 3}, "view": 2}},
    {"type": "leave", "req": "r", "group": "g"},
    {"type": "publish", "req": "r", "group": "g", "id": "i", "view": 1, "payload": None},
    {"type": "publish", "req": 1, "group": "g", "id": "i", "view": 1, "order": "total",
     "atomic": True, "same_view": True, "payload": {"a": [1, 2.5, "x"]}},
    {"type": "ack", "group": "g", "offsets": [1, 2]},
    {"type": "flush_ok", "group": "g", "view": 3},
    {"type": "state_chunk", "group": "g", "transfer": "t", "index": 0, "last": True,
     "data": "AAAA", "sha256": "0" * 64, "streams": {"total": 4}},
    {"type": "checkpoint", "req": "r", "group": "g", "index": 0, "last": True, "data": "AA",
     "sha256": "0" * 64, "position": {"epoch": 1, "offset": 2}},
    {"type": "refresh", "token": "t"},
]
CLIENT_BAD = [
    {"type": "publish", "req": "r", "group": "g", "id": "i", "view": "3", "payload": 1},
    {"type": "publish", "req": "r", "group": "g", "id": "i", "view": 3, "atomic": "yes",
     "payload": 1},
    {"type": "publish", "req": "r", "group": "g", "id": "i", "view": 3, "sameView": True,
     "payload": 1},
    {"type": "publish", "req": True, "group": "g", "id": "i", "view": 3, "payload": 1},
    {"type": "publish", "req": "r", "group": "g", "id": "i", "view": 3},
    {"type": "ack", "group": "g", "offsets": ["2"]},
    {"type": "hello", "protocol": True},
    {"type": "join", "req": "r", "group": "g", "resume": {"epoch": 1, "offset": 0, "x": 1}},
    {"type": "frobnicate"},
]


@pytest.mark.parametrize("frame", CLIENT_OK, ids=lambda f: str(f["type"]))
def test_schema_and_edge_agree_on_valid_client_frames(frame: dict[str, Any]) -> None:
    assert list(CLIENT_FRAME.iter_errors(frame)) == []
    assert not isinstance(parse_any(orjson.dumps(frame)), Error | Rejected)


@pytest.mark.parametrize("frame", CLIENT_BAD, ids=lambda f: str(f["type"]))
def test_schema_and_edge_agree_on_invalid_client_frames(frame: dict[str, Any]) -> None:
    assert list(CLIENT_FRAME.iter_errors(frame)) != []
    assert isinstance(parse_any(orjson.dumps(frame)), Error)
