"""The edge: every client frame parses to its core event; every bad one to a stable error (G12).

Strictness (DESIGN §3): `req` is a string or an integer, echoed as sent; a string is not a number,
`true`/`false` are the only booleans, an unknown field is refused by name. A publish payload
that cannot be carried (G12: 64-bit integers, valid Unicode, finite numbers, bounded nesting)
is refused as `rejected{bad_payload}` with its `req` and `id`, whatever parser saw it first.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notify.core import events as ev
from notify.core.actions import Deliver, Error, Message, Rejected, ViewInstall
from notify.core.config import Limits
from notify.core.errors import ErrorCode, RejectCode
from notify.runtime.frames import batch, dumps
from notify.wire import _deeper_than, parse, payload_problem


def plain(payload: Any) -> Any:
    """A payload the edge carries as an `orjson.Fragment`, as a plain value again."""
    return orjson.loads(orjson.dumps(payload))


def publish(payload: str, req: str = '"r1"', **extra: Any) -> str:
    more = "".join(f',"{k}":{orjson.dumps(v).decode()}' for k, v in extra.items())
    return (f'{{"type":"publish","req":{req},"group":"g","id":"x","view":2{more},'
            f'"payload":{payload}}}')


def test_publish_parses_to_core_event_with_the_payload_serialised_once() -> None:
    f = parse(b'{"type":"publish","req":"1","group":"g","id":"x","view":3,"order":"total",'
              b'"atomic":true,"same_view":true,"payload":{"a":[1,2],"b":null}}')
    assert isinstance(f, ev.Publish)
    assert isinstance(f.payload, orjson.Fragment)
    assert orjson.dumps(f.payload) == b'{"a":[1,2],"b":null}'
    assert f == ev.Publish("1", "g", "x", 3, ev.Order.TOTAL, f.payload, True, True, size=20)


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
    m = Message("g", 4, "total", 2, "a", 1, False, orjson.Fragment(b'{"x":1}'), 1.5, "id")
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


# -- req: a string or an integer, echoed as sent --------------------------------------------------


def test_integer_req_is_accepted_and_passed_through() -> None:
    f = parse('{"type":"join","req":7,"group":"g"}')
    assert f == ev.Join(7, "g")
    f = parse(publish("1", req="-9223372036854775808"))
    assert isinstance(f, ev.Publish) and f.req == -(2**63)


@pytest.mark.parametrize(
    ("data", "req"),
    [
        ('{"type":"publish","req":7,"group":"g"}', 7),  # the review's case: was req null
        ('{"type":"leave","req":0}', 0),
        ('{"type":"join","req":"r","group":"g","wantState":true}', "r"),
        ('{"type":"frobnicate","req":-3}', -3),
    ],
)
def test_errors_echo_an_integer_req(data: str, req: int | str) -> None:
    f = parse(data)
    assert isinstance(f, Error) and f.req == req and type(f.req) is type(req)
    assert orjson.loads(dumps(f))["req"] == req


@pytest.mark.parametrize("req", ["true", "7.0", "1e3", "9223372036854775808", "null", "[1]",
                                 '"' + "r" * 257 + '"', '"\\udc00"'])
def test_a_req_of_another_type_is_refused_and_not_echoed(req: str) -> None:
    f = parse(publish("1", req=req))
    assert isinstance(f, Error) and f.code == ErrorCode.BAD_FRAME
    assert f.req is None
    assert "req" in f.message


# -- strict types, unknown fields -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (publish("1", view="3").replace('"view":2,', ""), "view"),
        ('{"type":"publish","req":"r1","group":"g","id":"x","view":1.0,"payload":1}', "view"),
        ('{"type":"publish","req":"r1","group":"g","id":"x","view":1e3,"payload":1}', "view"),
        (publish("1", atomic="yes"), "atomic"),
        (publish("1", atomic=1), "atomic"),
        (publish("1", same_view="off"), "same_view"),
        ('{"type":"ack","group":"g","offsets":[1.0,"2"]}', "offsets.0"),
        ('{"type":"hello","protocol":true}', "protocol"),
        ('{"type":"flush_ok","group":"g","view":-5}', "view"),
        ('{"type":"join","req":"r1","group":"g","want_state":"true"}', "want_state"),
        ('{"type":"join","req":"r1","group":"g","resume":{"epoch":"1","offset":0}}',
         "resume.epoch"),
        ('{"type":"state_chunk","group":"g","transfer":"t","index":"0","last":true,'
         '"data":""}', "index"),
        ('{"type":"ack","group":"g","offsets":[18446744073709551615]}', "offsets.0"),
    ],
)
def test_types_are_strict(data: str, field: str) -> None:
    f = parse(data)
    assert isinstance(f, Error) and f.code == ErrorCode.BAD_FRAME, f
    assert f" {field}: " in f.message or f.message.startswith(f"{field}: "), f.message


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (publish("1", sameView=True), "sameView"),  # would have turned G6 off silently
        (publish("1", extra="ignored"), "extra"),
        ('{"type":"join","req":"r1","group":"g","wantState":true}', "wantState"),
        ('{"type":"join","req":"r1","group":"g","acceptFrom":"any"}', "acceptFrom"),
        ('{"type":"join","req":"r1","group":"g","resume":{"epoch":1,"offset":0,"seq":{}}}',
         "resume.seq"),
        ('{"type":"checkpoint","req":"r1","group":"g","index":0,"last":true,"data":"",'
         '"position":{"epoch":1,"offset":0,"stream":{}}}', "position.stream"),
        ('{"type":"hello","protocol":1,"member":"m","resume":"s"}', "resume"),
        ('{"type":"ack","group":"g","offsets":[1],"req":"r1"}', "req"),
    ],
)
def test_unknown_fields_are_refused_by_name(data: str, field: str) -> None:
    f = parse(data)
    assert isinstance(f, Error) and f.code == ErrorCode.BAD_FRAME, f
    assert f"{field}: unknown field" in f.message, f.message


def test_publish_without_payload_is_refused() -> None:
    f = parse('{"type":"publish","req":"r1","group":"g","id":"x","view":2}')
    assert isinstance(f, Error) and f.req == "r1" and "payload" in f.message
    ok = parse(publish("null"))
    assert isinstance(ok, ev.Publish) and plain(ok.payload) is None


# -- the payload: what JSON allows and the server cannot carry (G12) ------------------------------

DEEP = 10_000


@pytest.mark.parametrize(
    "payload",
    [
        '{"amount":100000000000000000000}',  # JSON.stringify({amount: 1e20})
        "18446744073709551616",  # 2**64
        "-9223372036854775809",  # -2**63 - 1
        "[" + "9" * 400 + "]",
        '{"x":NaN}',
        "[Infinity]",
        "-Infinity",
        "1e400",  # overflows to Infinity
        '{"a":null,"b":-1E309}',
        '"\\ud800"',  # JSON.stringify of a split emoji
        '{"\\udfff":1}',
        '["ok","\\ud83d"]',
        "[" * 65 + "]" * 65,  # just over Limits.max_payload_depth
        "[" * 150 + "]" * 150,  # under pydantic's own limit
        "[" * 500 + "]" * 500,  # over it, under Python's
        "[" * DEEP + "]" * DEEP,  # over both
        '{"a":' * DEEP + "1" + "}" * DEEP,
    ],
    ids=lambda p: p[:24],
)
def test_uncarryable_payload_is_rejected_bad_payload_with_req_and_id(payload: str) -> None:
    for req, want in (('"r1"', "r1"), ("42", 42)):
        f = parse(publish(payload, req=req))
        assert f == Rejected(want, "x", RejectCode.BAD_PAYLOAD), f
        assert orjson.loads(dumps(f)) == {"type": "rejected", "req": want, "id": "x",
                                          "code": "bad_payload"}


@pytest.mark.parametrize(
    "payload",
    ["18446744073709551615", "-9223372036854775808", "1e308", '"\\ud83d\\ude00"',
     '{"a":null,"b":[null]}', "[" * 64 + "]" * 64, '"' + "[" * 100 + '"', "1E2"],
    ids=lambda p: p[:24],
)
def test_carryable_edge_cases_are_accepted(payload: str) -> None:
    f = parse(publish(payload))
    assert isinstance(f, ev.Publish), f
    assert plain(f.payload) == orjson.loads(payload)


def test_payload_bytes_are_the_ones_delivered() -> None:
    """The edge's bytes travel as they are: a `deliver` embeds them, nothing re-encodes them."""
    f = parse(publish('{"b": 1, "a": [1.5, "é"]}'))
    assert isinstance(f, ev.Publish)
    m = Message("g", 1, "fifo:a", 1, "a", 2, False, f.payload, 1.0, "x")
    body = orjson.dumps(f.payload)
    assert body in dumps(Deliver.of(m))
    assert orjson.loads(dumps(Deliver.of(m)))["payload"] == {"b": 1, "a": [1.5, "é"]}


