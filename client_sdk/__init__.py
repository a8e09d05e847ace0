"""Python asyncio SDK for the notify service: `connect()` (client.py) for applications;
`Connection` (connection.py) for tests and tools that drop and resume by hand."""

from client_sdk.client import (
    Backoff,
    Client,
    ClientOptions,
    ConnectError,
    ConnectionState,
    Group,
    GroupLeftError,
    NotifyError,
    PublishQueueFull,
    PublishRejected,
    PublishResult,
    ServerRefused,
    StateProvider,
    View,
    connect,
)
from client_sdk.connection import Connection
from client_sdk.events import (
    CaughtUp,
    GroupEvent,
    Message,
    Outcome,
    Removed,
    StateReceived,
    ViewChanging,
    ViewInstalled,
    ViewResumed,
)
from client_sdk.protocol import ClientProtocol, GroupPhase, ProtocolViolation

__all__ = [
    "Backoff",
    "CaughtUp",
    "Client",
    "ClientOptions",
    "ClientProtocol",
    "ConnectError",
    "Connection",
    "ConnectionState",
    "Group",
    "GroupEvent",
    "GroupLeftError",
    "GroupPhase",
    "Message",
    "NotifyError",
    "Outcome",
    "ProtocolViolation",
    "PublishQueueFull",
    "PublishRejected",
    "PublishResult",
    "Removed",
    "ServerRefused",
    "StateProvider",
    "StateReceived",
    "View",
    "ViewChanging",
    "ViewInstalled",
    "ViewResumed",
    "connect",
]
