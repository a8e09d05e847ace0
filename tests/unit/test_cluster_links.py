"""The bytes and bookkeeping between cluster nodes (notify/cluster/linkwire.py, links.py):
batches decode to what was encoded, an edge batch is applied once per edge incarnation, and an
edge notices a lost owner batch."""

from __future__ import annotations

import pytest

from notify.cluster.links import DownlinkGaps, UplinkDedup
from notify.cluster.linkwire import (
    CLOSE,
    DATA,
    FRAME,
    OPEN,
    LinkError,
    decode_down,
    decode_up,
    encode_down,
    encode_up,
    identity_json,
    identity_of,
)
from notify.core.auth import Grants, Identity


def test_edge_batches_round_trip() -> None:
    entries = [(7, OPEN, b'{"member":"a"}'), (7, FRAME, b'{"type":"join","group":"g"}'),
               (9, FRAME, b""), (2**40, FRAME, "é".encode() * 1000)]
    header, back = decode_up(encode_up({"edge": "n1", "inc": "x", "seq": 3}, entries))
    assert header == {"edge": "n1", "inc": "x", "seq": 3}
    assert back == entries


def test_owner_batches_round_trip() -> None:
    entries = [(DATA, [1, 2, 3], b'{"type":"deliver"}'), (CLOSE, [4], b'{"code":4003}'),
               (DATA, [], b"")]
    header, back = decode_down(encode_down({"node": "n2", "inc": "y", "seq": 1}, entries))
    assert header["node"] == "n2" and back == entries


@pytest.mark.parametrize("payload", [b"", b"no header", b"[1]\n", b'{"a":1}\n\x01\x02'])
def test_a_batch_that_does_not_decode_is_an_error(payload: bytes) -> None:
    with pytest.raises(LinkError):
        decode_up(payload)
    with pytest.raises(LinkError):
        decode_down(payload)


def test_identity_crosses_whole() -> None:
    identity = Identity("alice", Grants.parse({"doc-*": ["join", "publish"], "x": ["*"]}), 99.5)
    assert identity_of(identity_json(identity)) == identity
    assert identity_of(identity_json(None)) is None


def test_an_edge_batch_is_applied_once_per_incarnation() -> None:
    dedup = UplinkDedup()
    assert dedup.fresh("n1", "a", 1) and dedup.fresh("n1", "a", 2)
    assert not dedup.fresh("n1", "a", 2)  # a retry of a batch already applied
    assert not dedup.fresh("n1", "a", 1)
    assert dedup.fresh("n1", "b", 1)  # the edge restarted: a new link
    assert dedup.fresh("n1", "a", 1)  # (the old incarnation's entry was dropped with it)
    dedup.forget("n1")
    assert dedup.fresh("n1", "a", 1)


def test_an_edge_sees_a_lost_owner_batch() -> None:
    gaps = DownlinkGaps()
    assert gaps.check("n2", "i1", 5)  # the first batch heard from an owner starts the link
    assert gaps.check("n2", "i1", 6)
    assert not gaps.check("n2", "i1", 8)  # 7 was lost
    assert gaps.check("n2", "i1", 9)
    assert gaps.check("n2", "i2", 1)  # the owner restarted
    assert gaps.check("n3", "i9", 40)