def test_deep_payload_before_the_other_fields_still_finds_req() -> None:
    data = ('{"payload":' + "[" * DEEP + "]" * DEEP
            + ',"type":"publish","req":7,"group":"g","id":"x","view":2}')
    assert parse(data) == Rejected(7, "x", RejectCode.BAD_PAYLOAD)


def test_depth_limit_is_configurable() -> None:
    shallow = Limits(max_payload_depth=2)
    assert isinstance(parse(publish("[[1]]"), shallow), ev.Publish)
    assert isinstance(parse(publish("[[[1]]]"), shallow), Rejected)
    assert isinstance(parse(publish('{"a":{"b":{}}}'), shallow), Rejected)


@pytest.mark.parametrize(
    ("data", "req", "words"),
    [
        # the bad value is outside the payload: a bad frame, not a bad payload
        ('{"type":"publish","req":"r1","group":"\\udc00","id":"x","view":1,"payload":1}', "r1",
         "group: a string holds a lone surrogate"),
        ('{"type":"join","req":"r2","group":"g","resume":{"epoch":1,"offset":NaN}}', "r2",
         "resume"),
        ('{"type":"publish","req":"r3","group":"g","id":"x","view":NaN,"payload":1}', "r3",
         "view"),
        # the payload is bad, but so is the rest: the rest is what is reported
        ('{"type":"publish","req":"r4","group":"g","id":"x","payload":' + "[" * DEEP
         + "]" * DEEP + "}", "r4", "view: Field required"),
        ('{"type":"publish","req":"r5","group":"g","id":"x","view":1,"payload":"\\ud800",'
         '"sameView":true}', "r5", "sameView: unknown field"),
        ('{"type":"leave","req":"r6","group":"g","x":"\\ud800"}', "r6",
         "x: a string holds a lone surrogate"),
        # broken JSON: whatever req was read before the break is echoed
        ('{"type":"publish","req":"r7","group":', "r7", "not valid JSON"),
        ('{"req":"r8","type":"join",,}', "r8", "not valid JSON"),
    ],
)
def test_frames_the_strict_parser_refuses_are_explained_with_req(
        data: str, req: str, words: str) -> None:
    f = parse(data)
    assert isinstance(f, Error) and f.code == ErrorCode.BAD_FRAME, f
    assert f.req == req
    assert words in f.message, f.message
    orjson.dumps(f)  # the error itself is always carryable


