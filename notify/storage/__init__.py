"""Storage adapters behind the `MessageLog` seam."""

from notify.storage.base import MessageLog
from notify.storage.memory import MemoryLog

__all__ = ["MemoryLog", "MessageLog"]
