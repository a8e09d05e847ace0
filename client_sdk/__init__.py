"""Python asyncio SDK for the notify service: `connect()` (client.py) for applications;
`Connection` (connection.py) for tests and tools that drop and resume by hand.

`ServerAPI` (server_api.py) is the server API's client, for application backends.

The I/O names (`connect`, `Client`, `Connection`, `Group`, `ServerAPI`...) load on first use:
a process that only runs the sans-I/O protocol (the Spark replay, the simulator) never imports
websockets nor aiohttp.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from client_sdk.errors import (
    ClientFailed,
    ConnectError,
    Disconnected,
    GroupLeftError,
    NotifyError,
    PayloadTooLarge,
    PublishQueueFull,
    PublishRejected,
    Replaced,
    RequestTimeout,
    ServerAPIError,
    ServerRefused,
)
from client_sdk.events import (
    CaughtUp,
    CheckpointStored,
    GroupEvent,
    InstanceReplaced,
    Message,
    Outcome,
    Removed,
    Reset,
    StateReceived,
    ViewChanging,
    ViewInstalled,
    ViewResumed,
)
from client_sdk.options import (
    Backoff,
    ClientOptions,
    ConnectionState,
    PublishResult,
    StateProvider,
    View,
)
from client_sdk.presence import user_of, users
from client_sdk.protocol import ClientProtocol, GroupPhase, ProtocolViolation, Rejoin

if TYPE_CHECKING:
    from client_sdk.client import Client, connect
    from client_sdk.connection import Connection
    from client_sdk.group import Group
    from client_sdk.server_api import (
        ApiPublished,
        GroupList,
        GroupPresence,
        GroupSummary,
        HistoryPage,
        ServerAPI,
        StoredMessage,
    )

_IO = {"Client": "client_sdk.client", "connect": "client_sdk.client",
       "Connection": "client_sdk.connection", "Group": "client_sdk.group",
       **{name: "client_sdk.server_api" for name in (
           "ServerAPI", "ApiPublished", "GroupPresence", "GroupList", "GroupSummary",
           "HistoryPage", "StoredMessage")}}


def __getattr__(name: str) -> Any:
    module = _IO.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "ApiPublished",
    "Backoff",
    "CaughtUp",
    "CheckpointStored",
    "Client",
    "ClientFailed",
    "ClientOptions",
    "ClientProtocol",
    "ConnectError",
    "Connection",
    "ConnectionState",
    "Disconnected",
    "Group",
    "GroupEvent",
    "GroupLeftError",
    "GroupList",
    "GroupPhase",
    "GroupPresence",
    "GroupSummary",
    "HistoryPage",
    "InstanceReplaced",
    "Message",
    "NotifyError",
    "Outcome",
    "PayloadTooLarge",
    "ProtocolViolation",
    "PublishQueueFull",
    "PublishRejected",
    "PublishResult",
    "Rejoin",
    "Removed",
    "Replaced",
    "RequestTimeout",
    "Reset",
    "ServerAPI",
    "ServerAPIError",
    "ServerRefused",
    "StateProvider",
    "StateReceived",
    "StoredMessage",
    "View",
    "ViewChanging",
    "ViewInstalled",
    "ViewResumed",
    "connect",
    "user_of",
    "users",
]
