"""G9 without a donor: the group's stored checkpoint, completed from the log, over real sockets.

A member publishes a checkpoint (`Group.checkpoint()`); a joiner that no member can serve (the
group is empty, or the donor died with nobody to replace it) gets that snapshot plus the messages
between it and the view boundary, and must end up equal to the members that lived through them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import zlib
from pathlib import Path
from typing import Any

import pytest

from client_sdk import Group, Message, StateReceived
from notify.core.config import Limits
from notify.storage.sqlite import SqliteLog
from tests.integration.conftest import (
    TIMEOUT,
    MakeServer,
    OpenRaw,
    Replica,
    apply_until,
    until_state,
)
from tests.integration.proxy import FaultyProxy
from tests.integration.test_durability import ServerProcess, _free_port


async def apply_n(group: Group, replica: Replica, n: int) -> None:
    """The application loop, for `n` messages."""
    while n:
        e = await group.next_event(TIMEOUT)
        if isinstance(e, Message):
            replica.items.append(e.payload)
            n -= 1


async def state_then(group: Group, replica: Replica, last: str) -> tuple[StateReceived, list[Any]]:
    """A joiner's application: wait for the state, then apply messages up to `last`."""
    received = await until_state(group)
    return received, await apply_until(group, replica, last)


def total_part(items: list[Any]) -> list[Any]:
    return [p for p in items if p.startswith("t")]


