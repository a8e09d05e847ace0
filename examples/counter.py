"""A collaborative counter: several replicas apply the same increments in the same order.

Each replica publishes increments as atomic, total-order messages; every replica (the sender
included) applies a message only when the SDK hands it over, i.e. once it is confirmed, and in
the one total order (G4, G5). So all replicas end with the same value and the same history.

    ./dev serve &                                   # in one terminal
    .venv/bin/python examples/counter.py            # in another
"""

from __future__ import annotations

import argparse
import asyncio
import random

from client_sdk import Message, connect


async def replica(url: str, name: str, increments: int, total: int, start: asyncio.Barrier,
                  ) -> tuple[int, list[str]]:
    async with connect(url, member=name) as client:
        counter = await client.join("counter-demo")
        await start.wait()  # everyone is in the group before anyone counts
        value, history = 0, []

        async def send() -> None:
            for i in range(increments):
                step = random.randint(1, 5)
                await counter.publish({"by": name, "step": step, "n": i},
                                      order="total", atomic=True)

        sender = asyncio.get_running_loop().create_task(send())
        async for event in counter:
            if isinstance(event, Message) and event.stream == "total":
                value += event.payload["step"]
                history.append(f"{event.payload['by']}#{event.payload['n']}")
                if len(history) == total:
                    break
        await sender
        await counter.leave()
        return value, history


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="ws://127.0.0.1:8765")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--increments", type=int, default=10)
    a = p.parse_args()
    start = asyncio.Barrier(a.replicas)
    total = a.replicas * a.increments
    async with asyncio.timeout(60):
        results = await asyncio.gather(*(
            replica(a.url, f"replica-{i}", a.increments, total, start)
            for i in range(a.replicas)))
    for i, (value, history) in enumerate(results):
        print(f"replica-{i}: value={value} after {len(history)} increments")
    converged = len({(v, tuple(h)) for v, h in results}) == 1
    print("converged: same value, same order" if converged else "DIVERGED")
    return 0 if converged else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
