"""Wire frames at the edge (DESIGN §3): pydantic models in, orjson bytes out.

Client frames are validated by one discriminated-union `TypeAdapter` straight from the received
text; a frame that fails becomes an `error` frame with a stable code (G12), never an exception
that reaches the connection loop. Out-frames are the core's dataclasses, serialised once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from notify.core import events as ev
from notify.core.actions import Error
from notify.core.errors import ErrorCode

Str = Annotated[str, Field(min_length=1, max_length=256)]
Offset = Annotated[int, Field(ge=0)]


class _Frame(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


Token = Annotated[str, Field(max_length=16_384)]


class HelloFrame(_Frame):
    type: Literal["hello"]
    protocol: int
    token: Token | None = None
    member: Str | None = None
    resume_session: Str | None = None

    def to_core(self) -> ev.Hello:
        return ev.Hello(self.protocol, self.member, self.resume_session)


@dataclass(frozen=True, slots=True)
class Authenticate:
    """A `hello` with the token it carried: the adapter verifies it before the hub sees it."""

    hello: ev.Hello
    token: str | None


@dataclass(frozen=True, slots=True)
class Refresh:
    """`refresh{token}`: a new token for a live session (before the old one expires)."""

    token: str


class RefreshFrame(_Frame):
    type: Literal["refresh"]
    token: Token

    def to_core(self) -> Refresh:
        return Refresh(self.token)


class ResumeModel(_Frame):
    epoch: int
    offset: Offset
    streams: dict[Str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict,
                                                           max_length=100_000)
    view: Annotated[int, Field(ge=0)] = 0

    def to_core(self) -> ev.ResumePoint:
        return ev.ResumePoint(self.epoch, self.offset, dict(self.streams), self.view)


class JoinFrame(_Frame):
    type: Literal["join"]
    req: Str
    group: Str
    want_state: bool = False
    resume: ResumeModel | None = None
    accept_from: ev.AcceptFrom = ev.AcceptFrom.MEMBERS

    def to_core(self) -> ev.Join:
        resume = None if self.resume is None else self.resume.to_core()
        return ev.Join(self.req, self.group, self.want_state, resume, self.accept_from)


class LeaveFrame(_Frame):
    type: Literal["leave"]
    req: Str
    group: Str

    def to_core(self) -> ev.Leave:
        return ev.Leave(self.req, self.group)


class PublishFrame(_Frame):
    type: Literal["publish"]
    req: Str
    group: Str
    id: Str
    view: Annotated[int, Field(ge=0)]
    order: ev.Order = ev.Order.FIFO
    atomic: bool = False
    same_view: bool = False
    payload: Any = None

    def to_core(self) -> ev.Publish:
        return ev.Publish(self.req, self.group, self.id, self.view, self.order, self.payload,
                          self.atomic, self.same_view)


class AckFrame(_Frame):
    type: Literal["ack"]
    group: Str
    offsets: Annotated[list[Offset], Field(min_length=1, max_length=100_000)]

    def to_core(self) -> ev.Ack:
        return ev.Ack(self.group, tuple(self.offsets))


class StateChunkFrame(_Frame):
    type: Literal["state_chunk"]
    group: Str
    transfer: Str
    index: Annotated[int, Field(ge=0)]
    last: bool
    #: base64 of at most 256 KiB of compressed snapshot (DESIGN §5)
    data: Annotated[str, Field(max_length=350_000)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    streams: dict[Str, Annotated[int, Field(ge=0)]] | None = None

    def to_core(self) -> ev.StateChunk:
        return ev.StateChunk(self.group, self.transfer, self.index, self.last, self.data,
                             self.sha256, None if self.streams is None else dict(self.streams))


class CheckpointFrame(_Frame):
    type: Literal["checkpoint"]
    req: Str
    group: Str
    index: Annotated[int, Field(ge=0)]
    last: bool
    data: Annotated[str, Field(max_length=350_000)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    #: on the last chunk: the messages the snapshot includes (resume-point rule)
    position: ResumeModel | None = None

    def to_core(self) -> ev.CheckpointChunk:
        position = None if self.position is None else self.position.to_core()
        return ev.CheckpointChunk(self.req, self.group, self.index, self.last, self.data,
                                  self.sha256, position)


class FlushOkFrame(_Frame):
    type: Literal["flush_ok"]
    group: Str
    view: int

    def to_core(self) -> ev.FlushOk:
        return ev.FlushOk(self.group, self.view)


ClientFrameModel = Annotated[
    HelloFrame | JoinFrame | LeaveFrame | PublishFrame | AckFrame | FlushOkFrame
    | StateChunkFrame | CheckpointFrame | RefreshFrame,
    Field(discriminator="type"),
]
_adapter: TypeAdapter[Any] = TypeAdapter(ClientFrameModel)
CLIENT_TYPES = ("hello", "join", "leave", "publish", "ack", "flush_ok", "state_chunk", "checkpoint",
                "refresh")

Parsed = ev.ClientFrame | Authenticate | Refresh | Error


def parse_any(data: str | bytes) -> Parsed:
    """One received WebSocket message → what the adapter acts on: a core event, a `hello` with
    its token, a `refresh`, or the `error` frame to answer with."""
    try:
        model = _adapter.validate_json(data)
    except ValidationError as e:
        return _explain(data, e)
    if isinstance(model, HelloFrame):
        return Authenticate(model.to_core(), model.token)
    result: ev.ClientFrame | Refresh = model.to_core()
    return result


def parse(data: str | bytes) -> ev.ClientFrame | Error:
    """One received WebSocket message → a core event, or the `error` frame to answer with
    (a `hello`'s token is dropped, a `refresh` is refused: for callers without
    authentication, like the simulator)."""
    f = parse_any(data)
    if isinstance(f, Authenticate):
        return f.hello
    if isinstance(f, Refresh):
        return Error(ErrorCode.UNKNOWN_TYPE, "refresh needs the server adapter")
    return f


def _explain(data: str | bytes, e: ValidationError) -> Error:
    req: str | None = None
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError:
        return Error(ErrorCode.BAD_FRAME, "not valid JSON")
    if not isinstance(raw, dict):
        return Error(ErrorCode.BAD_FRAME, "a frame is a JSON object with a `type`")
    if isinstance(raw.get("req"), str):
        req = raw["req"][:256]
    first = e.errors()[0]
    if first["type"] == "union_tag_invalid":
        return Error(ErrorCode.UNKNOWN_TYPE,
                     f"unknown frame type {str(raw.get('type'))[:64]!r}; "
                     f"expected one of {', '.join(CLIENT_TYPES)}", req)
    if first["type"] == "union_tag_not_found":
        return Error(ErrorCode.BAD_FRAME, "missing `type`", req)
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc'][1:]) or 'frame'}: {err['msg']}"
        for err in e.errors()[:5]
    )
    return Error(ErrorCode.BAD_FRAME, f"{raw.get('type')}: {problems}", req)


def dumps(frame: object) -> bytes:
    """Serialise an out-frame dataclass (its fields are the wire fields)."""
    return orjson.dumps(frame)


def batch(frames: list[bytes]) -> bytes:
    """Pack already-serialised frames into one `batch` frame without re-encoding them."""
    return b'{"type":"batch","frames":[' + b",".join(frames) + b"]}"
