"""Client frames at the edge (DESIGN §3): received text to the core's events, strictly.

Client frames are validated by one discriminated-union `TypeAdapter` straight from the received
text; a frame that fails becomes an `error` frame with a stable code (G12), never an exception
that reaches the connection loop. Every host that takes client frames reads them here: the
server's connections, the cluster's routed frames, and the simulator and the replay, whose
members are the real SDK (so what the SDK sends is what the edge accepts). Out-frames are the
core's dataclasses, encoded by notify/runtime/frames.py.

Strictness (DESIGN §3, docs/protocol.md): every field has a strict type (a string is not a
number, `true`/`false` are the only booleans, `1.0` is not an integer), every integer fits in 64
bits, and an unknown field is refused by name (`extra="forbid"`, at every level), so that a typo
or a JavaScript client's habits cannot silently change a guarantee (a misspelt `sameView` must
not turn G6 off). `req` is a string or an integer and is echoed exactly as sent.

The publish `payload` is opaque to the core, but it must be something every later step can
carry (G12): orjson, which stores and fans it out, only writes 64-bit integers and valid
Unicode, and writes NaN as `null`. So the edge checks it once, serialises it once, and hands
the core an `orjson.Fragment` of those bytes: the log and every member's `deliver` reuse them
as they are (`orjson.dumps` embeds a Fragment without re-encoding it). A payload that cannot be
carried is refused right here with `rejected{code: bad_payload}`, before any stream sees it.

Parsing is one pass of pydantic's JSON parser on the hot path. Only a frame that parser refuses
takes the slow path (`_salvage`): a lenient reading, member by member, to say what was wrong and
to echo the frame's `req` when it has a usable one (a lone surrogate, a NaN or a 10,000-level
nesting in the payload is a bad payload of a request the client is waiting on, not line noise).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import orjson
import pydantic_core
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from notify.core import events as ev
from notify.core.actions import Error, Rejected
from notify.core.config import MAX_BATCH_FRAMES, Limits
from notify.core.errors import ErrorCode, RejectCode
from notify.runtime.frames import exact

I64_MIN, I64_MAX, U64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
MAX_REQ = 256

Str = Annotated[str, Field(min_length=1, max_length=256)]
#: a count, offset, seq, index or view version: non-negative, 64-bit
Count = Annotated[int, Field(ge=0, le=I64_MAX)]
I64 = Annotated[int, Field(ge=I64_MIN, le=I64_MAX)]
#: the client's correlation id: a string (1-256 characters) or a 64-bit integer, never a bool
ReqField = Annotated[str, Field(min_length=1, max_length=MAX_REQ)] | I64
Offset = Count


class _Frame(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


Token = Annotated[str, Field(max_length=16_384)]


class HelloFrame(_Frame):
    type: Literal["hello"]
    protocol: I64
    token: Token | None = None
    member: Str | None = None
    resume_session: Str | None = None
    instance: Str | None = None

    def to_core(self) -> ev.Hello:
        return ev.Hello(self.protocol, self.member, self.resume_session, self.instance)


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
    epoch: I64
    offset: Offset
    streams: dict[Str, Count] = Field(default_factory=dict, max_length=100_000)
    view: Count = 0
    #: the atomic messages it holds with no outcome yet (their outcomes come first)
    held: Annotated[list[Offset], Field(max_length=100_000)] = Field(default_factory=list)

    def to_core(self) -> ev.ResumePoint:
        return ev.ResumePoint(self.epoch, self.offset, dict(self.streams), self.view,
                              tuple(self.held))


class JoinFrame(_Frame):
    type: Literal["join"]
    req: ReqField
    group: Str
    want_state: bool = False
    resume: ResumeModel | None = None
    accept_from: ev.AcceptFrom = ev.AcceptFrom.MEMBERS

    def to_core(self) -> ev.Join:
        resume = None if self.resume is None else self.resume.to_core()
        return ev.Join(self.req, self.group, self.want_state, resume, self.accept_from)


class LeaveFrame(_Frame):
    type: Literal["leave"]
    req: ReqField
    group: Str

    def to_core(self) -> ev.Leave:
        return ev.Leave(self.req, self.group)


class PublishFrame(_Frame):
    type: Literal["publish"]
    req: ReqField
    group: Str
    id: Str
    view: Count
    order: ev.Order = ev.Order.FIFO
    atomic: bool = False
    same_view: bool = False
    #: presence, cursors: at most once to the view's other members, never stored
    ephemeral: bool = False
    #: any JSON value, `null` included, that `_payload` finds carryable
    payload: Any

    @model_validator(mode="after")
    def _ephemeral_is_plain(self) -> PublishFrame:
        if self.ephemeral and (self.atomic or self.order is not ev.Order.FIFO):
            raise ValueError("an ephemeral publish is neither atomic nor in the total order")
        return self

    def to_core(self, body: bytes) -> ev.Publish:
        """The core event, carrying the payload as the bytes `_payload` checked and wrote."""
        return ev.Publish(self.req, self.group, self.id, self.view, self.order,
                          orjson.Fragment(body), self.atomic, self.same_view, len(body),
                          self.ephemeral)


class PingFrame(_Frame):
    type: Literal["ping"]
    req: ReqField | None = None

    def to_core(self) -> ev.Ping:
        return ev.Ping(self.req)


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
    index: Count
    last: bool
    #: base64 of at most 256 KiB of compressed snapshot (DESIGN §5)
    data: Annotated[str, Field(max_length=350_000)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    streams: dict[Str, Count] | None = None

    def to_core(self) -> ev.StateChunk:
        return ev.StateChunk(self.group, self.transfer, self.index, self.last, self.data,
                             self.sha256, None if self.streams is None else dict(self.streams))


class CheckpointFrame(_Frame):
    type: Literal["checkpoint"]
    req: ReqField
    group: Str
    index: Count
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
    view: Count

    def to_core(self) -> ev.FlushOk:
        return ev.FlushOk(self.group, self.view)


class HistoryFrame(_Frame):
    type: Literal["history"]
    req: ReqField
    group: Str
    after: Offset
    #: exclusive; none: up to the log's head
    before: Offset | None = None
    #: at most this many messages (the server may answer fewer: `Limits.history_page`)
    limit: Annotated[int, Field(ge=1, le=100_000)] = 1000
    accept_from: ev.AcceptFrom = ev.AcceptFrom.MEMBERS

    def to_core(self) -> ev.History:
        return ev.History(self.req, self.group, self.after, self.before, self.limit,
                          self.accept_from)


SingleFrameModel = Annotated[
    HelloFrame | JoinFrame | LeaveFrame | PublishFrame | AckFrame | FlushOkFrame
    | StateChunkFrame | CheckpointFrame | RefreshFrame | PingFrame | HistoryFrame,
    Field(discriminator="type"),
]


class BatchFrame(_Frame):
    """`batch{frames}`: several frames in one WebSocket message, handled exactly as if each
    had come alone, in order (a batch in a batch is not a frame). A client sends one only to a
    server whose `welcome.limits` says `max_batch_frames`: it saves both ends a WebSocket
    message per frame (issue 34: about a seventh of the server's and the publisher's CPU)."""

    type: Literal["batch"]
    frames: Annotated[list[SingleFrameModel], Field(min_length=1, max_length=MAX_BATCH_FRAMES)]


ClientFrameModel = Annotated[
    HelloFrame | JoinFrame | LeaveFrame | PublishFrame | AckFrame | FlushOkFrame
    | StateChunkFrame | CheckpointFrame | RefreshFrame | PingFrame | HistoryFrame | BatchFrame,
    Field(discriminator="type"),
]
_adapter: TypeAdapter[Any] = TypeAdapter(ClientFrameModel)
_single: TypeAdapter[Any] = TypeAdapter(SingleFrameModel)
CLIENT_TYPES = ("hello", "join", "leave", "publish", "ack", "flush_ok", "state_chunk", "checkpoint",
                "refresh", "ping", "history", "batch")

One = ev.ClientFrame | Authenticate | Refresh | Error | Rejected


@dataclass(frozen=True, slots=True)
class Batch:
    """A `batch`, each frame as `parse_any` makes it of a frame sent alone, with the frame's
    own text for a host that sends it on as received (a cluster's edge routes frames one by
    one): made only when asked for, which a single node never does."""

    frames: list[tuple[One, Callable[[], bytes]]]


Parsed = One | Batch

_DEFAULT_LIMITS = Limits()


def parse_any(data: str | bytes, limits: Limits = _DEFAULT_LIMITS) -> Parsed:
    """One received WebSocket message → what the adapter acts on: a core event, a `hello` with
    its token, a `refresh`, or the frame to answer with: an `error`, or a `rejected` for a
    publish whose payload cannot be carried (G12); or a `Batch` of those."""
    try:
        model = _adapter.validate_json(data)
    except ValidationError as e:
        return _explain(data, e, limits)
    if type(model) is PublishFrame:
        return _publish(model, functools.partial(_reads, data), limits)
    if type(model) is BatchFrame:
        # whether the whole text reads with orjson, asked at most once for all its frames
        reads = functools.cache(functools.partial(_reads, data))
        return Batch([(_one(m, reads, limits), functools.partial(_text_of, m))
                      for m in model.frames])
    return _one(model, functools.partial(_reads, data), limits)


def parse_one(data: str | bytes, limits: Limits = _DEFAULT_LIMITS) -> One:
    """A message that must hold one frame (a frame an edge routed here): a batch is refused."""
    f = parse_any(data, limits)
    if isinstance(f, Batch):
        return Error(ErrorCode.BAD_FRAME, "a batch where one frame was expected")
    return f


def _one(model: Any, reads: Callable[[], bool], limits: Limits) -> One:
    if type(model) is PublishFrame:
        return _publish(model, reads, limits)
    if type(model) is HelloFrame:
        return Authenticate(model.to_core(), model.token)
    result: ev.ClientFrame | Refresh = model.to_core()
    return result


def _text_of(model: BaseModel) -> bytes:
    """A frame of a batch as if it had been sent alone (the fields it was sent with)."""
    return model.__pydantic_serializer__.to_json(model, exclude_unset=True)


def parse(data: str | bytes, limits: Limits = _DEFAULT_LIMITS) -> ev.ClientFrame | Error | Rejected:
    """One received WebSocket message → a core event, or the frame to answer with
    (a `hello`'s token is dropped, a `refresh` is refused: for callers without
    authentication, like the simulator)."""
    f = parse_one(data, limits)
    if isinstance(f, Authenticate):
        return f.hello
    if isinstance(f, Refresh):
        return Error(ErrorCode.UNKNOWN_TYPE, "refresh needs the server adapter")
    return f


def encode_publish(p: ev.Publish) -> bytes:
    """A publish as a client sends it (what `parse` reads back as `p`): how the server's own
    connections' publishes cross a cluster link to a group's owner (`NotifyServer.submit`)."""
    frame: dict[str, Any] = {"type": "publish", "req": p.req, "group": p.group, "id": p.id,
                             "view": p.view, "order": p.order.value, "payload": p.payload}
    if p.atomic:
        frame["atomic"] = True
    if p.same_view:
        frame["same_view"] = True
    return orjson.dumps(frame)


# -- the payload -------------------------------------------------------------------------------


def _publish(model: PublishFrame, reads: Callable[[], bool],
             limits: Limits) -> ev.Publish | Rejected:
    """Check and serialise the payload once; the core carries the bytes as a Fragment.

    pydantic's parser has already refused lone surrogates and nesting past 200 levels; what is
    left to check costs almost nothing for an ordinary payload, because two exact gates keep the
    slower checks off the hot path: orjson writes NaN and ±Infinity (a `NaN` literal, or `1e400`)
    as `null`, so only a payload whose bytes hold a `null` can hold one; and a payload cannot
    nest deeper than it has brackets."""
    try:
        body = orjson.dumps(model.payload)
    except TypeError:  # an integer outside 64 bits: orjson cannot write it
        return Rejected(model.req, model.id, RejectCode.BAD_PAYLOAD)
    depth = limits.max_payload_depth
    if b"null" in body and not reads() and \
            payload_problem(model.payload, depth, strings=False) is not None:
        return Rejected(model.req, model.id, RejectCode.BAD_PAYLOAD)
    if body.count(b"[") + body.count(b"{") > depth and _deeper_than(model.payload, depth):
        return Rejected(model.req, model.id, RejectCode.BAD_PAYLOAD)
    if len(body) > limits.max_frame_bytes:  # re-written numbers may come out longer (1E2)
        return Rejected(model.req, model.id, RejectCode.BAD_PAYLOAD)
    return model.to_core(exact(body))  # the window keeps it


def _reads(data: str | bytes) -> bool:
    """Whether orjson reads `data`. Its own parser refuses NaN and ±Infinity (a literal and an
    overflowing number alike), and every other field of a publish that pydantic accepted is a
    string, an integer or a boolean: so a frame (or a batch) it reads holds no payload with
    either, a C-speed proof. Otherwise the walk of the payload (`payload_problem`) says."""
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True


def _deeper_than(value: Any, levels: int) -> bool:
    """Whether `value` nests arrays and objects more than `levels` deep (`[[1]]` is 2), in C.

    orjson's indented form puts each element of a container that is d levels deep on its own
    line, indented 2·d spaces, so a container `levels + 1` deep is a line indented exactly
    2·`levels` spaces that opens one (`[`, `{`, or `"key": [`). Strings cannot fool it: their
    newlines are escaped. One indented serialisation and a substring search decide almost
    every case; the regex runs only when some line is indented that far."""
    if type(value) is not dict and type(value) is not list:
        return False
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2)
    if b"\n" + b" " * (2 * levels) not in text:
        return False
    return _opening_at(levels).search(text) is not None


@functools.lru_cache(maxsize=8)
def _opening_at(levels: int) -> re.Pattern[bytes]:
    key = rb'(?:"[^"\\]*(?:\\.[^"\\]*)*": )?'
    return re.compile(rb"\n {%d}" % (2 * levels) + key + rb"[\[{]")


_SURROGATE = re.compile("[\ud800-\udfff]")


def payload_problem(value: Any, max_depth: int, *, strings: bool = True) -> str | None:
    """Why `value` (a parsed JSON value) cannot be carried, or None if it can.

    Iterative, so a deep value costs no Python stack. `strings=False` skips the surrogate check
    for values from pydantic's parser, which never produces a lone surrogate."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        t = type(v)
        if t is dict or t is list:
            if depth >= max_depth:
                return f"nested deeper than {max_depth} levels"
            if t is dict:
                if strings and any(_SURROGATE.search(k) for k in v):
                    return "a key holds a lone surrogate (not valid Unicode)"
                stack.extend((x, depth + 1) for x in v.values())
            else:
                stack.extend((x, depth + 1) for x in v)
        elif t is str:
            if strings and _SURROGATE.search(v):
                return "a string holds a lone surrogate (not valid Unicode)"
        elif t is int:
            if not I64_MIN <= v <= U64_MAX:  # (str() of a huge int may raise: not used)
                return f"an integer of {v.bit_length()} bits is outside 64 bits"
        elif t is float and not math.isfinite(v):
            return f"{v!r} is not a JSON number (NaN and Infinity are not JSON)"
    return None


