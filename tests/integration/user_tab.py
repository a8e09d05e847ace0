"""One client process of a user, for tests/integration/test_instances.py: a "tab" that connects
with the SDK's defaults (`connect(url, member=USER)`: the SDK picks its instance), joins GROUP,
publishes N numbered messages once it reads `go` on stdin, and then reports as JSON lines on
stdout what it received until it reads `stop` (then it leaves, or just closes with `close`).

    python -m tests.integration.user_tab URL USER GROUP N
"""

from __future__ import annotations

import asyncio
import sys

import orjson

from client_sdk import Message, ViewInstalled, connect


def say(**fields: object) -> None:
    sys.stdout.write(orjson.dumps(fields).decode() + "\n")
    sys.stdout.flush()


async def main(url: str, user: str, group: str, n: int) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with connect(url, member=user) as client:
        g = await client.join(group)
        say(event="joined", member=client.member, view=g.view.version if g.view else None)

        def on_event(e: object) -> None:
            if isinstance(e, Message):
                say(event="message", sender=e.sender, offset=e.offset, payload=e.payload)
            elif isinstance(e, ViewInstalled):
                say(event="view", view=e.view, members=list(e.members))

        g.on_event(on_event)
        while True:
            line = (await asyncio.wait_for(reader.readline(), 60)).decode().strip()
            if line == "go":
                for i in range(n):
                    await g.publish({"from": client.member, "i": i})
                say(event="published", count=n)
            elif line == "leave":
                await g.leave()
                say(event="left")
                return
            elif line in ("close", ""):
                say(event="closed")
                return


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
