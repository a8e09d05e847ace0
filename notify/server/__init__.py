"""The asyncio/websockets adapter around the sans-I/O core."""

from notify.server.app import NotifyServer

__all__ = ["NotifyServer"]
