"""The protocol cases both SDKs replay (tests/fixtures/protocol_cases.json, its format in
tests/fixtures/README.md), through `client_sdk`'s sans-I/O protocol: the frames it sends, the
events it hands over and what its requests come to, so the two SDKs cannot drift apart."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from client_sdk.errors import GroupLeftError, NotifyError, PublishRejected, ServerRefused
from client_sdk.events import GroupEvent, ViewChanging, ViewInstalled
from client_sdk.options import PublishResult
from client_sdk.protocol import ClientProtocol, Frame
from client_sdk.requests import Answer, JoinedAfresh, RequestOutput, RetryJoin, StrayError
from state_transfer.codec import Chunk

CASES_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "protocol_cases.json"
CASES: list[dict[str, Any]] = json.loads(CASES_FILE.read_text())

#: in an expected value, this string matches any value
ANY = "$any"

#: keys derived from an event's fields, compared only where a case names them (cases written
#: before them leave them out): the transitional set of a view event
DERIVED = {"view_installed": {"transitional"}, "view_changing": {"transitional"}}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def event_json(e: GroupEvent) -> dict[str, Any]:
    """{"type": "message" | "view_installed" | ..., every field of the event}."""
    fields = {f.name: _plain(getattr(e, f.name)) for f in dataclasses.fields(e)}
    if isinstance(e, ViewInstalled | ViewChanging):
        fields["transitional"] = list(e.transitional)  # a property, derived (DERIVED)
    return {"type": _snake(type(e).__name__), **fields}


def error_code(e: NotifyError) -> str:
    if isinstance(e, ServerRefused | PublishRejected):
        return e.code
    if isinstance(e, GroupLeftError):
        return "left"
    return "failed"


def answer_json(a: RequestOutput) -> dict[str, Any]:
    if isinstance(a, Answer):
        out: dict[str, Any] = {"type": "answer", "request": str(a.kind), "key": a.key}
        if a.error is not None:
            out["error"] = error_code(a.error)
        elif isinstance(a.value, PublishResult):
            out["result"] = dataclasses.asdict(a.value)
        elif a.value is None:
            out["result"] = None
        else:
            out["result"] = event_json(a.value)
        return out
    if isinstance(a, RetryJoin):
        return {"type": "retry_join", "group": a.group, "req": a.req, "attempt": a.attempt}
    if isinstance(a, JoinedAfresh):
        return {"type": "joined_afresh", "group": a.group, "code": a.code,
                "want_state": a.want_state}
    assert isinstance(a, StrayError)
    return {"type": "stray_error", "code": a.error.code, "req": a.error.req}


def _join(p: ClientProtocol, s: dict[str, Any]) -> None:
    p.open_join(s["group"], req=s.get("req"), accept_from=s.get("accept_from", "members"),
                want_state=s.get("want_state", False), resume_from=s.get("resume_from"),
                state_provider=s.get("state_provider", False))


def _leave(p: ClientProtocol, s: dict[str, Any]) -> None:
    p.open_leave(s["group"], req=s.get("req"))


def _publish(p: ClientProtocol, s: dict[str, Any]) -> None:
    p.open_publish(s["group"], s["id"], s.get("payload"), order=s.get("order", "fifo"),
                   atomic=s.get("atomic", False), same_view=s.get("same_view", False),
                   req=s.get("req"))


def _rejoin_all(p: ClientProtocol, s: dict[str, Any]) -> None:
    reqs = iter(s["reqs"]) if "reqs" in s else None
    p.rejoin_all(reqs.__next__ if reqs is not None else None)


def _hello(p: ClientProtocol, s: dict[str, Any]) -> Frame:
    return p.hello(s.get("resume", False), token=s.get("token"))


def _connection_lost(p: ClientProtocol, s: dict[str, Any]) -> None:
    p.connection_lost()


def _refresh(p: ClientProtocol, s: dict[str, Any]) -> None:
    p.open_refresh(s["token"])


def _checkpoint(p: ClientProtocol, s: dict[str, Any]) -> None:
    p.open_checkpoint(s["group"], [Chunk(**c) for c in s["chunks"]], s["position"],
                      req=s.get("req"))


def _forget_leave(p: ClientProtocol, s: dict[str, Any]) -> None:
    p.forget_leave(s["group"], s["req"])


def _take_instance(p: ClientProtocol, s: dict[str, Any]) -> None:
    p.take_instance(s["instance"])


CALLS: dict[str, Callable[[ClientProtocol, dict[str, Any]], Frame | None]] = {
    "hello": _hello,
    "join": _join,
    "leave": _leave,
    "publish": _publish,
    "rejoin_all": _rejoin_all,
    "connection_lost": _connection_lost,
    "refresh": _refresh,
    "checkpoint": _checkpoint,
    "forget_leave": _forget_leave,
    "take_instance": _take_instance,
}


def matches(got: Any, want: Any) -> bool:
    if want == ANY:
        return True
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return False
        unnamed = DERIVED.get(str(want.get("type")), set()) - want.keys()
        return got.keys() - unnamed == want.keys() and all(
            matches(got[k], v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(
            matches(g, w) for g, w in zip(got, want, strict=True))
    return bool(type(got) is type(want) and got == want)


def replay(case: dict[str, Any]) -> dict[str, Any]:
    """Run a case's steps; what came out of the protocol, as JSON."""
    p = ClientProtocol(case.get("member", "a"), case.get("instance"))
    out: dict[str, Any] = {"frames": [], "events": [], "answers": []}
    # A host writes nothing from `connection_lost` until the step after the next `hello` (a
    # reconnect: the hello, then `rejoin_all`, then what waited).
    connected = True
    for step in case["steps"]:
        call = step.get("call")
        if call is None:
            events, _ = p.receive(step["receive"])
            out["events"].extend(event_json(e) for e in events)
        else:
            frame = CALLS[call](p, step)
            if frame is not None:
                out["frames"].append(frame)
            if call == "connection_lost":
                connected = False
            elif call == "hello":
                connected = True
                continue
        if connected:
            out["frames"].extend(p.data_to_send())
        out["answers"].extend(answer_json(a) for a in p.answers())
    # what still waits at the end, by kind (all zeros: nothing is left to time out)
    out["waiting"] = {str(k): n for k, n in p.requests.waiting().items()}
    return out


def test_the_cases_cover_what_both_sdks_must_agree_on() -> None:
    names = {c["name"] for c in CASES}
    assert len(names) == len(CASES), "case names are unique"
    calls = {s["call"] for c in CASES for s in c["steps"] if "call" in s}
    assert calls <= CALLS.keys()
    assert {"hello", "join", "publish", "rejoin_all", "connection_lost"} <= calls


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_protocol_case(case: dict[str, Any]) -> None:
    got = replay(case)
    for key, want in case["expect"].items():
        assert key in got, f"unknown expectation {key!r}"
        assert matches(got[key], want), (
            f"{case['name']}: {key}\n got: {json.dumps(got[key], indent=1)}\n"
            f"want: {json.dumps(want, indent=1)}")
