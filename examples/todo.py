"""A shared to-do list whose replica survives being killed: it saves its list and its resume
point after every change, and a restarted process asks only for what it missed (G8).

    ./dev serve &
    .venv/bin/python examples/todo.py demo      # kills a replica, restarts it, checks it

or by hand, in two terminals:

    .venv/bin/python examples/todo.py run --member bob --state bob.json
    .venv/bin/python examples/todo.py add --member alice "buy milk"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from client_sdk import CaughtUp, Message, connect

GROUP = "todo-demo"


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {"items": [], "resume": None}


def save(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)  # atomic: a kill never leaves half a file


async def run(url: str, member: str, state_path: Path) -> None:
    """Keep a replica of the list in `state_path`, forever (until killed)."""
    state = load(state_path)
    async with connect(url, member=member) as client:
        todo = await client.join(GROUP, resume_from=state["resume"])
        print(f"{member}: joined with {len(state['items'])} items", flush=True)
        async for event in todo:
            if isinstance(event, Message):
                state["items"].append(event.payload)
            if isinstance(event, Message | CaughtUp):
                state["resume"] = todo.resume_point()
                save(state_path, state)
            if isinstance(event, CaughtUp):
                print(f"{member}: caught up, {len(state['items'])} items", flush=True)


async def add(url: str, member: str, items: list[str]) -> list[str]:
    """Add items and return the full list as this short-lived member saw it."""
    async with connect(url, member=member) as client:
        todo = await client.join(GROUP)
        for item in items:
            await todo.publish(item, order="total")
        await todo.leave()
    return items


async def wait_for_items(path: Path, n: int, timeout: float = 20) -> list[str]:
    async def poll() -> list[str]:
        while True:
            items: list[str] = load(path)["items"]
            if len(items) >= n:
                return items
            await asyncio.sleep(0.05)

    async with asyncio.timeout(timeout):
        return await poll()


async def demo(url: str) -> int:
    with tempfile.TemporaryDirectory() as d:
        state = Path(d) / "bob.json"
        cmd = [sys.executable, __file__, "run", "--member", "bob", "--state", str(state),
               "--url", url]
        bob = subprocess.Popen(cmd)
        try:
            await wait_for_items(state, 0)
            await asyncio.sleep(0.5)
            await add(url, "alice", ["buy milk", "call mum"])
            print("bob has", await wait_for_items(state, 2))
            os.kill(bob.pid, signal.SIGKILL)  # no goodbye: the phone died
            bob.wait()
            print("bob killed")
            await add(url, "alice", ["fix bike", "book train"])
            bob = subprocess.Popen(cmd)  # restarted: catches up from its saved point
            items = await wait_for_items(state, 4)
        finally:
            bob.terminate()
            bob.wait()
    print("bob after restart has", items)
    ok = items == ["buy milk", "call mum", "fix bike", "book train"]
    print("caught up: exactly the missed items, once, in order" if ok else "WRONG")
    return 0 if ok else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["run", "add", "demo"])
    p.add_argument("items", nargs="*")
    p.add_argument("--url", default="ws://127.0.0.1:8765")
    p.add_argument("--member", default="alice")
    p.add_argument("--state", default="todo-state.json")
    a = p.parse_args()
    if a.command == "run":
        asyncio.run(run(a.url, a.member, Path(a.state)))
        return 0
    if a.command == "add":
        asyncio.run(add(a.url, a.member, a.items))
        return 0
    return asyncio.run(demo(a.url))


if __name__ == "__main__":
    raise SystemExit(main())
