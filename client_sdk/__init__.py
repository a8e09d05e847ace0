"""Python asyncio SDK for the notify service: `connect()` (client.py) for applications;
`Connection` (connection.py) for tests and tools that drop and resume by hand.

The I/O names (`connect`, `Client`, `Connection`, `Group`) load on first use: a process that
only runs the sans-I/O protocol (the Spark replay, the simulator) never imports websockets.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from client_sdk.errors import (
    ClientFailed,
    ConnectError,
    GroupLeftError,
    NotifyError,
    PayloadTooLarge,
    PublishQueueFull,
    PublishRejected,
    Replaced,
    RequestTimeout,
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

_IO = {"Client": "client_sdk.client", "connect": "client_sdk.client",
       "Connection": "client_sdk.connection", "Group": "client_sdk.group"}


def __getattr__(name: str) -> Any:
    module = _IO.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
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
    "Group",
    "GroupEvent",
    "GroupLeftError",
    "GroupPhase",
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
    "ServerRefused",
    "StateProvider",
    "StateReceived",
    "View",
    "ViewChanging",
    "ViewInstalled",
    "ViewResumed",
    "connect",
    "user_of",
    "users",
]