# -- explaining a refused frame ----------------------------------------------------------------


def _usable_req(v: Any) -> ev.Req | None:
    """The frame's `req` if it can be echoed exactly as sent (else None)."""
    if type(v) is str:
        return v if len(v) <= MAX_REQ and not _SURROGATE.search(v) else None
    if type(v) is int:
        return v if I64_MIN <= v <= I64_MAX else None
    return None


def _describe(err: Any) -> str:
    loc = err["loc"][1:]  # the first is the frame type (the union's tag)
    where = ".".join(str(p) for p in loc) or "frame"
    if err["type"] == "extra_forbidden":
        return f"{where}: unknown field"
    if loc[:1] == ("req",):  # one message for the str | int union, not one per member
        return "req: must be a string of 1-256 characters or a 64-bit integer"
    return f"{where}: {err['msg']}"


def _explain(data: str | bytes, e: ValidationError, limits: Limits) -> Error | Rejected | Batch:
    errors = e.errors()
    if errors[0]["type"] == "json_invalid":
        return _salvage(data, errors[0]["msg"], limits)
    raw = pydantic_core.from_json(data)  # the same parser: it read this frame already
    if not isinstance(raw, dict):
        return Error(ErrorCode.BAD_FRAME, "a frame is a JSON object with a `type`")
    if raw.get("type") == "batch":
        return _split(raw, limits)
    return _refuse(raw, errors)


