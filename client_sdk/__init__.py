"""Python asyncio SDK for the notify service: `connect()` (client.py) for applications;
`Connection` (connection.py) for tests and tools that drop and resume by hand."""

from client_sdk.client import Client, connect
from client_sdk.connection import Connection
from client_sdk.errors import (
    ClientFailed,
    ConnectError,
    GroupLeftError,
    NotifyError,
    PayloadTooLarge,
    PublishQueueFull,
    PublishRejected,
    RequestTimeout,
    ServerRefused,
)
from client_sdk.events import (
    CaughtUp,
    CheckpointStored,
    GroupEvent,
    Message,
    Outcome,
    Removed,
    Reset,
    StateReceived,
    ViewChanging,
    ViewInstalled,
    ViewResumed,
)
from client_sdk.group import Group
from client_sdk.options import (
    Backoff,
    ClientOptions,
    ConnectionState,
    PublishResult,
    StateProvider,
    View,
)
from client_sdk.protocol import ClientProtocol, GroupPhase, ProtocolViolation, Rejoin

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
]
