"""The asyncio/websockets adapter around the sans-I/O core."""

from notify.server.app import NotifyServer
from notify.server.auth import AuthFailure, TokenVerifier
from notify.server.metrics import ServerStats

__all__ = ["AuthFailure", "NotifyServer", "ServerStats", "TokenVerifier"]