def _split(raw: dict[str, Any], limits: Limits) -> Batch | Error:
    """A batch the strict parser refused as a whole: each of its frames judged alone, as if it
    had been sent alone (one bad frame is answered for itself, the others are handled). Only a
    batch that is not a list of frames is refused whole."""
    unknown = sorted(k for k in raw if k not in ("type", "frames"))
    if unknown:
        return Error(ErrorCode.BAD_FRAME, _text(f"batch: {unknown[0][:64]}: unknown field"))
    frames = raw.get("frames")
    if type(frames) is not list or not 1 <= len(frames) <= MAX_BATCH_FRAMES:
        return Error(ErrorCode.BAD_FRAME,
                     f"batch: `frames` must be a list of 1 to {MAX_BATCH_FRAMES} frames")
    out: list[tuple[One, Callable[[], bytes]]] = []
    for f in frames:
        if isinstance(f, dict) and f.get("type") == "batch":
            one: One = Error(ErrorCode.BAD_FRAME, "a batch inside a batch",
                             _usable_req(f.get("req")))
            text = b"{}"
        else:
            # Python's encoder writes back what the lenient readers read (big integers, NaN,
            # a lone surrogate as its escape), so the frame is refused for what it held
            text = json.dumps(f).encode()
            one = parse_one(text, limits)
        out.append((one, functools.partial(bytes, text)))
    return Batch(out)


