"""state_transfer's pure pieces: the position rule, the donor relay, checkpoint uploads (G9)."""

from __future__ import annotations

from state_transfer.position import includes
from state_transfer.relay import Ask, Forward, NoDonor, Refused, Relay, Transfer
from state_transfer.uploads import BadChunk, Upload, Uploads


def test_a_position_includes_what_its_offset_or_its_stream_covers() -> None:
    streams = {"total": 7, "fifo:a": 3}
    assert includes(10, streams, 10, "fifo:b", 99)  # at or below the offset
    assert includes(10, streams, 15, "total", 7)  # beyond it, but delivered in its stream
    assert not includes(10, streams, 15, "total", 8)
    assert not includes(10, streams, 11, "fifo:b", 1)  # a stream it never got


def transfer(joiner: str = "j") -> Transfer:
    return Transfer(f"5.{joiner}.0", joiner, "", 40, 100.0)


def test_the_donor_is_the_first_candidate_neither_joiner_nor_waiting_for_state() -> None:
    r = Relay(max_bytes=1000, stall_timeout=5.0)
    first = r.start(transfer("j1"), ["j1", "a", "b"])
    assert isinstance(first, Ask) and first.transfer.donor == "a"
    second = r.start(transfer("j2"), ["j1", "a"])  # j1 waits for its own snapshot
    assert isinstance(second, Ask) and second.transfer.donor == "a"
    assert isinstance(r.start(transfer("j3"), ["j1", "j3"]), NoDonor)


def test_a_lost_or_stalled_donor_is_replaced_by_another_and_a_lost_joiner_forgotten() -> None:
    r = Relay(max_bytes=1000, stall_timeout=5.0)
    r.start(transfer("j"), ["a", "b"])
    (d,) = r.lost("a", 101.0, ["a", "b"])
    assert isinstance(d, Ask) and d.transfer.donor == "b" and d.transfer.id == "5.j.1"
    assert r.stalled(105.9, ["a", "b"]) == []
    (d,) = r.stalled(106.0, ["a", "b"])  # b sent nothing for 5 s; a is back
    assert isinstance(d, Ask) and d.transfer.donor == "a" and d.transfer.id == "5.j.2"
    assert r.lost("j", 107.0, ["a", "b"]) == [] and len(r) == 0


def test_chunks_are_relayed_in_order_within_the_size_limit() -> None:
    r = Relay(max_bytes=100, stall_timeout=5.0)
    t = r.start(transfer(), ["a"]).transfer
    assert isinstance(r.chunk("b", t.id, 0, 10, False, 101.0), Refused)  # not its donor
    bad = r.chunk("a", t.id, 1, 10, False, 101.0)
    assert isinstance(bad, Refused) and bad.code == "bad_chunk" and bad.transfer is None
    ok = r.chunk("a", t.id, 0, 60, False, 101.0)
    assert isinstance(ok, Forward) and not ok.done and t.progress == 101.0
    over = r.chunk("a", t.id, 1, 60, True, 102.0)
    assert isinstance(over, Refused) and over.code == "state_too_large" and over.transfer is t
    assert len(r) == 0


def test_a_last_chunk_ends_the_transfer() -> None:
    r = Relay(max_bytes=100, stall_timeout=5.0)
    t = r.start(transfer(), ["a"]).transfer
    done = r.chunk("a", t.id, 0, 10, True, 101.0)
    assert isinstance(done, Forward) and done.done and len(r) == 0


def test_uploads_restart_at_zero_and_refuse_gaps_and_excess() -> None:
    u = Uploads(max_bytes=100)
    replaced, up = u.chunk("a", "r1", 0, 40)
    assert replaced is None and isinstance(up, Upload) and up.id == "a.1"
    replaced, again = u.chunk("a", "r2", 0, 40)  # a new upload replaces the unfinished one
    assert replaced is up and isinstance(again, Upload) and again.id == "a.2"
    _, gap = u.chunk("a", "r2", 2, 10)
    assert isinstance(gap, BadChunk) and gap.code == "bad_chunk" and gap.dropped is again
    u.chunk("a", "r3", 0, 60)
    _, over = u.chunk("a", "r3", 1, 60)
    assert isinstance(over, BadChunk) and over.code == "state_too_large" and len(u) == 0
