"""The JSON Schema of wire protocol v1, both directions (DESIGN §3), generated from the code.

Client frames come from the pydantic models the edge validates with (notify/wire.py), so
the schema says exactly what the server accepts (strict types, `additionalProperties: false`,
64-bit integer bounds), with one difference JSON Schema cannot express: it counts `1.0` as an
integer, the server does not. Server frames come from the core's out-frame dataclasses
(notify/core/actions.py), whose fields are the wire fields; orjson writes every field, `null`
included, so each is required. `batch` and `refreshed` are built by the adapter, not the core,
and are written out here.

The checked-in copy is `docs/schema/protocol.schema.json`; regenerate it with

    python -m notify.server.schema > docs/schema/protocol.schema.json

(tests/unit/test_schema.py fails when it is out of date).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import typing
from typing import Any

from pydantic import TypeAdapter

from notify.core.actions import Error, OutFrame, Rejected
from notify.core.errors import ErrorCode, RejectCode
from notify.wire import ClientFrameModel

SCHEMA_ID = "urn:notify:protocol:1"

#: one line per frame type, from docs/protocol.md
_CLIENT = {
    "HelloFrame": "hello: the first frame of a connection.",
    "JoinFrame": "join: ask to join a group (answered by a view_install, a view_resume or an "
                 "error).",
    "LeaveFrame": "leave: answered by a view_install that lists the member in `left`.",
    "PublishFrame": "publish: `id` is the idempotency key; `payload` is any JSON value with "
                    "64-bit integers, valid Unicode, no NaN/Infinity, nested at most "
                    "`max_payload_depth` (64) levels (else rejected bad_payload).",
    "AckFrame": "ack: receipt of atomic messages.",
    "FlushOkFrame": "flush_ok: answer to view_change (`view` is the proposed version).",
    "StateChunkFrame": "state_chunk: a donor's snapshot chunk for a joiner.",
    "CheckpointFrame": "checkpoint: a chunk of a member's snapshot, stored as the group's "
                       "checkpoint.",
    "RefreshFrame": "refresh: a new token for this connection's member.",
    "PingFrame": "ping: an application-level heartbeat, answered pong (with its req).",
    "HistoryFrame": "history: a page of the group's log after `after` (and before `before`), "
                    "for one of its members; answered history_page.",
    "ResumeModel": "A resume point: the log position a member's knowledge ends at.",
}
_SERVER = {
    "Welcome": "welcome: answer to hello.",
    "Published": "published: the message is accepted and stored.",
    "Rejected": "rejected: the message was refused and delivered to no one.",
    "Outcome": "outcome: result of the sender's atomic message.",
    "Confirm": "confirm: these atomic messages are delivered everywhere.",
    "Abort": "abort: these atomic messages are delivered nowhere.",
    "ViewChange": "view_change: a new view is proposed; stop sending, ACK, answer flush_ok.",
    "ViewInstall": "view_install: the new view.",
    "RemovalInstall": "view_install, as a member it removes without its asking gets it: "
                      "`reason` says why (`removed` by the server API, `flush_timeout`...).",
    "ViewResume": "view_resume: the proposed change is cancelled; view `view` continues.",
    "CatchupDone": "catchup_done: the replay for a resume or rejoin is complete.",
    "Error": "error: a frame was refused; `req` is the refused frame's, as sent.",
    "Deliver": "deliver: a message, to every member the sender included.",
    "StateRequest": "state_request: to the donor, snapshot your state now.",
    "StateChunkOut": "state_chunk: a snapshot chunk, to the joiner.",
    "CheckpointStored": "checkpoint_stored: the checkpoint is durable and now the group's.",
    "Ephemeral": "ephemeral: an ephemeral publish (presence, cursors), at most once, from "
                 "another member of the view; in no log.",
    "Pong": "pong: the answer to ping (`req` as sent, or null).",
    "CatchupLog": "catchup_log: the messages after `after` and before `before` (and the "
                  "installs among them) are not in the replay that follows; read them with "
                  "history.",
    "HistoryPage": "history_page: the answer to history: messages (deliver frames) up to "
                   "`end`, the installs among them, which were aborted, and the log's "
                   "`first` and `head`.",
}

_REFRESHED = {
    "title": "Refreshed",
    "description": "refreshed: the refresh token is in force.",
    "type": "object",
    "properties": {"type": {"const": "refreshed"}, "expires": {"type": ["number", "null"]}},
    "required": ["type", "expires"],
    "additionalProperties": False,
}
_BATCH = {
    "title": "Batch",
    "description": "batch: several server frames, to be handled in order (never nested).",
    "type": "object",
    "properties": {"type": {"const": "batch"},
                   "frames": {"type": "array", "items": {"$ref": "#/$defs/SingleServerFrame"}}},
    "required": ["type", "frames"],
    "additionalProperties": False,
}


def _strip_titles(node: Any) -> Any:
    """Drop pydantic's generated per-property titles: the property name says it."""
    if isinstance(node, dict):
        props = node.get("properties")
        if isinstance(props, dict):
            for p in props.values():
                if isinstance(p, dict):
                    p.pop("title", None)
        for v in node.values():
            _strip_titles(v)
    elif isinstance(node, list):
        for v in node:
            _strip_titles(v)
    return node