def _text(s: str) -> str:
    """Client text quoted in an error message, made carryable (a lone surrogate as `\\udXXX`)."""
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _refuse(raw: dict[str, Any], errors: list[Any]) -> Error:
    req = _usable_req(raw.get("req"))
    first = errors[0]
    if first["type"] == "union_tag_invalid":
        return Error(ErrorCode.UNKNOWN_TYPE,
                     _text(f"unknown frame type {str(raw.get('type'))[:64]!r}; "
                           f"expected one of {', '.join(CLIENT_TYPES)}"), req)
    if first["type"] == "union_tag_not_found":
        return Error(ErrorCode.BAD_FRAME, "missing `type`", req)
    problems = list(dict.fromkeys(_describe(err) for err in errors))[:5]
    return Error(ErrorCode.BAD_FRAME, _text(f"{raw.get('type')}: {'; '.join(problems)}"), req)


# -- the slow path: a frame pydantic's JSON parser refused ------------------------------------

#: lenient where the strict parser is not: NaN, Infinity, big integers, lone surrogates
_LENIENT = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")
#: strings and runs of brackets: enough to find where a too-deep value ends
_NESTING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{]+|[\]}]+', re.S)
#: no client frame has more members; more is not a frame worth reading on
_MAX_MEMBERS = 32
#: tokens of `_NESTING` read past a too-deep value before giving up on what follows it
_SKIP_BUDGET = 100_000


