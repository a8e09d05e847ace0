"""What the server API answers, as pydantic models: the handlers build their answers with them,
and the OpenAPI document (notify/api/openapi.py) takes its schemas from them
(`model_json_schema`), so the two cannot drift apart.

Field names are the contract of issue 31. Every field is always present (`null` where it has
no value) and no other is: `additionalProperties: false`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from notify.api.errors import ApiErrorCode

I64_MAX = 2**63 - 1
Count = Annotated[int, Field(ge=0, le=I64_MAX)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ErrorDetail(_Model):
    code: ApiErrorCode = Field(description="stable: clients branch on it")
    message: str = Field(description="for people: what was wrong (a 400 names the field)")


class ErrorBody(_Model):
    """Every answer that is not a success."""

    error: ErrorDetail


class GroupView(_Model):
    """A group's current view, and presence by user (DESIGN G15)."""

    group: str
    version: int = Field(ge=0, description="the view's version (0: no view installed yet)")
    members: list[str] = Field(description="the view's member ids (`user#instance`, or "
                                           "`user`), the longest-standing first")
    users: dict[str, list[str]] = Field(
        description="each user present, with its instances (member ids) in view order")


class StoredMessage(_Model):
    """One message of the group's log."""

    offset: Count = Field(description="its place in the group's log (1, 2, ...)")
    sender: str = Field(description="the member id that published it")
    stream: str = Field(description="`fifo:<member>`, `total`, or `ext:<sender>` (a "
                                    "non-member's)")
    seq: Count = Field(description="its place in its stream (1, 2, ...)")
    order: Literal["fifo", "total"]
    payload: Any = Field(description="the JSON value published, as it was stored")
    time: float = Field(description="when the server accepted it (Unix seconds)")


class MessagePage(_Model):
    """A page of the group's durable log, in offset order."""

    messages: list[StoredMessage]
    next: Count | None = Field(description="pass it as `after` for the next page; null: this "
                                           "page reached what the log holds now")
    first: Count = Field(description="the oldest offset the log retains: a page asked after "
                                     "an offset below `first - 1` starts at `first` (retention "
                                     "dropped those before)")


class GroupSummary(_Model):
    group: str
    version: int = Field(ge=0)
    members: Count = Field(description="instances in the current view")
    users: Count = Field(description="distinct users in the current view")
    head: Count = Field(description="the last offset the log holds (0: none)")


class GroupList(_Model):
    """Groups in name order."""

    groups: list[GroupSummary]
    next: str | None = Field(description="pass it as `cursor` for the next page; null: no more")


I64_MIN, U64_MAX = -(2**63), 2**64 - 1
#: a payload the edge carries, as far as JSON Schema can say it: integers within 64 bits at
#: any depth (what it cannot say: nesting within `max_payload_depth`, the written size)
JSON_VALUE: dict[str, Any] = {
    "description": "a JSON value the edge can carry (integers within 64 bits)",
    "anyOf": [
        {"type": "null"}, {"type": "boolean"}, {"type": "string"},
        {"type": "integer", "minimum": I64_MIN, "maximum": U64_MAX},
        {"type": "number", "not": {"type": "integer"}},
        {"type": "array", "items": {"$ref": "#/components/schemas/JsonValue"}},
        {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/JsonValue"}},
    ],
}


class PublishRequest(_Model):
    """A message to publish (the request body; a field not listed here is refused)."""

    payload: Any = Field(description="any JSON value (`null` too) that the WebSocket edge "
                                     "would carry: integers within 64 bits, nesting within "
                                     "`max_payload_depth`, at most `max_frame_bytes` written")
    order: Literal["fifo", "total"] = Field(
        "fifo", description="`fifo`: in the key's own FIFO stream (`fifo:api:NAME`); "
                            "`total`: in the group's total order")
    atomic: bool = Field(False, description="delivered to every member of the current view or "
                                            "to none (answered once committed or aborted)")


class PublishAnswer(_Model):
    """The message is in the group's durable log (and, when atomic, decided)."""

    offset: Count = Field(description="its place in the group's log")
    id: str = Field(description="its publish id: the Idempotency-Key, or one the server made")
    committed: bool | None = Field(description="an atomic message: true once every member of "
                                               "the view delivered it, false if aborted; null "
                                               "for others")


class Removal(_Model):
    """Who a removal took out of the group, once the view without them is installed."""

    group: str
    removed: list[str] = Field(description="the member ids removed (every instance of the "
                                           "user, for a user id)")
    version: int = Field(ge=1, description="the view that no longer holds them, installed "
                                           "and stored")


class Disconnection(_Model):
    """What a disconnect ended."""

    user: str
    sessions: list[str] = Field(description="the member ids (instances) whose sessions ended "
                                            "and whose connections were closed (4007)")
    revoked_before: float | None = Field(
        description="the user's tokens issued (`iat`) at or before this time (Unix seconds) "
                    "are refused from now on; null in development mode (no tokens)")


#: every model of the document, with its place in `components.schemas`
MODELS: tuple[type[BaseModel], ...] = (ErrorBody, GroupView, MessagePage, GroupList,
                                       PublishRequest, PublishAnswer, Removal, Disconnection)

__all__ = ["MODELS", "Disconnection", "ErrorBody", "ErrorDetail", "GroupList", "GroupSummary",
           "GroupView", "MessagePage", "PublishAnswer", "PublishRequest", "Removal",
           "StoredMessage"]