def test_invalid_utf8_is_not_json() -> None:
    f = parse(b'{"type":"publish","req":"r1","group":"g","id":"x","view":2,"payload":"\xff"}')
    assert isinstance(f, Error) and f.code == ErrorCode.BAD_FRAME and f.req is None
    # UTF-8-encoded surrogates (CESU-style) in a binary frame are a lone surrogate
    f2 = parse(b'{"type":"publish","req":"r1","group":"g","id":"x","view":2,'
               b'"payload":"\xed\xa0\x80"}')
    assert f2 == Rejected("r1", "x", RejectCode.BAD_PAYLOAD)


def test_payload_problem_names_the_fault() -> None:
    assert payload_problem({"a": [1, "b", None, 1.5]}, 64) is None
    assert "67 bits is outside 64 bits" in (payload_problem([10**20], 64) or "")
    assert "surrogate" in (payload_problem(["\ud800"], 64) or "")
    assert "NaN" in (payload_problem({"x": float("nan")}, 64) or "")
    assert "deeper than 3" in (payload_problem([[[[1]]]], 3) or "")
    assert payload_problem([[[1]]], 3) is None


_trees = st.recursive(
    st.none() | st.integers(-(2**63), 2**63 - 1)
    | st.sampled_from(["", "a", '"[{', "\\", "\n  [", ": {"]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["k", '"', "\\", ": [", "\n"]), inner, max_size=3),
    max_leaves=25)


