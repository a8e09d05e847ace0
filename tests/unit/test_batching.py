"""client_sdk/batching.py: frames into messages within the server's limits, in order."""

from __future__ import annotations

import itertools

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from client_sdk.batching import batch_limits, pack


def unpack(messages: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for m in messages:
        f = orjson.loads(m)
        if f.get("type") == "batch":
            out.extend(orjson.dumps(x) for x in f["frames"])
        else:
            out.append(m)
    return out


def test_a_server_that_says_nothing_or_too_little_gets_no_batch() -> None:
    assert batch_limits({}) == (1, 0)
    assert batch_limits({"max_frame_bytes": 1 << 20}) == (1, 0)  # an older server
    assert batch_limits({"max_frame_bytes": 1 << 20, "max_batch_frames": 1}) == (1, 0)
    assert batch_limits({"max_frame_bytes": 20, "max_batch_frames": 100}) == (1, 0)
    assert batch_limits({"max_frame_bytes": 4096, "max_batch_frames": True}) == (1, 0)
    assert batch_limits({"max_frame_bytes": 4096, "max_batch_frames": 1000}) == (1000, 4096)


def test_one_frame_or_no_batching_sends_the_frames_as_they_are() -> None:
    assert list(pack([b'{"type":"ping"}'], 1000, 4096)) == [b'{"type":"ping"}']
    frames = [b'{"type":"ping","req":%d}' % i for i in range(3)]
    assert list(pack(frames, 1, 0)) == frames


@settings(max_examples=300, deadline=None, database=None)
@given(sizes=st.lists(st.integers(0, 300), max_size=60), most=st.integers(2, 7),
       limit=st.integers(60, 1200))
def test_messages_keep_the_order_and_the_limits(sizes: list[int], most: int,
                                                limit: int) -> None:
    frames = [orjson.dumps({"type": "ping", "req": f"{i}" + "x" * n})
              for i, n in enumerate(sizes)]
    messages = list(pack(frames, most, limit))
    assert unpack(messages) == frames  # every frame once, in order
    for m in messages:
        f = orjson.loads(m)
        if f["type"] == "batch":
            assert 2 <= len(f["frames"]) <= most and len(m) <= limit
        else:  # alone: it could share with neither neighbour
            assert m in frames
    # as few messages as the limits allow, greedily: no two neighbours could have shared
    for m, n in itertools.pairwise(messages):
        k = len(orjson.loads(m)["frames"]) if m.startswith(b'{"type":"batch"') else 1
        first_of_n = unpack([n])[0]
        assert k == most or len(m) + len(first_of_n) + (1 if k > 1 else 29) > limit
