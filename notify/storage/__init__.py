"""Storage adapters behind the `MessageLog` seam.

Names load on first use: the simulator and the replay use the memory log without loading
sqlite3 (or nats, for the JetStream log).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from notify.storage.base import MessageLog, StoredGroup
    from notify.storage.memory import MemoryLog
    from notify.storage.sqlite import SqliteLog

_WHERE = {"MessageLog": "notify.storage.base", "StoredGroup": "notify.storage.base",
          "MemoryLog": "notify.storage.memory", "SqliteLog": "notify.storage.sqlite"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["MemoryLog", "MessageLog", "SqliteLog", "StoredGroup"]