@dataclass(slots=True)
class _Salvaged:
    members: dict[str, Any]
    #: members whose value nests deeper than the lenient parser goes (~1,000 levels)
    deep: list[str]
    #: the whole text was one JSON object (else: read up to where it broke)
    complete: bool


def _salvage(data: str | bytes, reason: str, limits: Limits) -> Error | Rejected | Batch:
    """Say what is wrong with a frame the strict parser refused, and echo its `req` if a
    usable one can be read.

    The frame is read member by member with Python's lenient JSON decoder, so each member is
    judged on its own: a publish whose only fault is its payload is refused as a publish
    (`rejected`, `bad_payload`) when the rest of it is a valid publish; any other fault is a
    `bad_frame`. Costs are bounded: at most `_MAX_MEMBERS` members, `_SKIP_BUDGET` tokens."""
    reason = reason.removeprefix("Invalid JSON: ")
    try:
        text = data if isinstance(data, str) else data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return Error(ErrorCode.BAD_FRAME, "not valid JSON: not UTF-8")
    s = _read_members(text)
    if s is None:
        return Error(ErrorCode.BAD_FRAME, f"not valid JSON: {reason}")
    req = _usable_req(s.members.get("req"))
    depth = limits.max_payload_depth
    faults = {k: f"nested deeper than {depth} levels" for k in s.deep}
    for k, v in s.members.items():
        if (p := payload_problem(v, depth)) is not None:
            faults.setdefault(k, p)
    for k in s.members:
        if _SURROGATE.search(k):
            faults.setdefault("(a key)", "a key holds a lone surrogate (not valid Unicode)")
    kind = s.members.get("type")
    if kind == "batch":
        if s.complete and not s.deep:
            return _split(s.members, limits)
        return Error(ErrorCode.BAD_FRAME, _text(f"batch: not valid JSON: {reason}"))
    if set(faults) == {"payload"} and kind == "publish" and (s.complete or s.deep == ["payload"]):
        envelope = {k: v for k, v in s.members.items() if k != "payload"}
        try:
            model = _adapter.validate_json(orjson.dumps({**envelope, "payload": None}))
        except ValidationError as e:
            return _refuse(envelope, e.errors())
        return Rejected(model.req, model.id, RejectCode.BAD_PAYLOAD)
    if faults:
        what = "; ".join(f"{k[:64]}: {p}" for k, p in list(faults.items())[:5])
        where = kind[:64] if type(kind) is str else "frame"
        return Error(ErrorCode.BAD_FRAME, _text(f"{where}: {what}"), req)
    return Error(ErrorCode.BAD_FRAME, _text(f"not valid JSON: {reason}"), req)