def _server_frame(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    kind = next(f.default for f in dataclasses.fields(cls) if f.name == "type")
    props = d["properties"]
    for p in props.values():
        p.pop("default", None)
    props["type"] = {"const": kind}
    if cls is Error:
        props["code"] = {"enum": [c.value for c in ErrorCode]}
    elif cls is Rejected:
        props["code"] = {"enum": [c.value for c in RejectCode]}
    return {"title": d.get("title", cls.__name__), "description": _SERVER[cls.__name__],
            "type": "object", "properties": props,
            "required": list(props),  # orjson writes every field, null included
            "additionalProperties": False}


def protocol_schema() -> dict[str, Any]:
    """The schema: `#/$defs/ClientFrame` and `#/$defs/ServerFrame` are the two directions."""
    client = TypeAdapter(ClientFrameModel).json_schema(ref_template="#/$defs/{model}")
    defs: dict[str, Any] = {}
    for name, d in client.pop("$defs").items():
        if name in _CLIENT:  # (the enums keep their own)
            d["description"] = _CLIENT[name]
        defs[name] = d
    client.pop("discriminator", None)  # OpenAPI's keyword, not JSON Schema's

    server = TypeAdapter(OutFrame).json_schema(mode="serialization",
                                               ref_template="#/$defs/{model}")
    classes = {c.__name__: c for c in typing.get_args(OutFrame)}
    singles = []
    for name, d in server["$defs"].items():
        defs[name] = _server_frame(classes[name], d)
        singles.append({"$ref": f"#/$defs/{name}"})
    defs["Refreshed"] = _REFRESHED
    singles.append({"$ref": "#/$defs/Refreshed"})
    defs["Batch"] = _BATCH
    defs["ClientFrame"] = {"description": "Any client → server frame.", "oneOf": client["oneOf"]}
    defs["SingleServerFrame"] = {"description": "Any server → client frame but batch.",
                                 "oneOf": singles}
    defs["ServerFrame"] = {"description": "What one server → client WebSocket message holds.",
                           "oneOf": [{"$ref": "#/$defs/SingleServerFrame"},
                                     {"$ref": "#/$defs/Batch"}]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "notify wire protocol v1",
        "description": "JSON text frames over one WebSocket (docs/protocol.md). Validate a "
                       "client frame against #/$defs/ClientFrame, a server message against "
                       "#/$defs/ServerFrame. Generated by notify/server/schema.py.",
        "anyOf": [{"$ref": "#/$defs/ClientFrame"}, {"$ref": "#/$defs/ServerFrame"}],
        "$defs": _strip_titles(defs),
    }


def render() -> str:
    return json.dumps(protocol_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
