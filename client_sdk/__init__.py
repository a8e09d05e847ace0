"""Python asyncio SDK for the notify service."""

from client_sdk.connection import Client, NotifyError, PublishRejected, PublishResult
from client_sdk.events import (
    CaughtUp,
    GroupEvent,
    Message,
    Outcome,
    Removed,
    ViewChanging,
    ViewInstalled,
    ViewResumed,
)
from client_sdk.protocol import ClientProtocol, GroupPhase, ProtocolViolation

__all__ = [
    "CaughtUp",
    "Client",
    "ClientProtocol",
    "GroupEvent",
    "GroupPhase",
    "Message",
    "NotifyError",
    "Outcome",
    "ProtocolViolation",
    "PublishRejected",
    "PublishResult",
    "Removed",
    "ViewChanging",
    "ViewInstalled",
    "ViewResumed",
]