async def test_G9_empty_group_serves_its_checkpoint_completed_from_the_log(
        make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server()
    a, b = await sdk(srv.url, "a"), await sdk(srv.url, "b")
    ra, rb = Replica(), Replica()
    ga, gb = await a.join("g", state=ra), await b.join("g", state=rb)
    # total-order messages start with "t", FIFO ones with "f"
    names = [f"{'t' if i % 3 else 'f'}{i}" for i in range(20)]
    for i, name in enumerate(names[:10]):
        await (ga if i % 2 else gb).publish(name, order="total" if name[0] == "t" else "fifo")
    await apply_n(ga, ra, 10)
    snapshot_then = ra.snapshot()
    stored = await ga.checkpoint()
    assert stored.bytes > 0
    for i, name in enumerate(names[10:]):
        await (ga if i % 2 else gb).publish(name, order="total" if name[0] == "t" else "fifo")
    await apply_n(ga, ra, 10)
    await apply_n(gb, rb, 20)
    await ga.leave()
    await gb.leave()

    c = await sdk(srv.url, "c")
    rc = Replica()
    gc = await c.join("g", want_state=True, state=rc)
    await gc.publish("z-later")  # a message of the new view, after the state
    received, events = await state_then(gc, rc, "z-later")

    assert received.snapshot == snapshot_then and rc.restored == 1  # the checkpoint itself
    completion = [e for e in events if isinstance(e, Message)][:-1]
    assert gc.view is not None and all(m.view < gc.view.version for m in completion)
    # snapshot + completion + the new view's message = what the members lived through, once
    assert sorted(rc.items[:-1]) == sorted(ra.items) and rc.items[-1] == "z-later"
    assert total_part(rc.items) == total_part(ra.items) == total_part(rb.items)  # G4
    assert len(rc.items) == len(set(rc.items)) == 21


async def test_G9_donor_killed_mid_transfer_with_nobody_to_replace_it_uses_the_checkpoint(
        make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server(suspect_timeout=5.0)
    proxy = await FaultyProxy(srv.port).start()
    try:
        a = await sdk(proxy.url, "a")  # the only member, on a link that will be cut
        ra = Replica(ballast=1_500_000)
        ga = await a.join("g", state=ra)
        await ga.publish("f0")
        await apply_n(ga, ra, 1)
        ballast = hashlib.sha256(ra.ballast).digest()
        await ga.checkpoint()
        for name in ("f1", "f2"):
            await ga.publish(name)
        await apply_n(ga, ra, 2)
        app_a = asyncio.get_running_loop().create_task(apply_until(ga, ra, "never"))
        proxy.delay = 0.05  # a's snapshot trickles out
        c = await sdk(srv.url, "c")
        rc = Replica()
        gc = await c.join("g", want_state=True, state=rc)
        await gc.publish("c1")  # live at the joiner before the checkpoint's completion
        await asyncio.sleep(0.3)
        proxy.block()
        proxy.cut()  # the donor is gone mid-transfer, and no member can take over
        received, _ = await state_then(gc, rc, "c1")
        app_a.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await app_a
    finally:
        await proxy.close()
    assert received.snapshot is not None and rc.restored == 1
    assert rc.items == ["f0", "f1", "f2", "c1"]
    assert hashlib.sha256(rc.ballast).digest() == ballast


async def test_G9_checkpoint_survives_SIGKILL(tmp_path: Path, sdk: Any) -> None:
    server = ServerProcess(tmp_path / "data", _free_port())
    server.start()
    try:
        a = await sdk(server.url, "a")
        ra = Replica()
        ga = await a.join("g", state=ra)
        for i in range(5):
            await ga.publish(f"f{i}")
        await apply_n(ga, ra, 5)
        await ga.checkpoint()
        for i in range(5, 8):
            await ga.publish(f"f{i}")  # `published`: durable, so the completion has them
        server.kill()
        await a.close()
        server.start()
        c = await sdk(server.url, "c")
        rc = Replica()
        gc = await c.join("g", want_state=True, state=rc)  # no member survived the crash
        await gc.publish("c-after")
        received, _ = await state_then(gc, rc, "c-after")
        assert received.snapshot is not None
        assert rc.items == [f"f{i}" for i in range(8)] + ["c-after"]
        await c.close()  # before the server's graceful stop, which would wait for it
    finally:
        server.stop()


async def test_G9_checkpoint_restored_by_an_in_process_restart_on_sqlite(
        make_server: MakeServer, sdk: Any, tmp_path: Path) -> None:
    """The stored checkpoint's record (position, sha256, chunk count) comes back with the log."""
    db = tmp_path / "log.db"
    srv = await make_server(store=SqliteLog(db))
    a = await sdk(srv.url, "a")
    ra = Replica(ballast=600_000)  # several chunks
    ga = await a.join("g", state=ra)
    await ga.publish("f0")
    await apply_n(ga, ra, 1)
    await ga.checkpoint()
    await a.close()
    await srv.stop()
    log = SqliteLog(db)
    try:
        (sg,) = log.load(recent=100)
        assert sg.checkpoint is not None and sg.checkpoint.member == a.member
        assert sg.checkpoint.chunks >= 3
        assert sg.checkpoint.position.streams == {f"fifo:{a.member}": 1}
        chunks = list(log.checkpoint_chunks("g", sg.checkpoint.id))
        assert len(chunks) == sg.checkpoint.chunks
        packed = b"".join(base64.b64decode(c) for c in chunks)
        assert zlib.decompress(packed) == ra.snapshot()
    finally:
        await log.close()


async def test_G9_checkpoint_whose_gap_left_retention_is_not_served(
        make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server(limits=Limits(retain_messages=5))
    a = await sdk(srv.url, "a")
    ra = Replica()
    ga = await a.join("g", state=ra)
    await ga.publish("f0")
    await apply_n(ga, ra, 1)
    await ga.checkpoint()
    for i in range(1, 12):  # f1.. were never in the checkpoint, and f1..f6 are deleted
        await ga.publish(f"f{i}")
    await apply_n(ga, ra, 11)
    await ga.leave()
    c = await sdk(srv.url, "c")
    rc = Replica()
    gc = await c.join("g", want_state=True, state=rc)
    e = await until_state(gc)
    assert e.snapshot is None and e.reason == "state_unavailable" and rc.restored == 0


def _chunk(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data)).decode()


async def test_bad_checkpoints_get_clear_errors_and_never_replace_the_good_one(
        make_server: MakeServer, sdk: Any, open_raw: OpenRaw) -> None:
    srv = await make_server(limits=Limits(max_state_bytes=200_000))
    outsider = await open_raw(srv, "x")
    good = b'{"items": ["f1"], "ballast": ""}'
    frame = {"type": "checkpoint", "req": "k0", "group": "g", "index": 0, "last": True,
             "data": _chunk(good), "sha256": hashlib.sha256(good).hexdigest()}

    m = await open_raw(srv, "m")
    install = await m.join("g")
    m.auto_flush = True
    await outsider.send({**frame, "position": {"epoch": install["epoch"], "offset": 0}})
    assert (await outsider.expect("error"))["code"] == "not_member"
    await m.send({"type": "publish", "req": "p", "group": "g", "id": "1", "view": 1,
                  "payload": "f1"})
    await m.expect("published")
    epoch = install["epoch"]
    pos = {"epoch": epoch, "offset": 0, "streams": {"fifo:m": 1}}

    async def refused(f: dict[str, Any]) -> str:
        await m.send(f)
        err = await m.expect(lambda x: x["type"] == "error" and x.get("req") == f["req"])
        return str(err["code"])

    assert await refused({**frame, "req": "k1", "index": 1, "position": pos}) == "bad_chunk"
    assert await refused({**frame, "req": "k2", "position": {**pos, "epoch": epoch + 1}}) == \
        "bad_checkpoint"
    assert await refused({**frame, "req": "k3", "position": {**pos, "offset": 99}}) == \
        "bad_checkpoint"
    assert await refused({**frame, "req": "k4", "position": {**pos, "streams": {"total": 1}}}) \
        == "bad_checkpoint"
    assert await refused({**frame, "req": "k5", "position": pos, "sha256": "0" * 64}) == \
        "bad_checkpoint"  # checked by the server, before it becomes the group's checkpoint
    assert await refused({**frame, "req": "k6", "position": pos,
                          "data": base64.b64encode(b"not zlib").decode()}) == "bad_checkpoint"
    assert await refused({**frame, "req": "k7", "position": pos,
                          "data": _chunk(good)[:8]}) == "bad_checkpoint"  # truncated
    big = {**frame, "req": "k8", "last": False, "data": "A" * 150_000}
    await m.send(big)
    assert await refused({**big, "index": 1}) == "state_too_large"
    assert await refused({**frame, "req": "k9"}) == "bad_checkpoint"  # no position
    await m.send({**frame, "req": "ok", "position": pos})
    stored = await m.expect("checkpoint_stored")
    assert stored == {"type": "checkpoint_stored", "req": "ok", "group": "g", "offset": 0,
                      "bytes": len(frame["data"])}
    await m.send({**frame, "req": "k10", "position": pos, "sha256": "1" * 64})
    assert (await m.expect("error"))["code"] == "bad_checkpoint"
    await m.send({"type": "leave", "req": "l", "group": "g"})
    await m.expect("view_install")

    c = await sdk(srv.url, "c")
    rc = Replica()
    gc = await c.join("g", want_state=True, state=rc)
    await gc.publish("c1")
    received, _ = await state_then(gc, rc, "c1")
    assert received.snapshot == good and rc.items == ["f1", "c1"]


async def test_checkpoint_refused_without_state_or_while_it_is_arriving(
        make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server()
    a = await sdk(srv.url, "a")
    plain = await a.join("g")
    with pytest.raises(ValueError, match="StateProvider"):
        await plain.checkpoint()
    b = await sdk(srv.url, "b")
    gb = await b.join("h", want_state=True, state=Replica())
    with pytest.raises(Exception, match="not arrived"):
        await gb.checkpoint()
    e = await until_state(gb)
    assert e.reason == "state_unavailable"
    stored = await gb.checkpoint()  # its (empty) state is the group's now
    assert stored.offset == 0
