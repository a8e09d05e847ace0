"""The asyncio/websockets host of the runtime (notify/runtime): sockets, outboxes, auth, HTTP.

Names load on first use, so that importing one module of this package (its outbox, its auth)
does not start the whole server's imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from notify.server.app import NotifyServer
    from notify.server.auth import AuthFailure, TokenVerifier
    from notify.server.metrics import ServerStats

_WHERE = {"NotifyServer": "notify.server.app", "AuthFailure": "notify.server.auth",
          "TokenVerifier": "notify.server.auth", "ServerStats": "notify.server.metrics"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["AuthFailure", "NotifyServer", "ServerStats", "TokenVerifier"]