@settings(max_examples=300, deadline=None, database=None)
@given(tree=_trees, levels=st.integers(1, 8))
def test_the_fast_depth_check_agrees_with_the_walk(tree: Any, levels: int) -> None:
    walked = payload_problem(tree, levels) is not None
    assert _deeper_than(tree, levels) == walked


def test_a_parsed_payload_costs_its_size_not_orjsons_buffer() -> None:
    """The in-memory window keeps each publish's body: orjson's own output keeps its whole
    write buffer (8 KiB for a 1 KiB payload), which made a loaded group cost 8x its window."""
    frames = [orjson.dumps({"type": "publish", "req": i, "group": "g", "id": f"p{i}", "view": 1,
                            "payload": {"text": "x" * 1000, "n": i}}) for i in range(300)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [parse(f) for f in frames]
        per_frame = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()
    assert all(isinstance(k, ev.Publish) for k in kept)
    assert per_frame < 2_000, f"{per_frame:.0f} bytes kept per 1 KiB publish"


def test_an_encoded_frame_costs_its_size_while_it_waits_in_an_outbox() -> None:
    """Outbox bounds count a frame's length: the bytes must not hold orjson's 8x buffer."""
    msgs = [Message("g", i, "fifo:a", i, "a", 1, False, {"text": "x" * 1000}, 0.0, f"p{i}")
            for i in range(1, 301)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        frames = [dumps(Deliver.of(m)) for m in msgs]
        per_frame = (tracemalloc.get_traced_memory()[0] - before) / len(frames)
    finally:
        tracemalloc.stop()
    assert per_frame < 1.5 * len(frames[0]), f"{per_frame:.0f} bytes kept per frame"


def test_the_sdk_keeps_an_unanswered_publish_at_its_size() -> None:
    """The Python SDK keeps each publish's payload until it is answered (and resends it after
    a reconnect): 1,000 pending publishes of 1 KiB are 1 MB, not orjson's 8."""
    from types import SimpleNamespace

    from client_sdk.group import Group
    host = SimpleNamespace(name="g")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [Group._encode(host, {"text": "x" * 1000, "n": i}, "fifo")  # type: ignore[arg-type]
                for i in range(300)]
        per_payload = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()
    assert per_payload < 1.5 * len(kept[0]), f"{per_payload:.0f} bytes kept per payload"


def test_a_batch_reads_its_text_once_for_every_payload_that_may_hold_nan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A payload with a `null` may have been a NaN: the proof that none is (orjson reading the
    text) is asked once per batch, not once per frame (a 1 MiB batch of 1,000 such frames would
    be read 1,000 times: a client's one message costing the server seconds)."""
    import notify.wire as wire

    calls: list[int] = []
    reads = wire._reads

    def counted(data: str | bytes) -> bool:
        calls.append(len(data))
        return reads(data)

    monkeypatch.setattr(wire, "_reads", counted)
    frames = [f'{{"type":"publish","req":{i},"group":"g","id":"p{i}","view":1,'
              f'"payload":{{"x":null}}}}' for i in range(200)]
    frames[150] = frames[150].replace("null", "NaN")
    parsed = wire.parse_any('{"type":"batch","frames":[' + ",".join(frames) + "]}")
    assert isinstance(parsed, wire.Batch)
    kinds = [type(one).__name__ for one, _ in parsed.frames]
    assert kinds == ["Publish"] * 150 + ["Rejected"] + ["Publish"] * 49
    assert len(calls) == 1
