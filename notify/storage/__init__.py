"""Storage adapters behind the `MessageLog` seam."""

from notify.storage.base import MessageLog, StoredGroup
from notify.storage.memory import MemoryLog
from notify.storage.sqlite import SqliteLog

__all__ = ["MemoryLog", "MessageLog", "SqliteLog", "StoredGroup"]
