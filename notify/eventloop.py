"""The event loop the server runs on: uvloop when it is installed, else asyncio's own.

The server's time goes to many small steps around the loop (a task switch per member's sender,
a callback per write, a socket write per batch); uvloop does those steps in C. It is optional
(`pip install 'notify[fast]'`): on a platform without it (Windows), or with
`event_loop = "asyncio"` (`--event-loop asyncio`), the standard loop runs the same code.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

T = TypeVar("T")

EventLoopChoice = Literal["auto", "uvloop", "asyncio"]


def uvloop_installed() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def loop_factory(choice: EventLoopChoice = "auto") -> Callable[[], asyncio.AbstractEventLoop]:
    """What `asyncio.Runner` should build: uvloop's loop for "uvloop" (an error if it is not
    installed) and for "auto" when it is installed; asyncio's otherwise."""
    if choice == "uvloop" or (choice == "auto" and uvloop_installed()):
        try:
            import uvloop
        except ImportError as e:
            raise RuntimeError("event_loop = uvloop, but uvloop is not installed "
                               "(pip install 'notify[fast]')") from e
        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
        return factory
    return asyncio.new_event_loop


def run(main: Coroutine[Any, Any, T], choice: EventLoopChoice = "auto") -> T:
    """`asyncio.run(main)` on the loop `choice` names."""
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(main)


def loop_name() -> str:
    """The running loop's kind, for the startup log and metrics."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") \
        else "asyncio"
