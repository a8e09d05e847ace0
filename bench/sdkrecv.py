"""The Python SDK's receive path alone, no socket: CPU per message a subscriber spends from the
bytes of a `batch` frame to the application holding the `Message` (issue 14).

    python -m bench sdkrecv                       # 200,000 messages in batches of 64
    python -m bench sdkrecv --profile             # the same under cProfile: where the time goes
    python -m bench sdkrecv --handler             # the callback style (Group.on_event)
    python -m bench sdkrecv --atomic              # atomic messages: ACKed, held to `confirm`
    python -m bench sdkrecv --iterator            # `async for` in a task of its own (README style)

What it runs is the SDK's own code: `Client._receive` (orjson, `ClientProtocol.receive`, the
dispatch to the group's queue) and `Group.next_event` (what `async for` calls), fed frames shaped
as the server sends them. A subscriber process of `bench sdkfanout` spends this plus the socket
and the event loop; this isolates the part the SDK controls, measured by process CPU time.
`--atomic`: every message atomic, each batch followed by the `confirm` of its offsets (as a
server whose members all ACK at once sends it), and the ACK frames the SDK queues encoded as
its writer would (`data_to_send` and `orjson.dumps`, once per frame received).
`--iterator`: the application reads with `async for event in group` in a task of its own, and the
loop turns once after each frame, as it does between two frames off a socket: so the task is woken
once per frame, which the other modes (one task) never pay.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import time

import orjson

from client_sdk.client import Client, Group


def frames(n: int, batch: int, group: str, payload: bytes,
           atomic: bool = False) -> list[bytes]:
    """`n` FIFO messages of one sender, `batch` to a frame, as the server writes them (atomic:
    each batch then confirmed by a frame of its own)."""
    body = orjson.loads(payload)
    out = []
    for start in range(1, n + 1, batch):
        offsets = range(start, min(start + batch, n + 1))
        inner = [{"type": "deliver", "group": group, "offset": i, "stream": "fifo:pub", "seq": i,
                  "sender": "pub", "view": 1, "atomic": atomic, "payload": body, "ts": 0.0}
                 for i in offsets]
        out.append(orjson.dumps({"type": "batch", "frames": inner}))
        if atomic:
            out.append(orjson.dumps({"type": "confirm", "group": group,
                                     "offsets": list(offsets)}))
    return out


def joined(name: str = "g") -> tuple[Client, Group]:
    """A client (no socket) in group `name`, its own install received: the view of it and
    `pub`, whose messages `frames` makes."""
    client = Client("ws://127.0.0.1:1", "sub")
    group = Group(client, name, "members")
    client._groups[name] = group
    client.protocol.join("j1", name)
    client.protocol.data_to_send()
    client._receive(orjson.dumps({"type": "view_install", "group": name, "view": 1,
                                  "members": [client.member, "pub"], "joined": [client.member],
                                  "left": [], "epoch": 1, "offset": 0}))
    return client, group


async def run(n: int, batch: int, handler: bool = False,
              atomic: bool = False, iterator: bool = False) -> tuple[float, int]:
    client, group = joined()
    await group.next_event()  # the view
    data = frames(n, batch, "g", b'{"x":"' + b"a" * 88 + b'"}', atomic)  # 100 B payloads
    protocol = client.protocol
    got = 0

    def receive(d: bytes) -> None:
        client._receive(d)
        if atomic:  # what the writer does with what the frame made the SDK owe
            for frame in protocol.data_to_send():
                orjson.dumps(frame)
    if handler:
        count = [0]

        def take(e: object) -> None:  # what an application's handler does at the least
            count[0] += 1

        group.on_event(take)
        t0 = time.process_time()
        for d in data:
            receive(d)
        return time.process_time() - t0, count[0]
    if iterator:
        taken = [0]

        async def application() -> None:
            async for _event in group:
                taken[0] += 1

        app = asyncio.get_running_loop().create_task(application())
        await asyncio.sleep(0)  # it waits on the empty queue, as between bursts
        t0 = time.process_time()
        for d in data:
            receive(d)
            # the loop's turn between two frames: the application takes all that is queued
            # (`_next` does not suspend while the queue holds events)
            await asyncio.sleep(0)
        cpu = time.process_time() - t0
        assert group._queue.empty(), "the application did not take every event"
        app.cancel()  # it waits for more, as an application does between bursts
        await asyncio.wait([app])
        return cpu, taken[0]
    t0 = time.process_time()
    for d in data:
        receive(d)
        while not group._queue.empty():
            await group.next_event()
            got += 1
    return time.process_time() - t0, got


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench sdkrecv", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--profile", action="store_true")
    styles = p.add_mutually_exclusive_group()
    styles.add_argument("--handler", action="store_true",
                        help="the callback style (`Group.on_event`) instead of `next_event`")
    styles.add_argument("--iterator", action="store_true",
                        help="`async for` in a task of its own, woken once per frame")
    p.add_argument("--atomic", action="store_true",
                   help="atomic messages, each batch confirmed (ACKs encoded as sent)")
    a = p.parse_args(argv)
    if a.profile:
        prof = cProfile.Profile()
        prof.enable()
        cpu, got = asyncio.run(run(a.messages, a.batch, a.handler, a.atomic, a.iterator))
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)
    else:
        cpu, got = asyncio.run(run(a.messages, a.batch, a.handler, a.atomic, a.iterator))
    assert got == a.messages, (got, a.messages)
    style = "on_event" if a.handler else "async for" if a.iterator else "next_event"
    print(f"sdkrecv ({style}"
          f"{', atomic' if a.atomic else ''}): {got} messages in batches "
          f"of {a.batch}: {cpu:.3f} CPU-s, "
          f"{cpu / got * 1e6:.2f} µs per message")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