def _read_members(text: str) -> _Salvaged | None:
    """The top-level members of a JSON object, as far as they can be read (None: the text does
    not start as an object)."""
    i = _WS.match(text).end()  # type: ignore[union-attr]
    if not text.startswith("{", i):
        return None
    s = _Salvaged({}, [], complete=False)
    i = _skip_ws(text, i + 1)
    if text.startswith("}", i):
        s.complete = not text[i + 1:].strip(" \t\n\r")
        return s
    while len(s.members) + len(s.deep) < _MAX_MEMBERS:
        if not text.startswith('"', i):
            return s
        try:
            key, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
        except ValueError:
            return s
        i = _skip_ws(text, i)
        if not text.startswith(":", i):
            return s
        i = _skip_ws(text, i + 1)
        try:
            s.members[key], i = _LENIENT.raw_decode(text, i)
        except RecursionError:
            s.deep.append(key)
            end = _skip_nested(text, i)
            if end is None:
                return s
            i = end
        except ValueError:
            return s
        i = _skip_ws(text, i)
        if text.startswith(",", i):
            i = _skip_ws(text, i + 1)
        elif text.startswith("}", i):
            s.complete = not text[i + 1:].strip(" \t\n\r")
            return s
        else:
            return s
    return s


def _skip_ws(text: str, i: int) -> int:
    return _WS.match(text, i).end()  # type: ignore[union-attr]


def _skip_nested(text: str, i: int) -> int | None:
    """The index just past the array or object starting at `i` (None if that is not found
    within the budget)."""
    depth = 0
    for n, m in enumerate(_NESTING.finditer(text, i)):
        if n >= _SKIP_BUDGET:
            return None
        tok = m.group()
        if tok[0] == '"':
            continue
        if tok[0] in "[{":
            depth += len(tok)
        elif len(tok) >= depth:
            return m.start() + depth
        else:
            depth -= len(tok)
    return None
