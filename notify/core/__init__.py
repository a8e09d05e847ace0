"""The sans-I/O core: membership, messaging and streams as state machines fed events and a clock.

Nothing here imports asyncio, websockets or sqlite3 (checked by tests/unit/test_core_is_pure.py).
"""

from notify.core.actions import (
    Action,
    Append,
    Close,
    ConnId,
    Fanout,
    Halt,
    LogEvent,
    Message,
    Send,
    StoreView,
    Write,
)
from notify.core.config import CoreConfig, Limits, Retention, Timeouts
from notify.core.errors import CloseCode, ErrorCode, RejectCode
from notify.core.events import (
    AcceptFrom,
    Ack,
    ClientFrame,
    FlushOk,
    Hello,
    Join,
    Leave,
    Order,
    Publish,
    ResumePoint,
)
from notify.core.group import Group
from notify.core.hub import PROTOCOL_VERSION, Hub
from notify.core.view import MemberId, View

__all__ = [
    "PROTOCOL_VERSION",
    "AcceptFrom",
    "Ack",
    "Action",
    "Append",
    "ClientFrame",
    "Close",
    "CloseCode",
    "ConnId",
    "CoreConfig",
    "ErrorCode",
    "Fanout",
    "FlushOk",
    "Group",
    "Halt",
    "Hello",
    "Hub",
    "Join",
    "Leave",
    "Limits",
    "LogEvent",
    "MemberId",
    "Message",
    "Order",
    "Publish",
    "RejectCode",
    "ResumePoint",
    "Retention",
    "Send",
    "StoreView",
    "Timeouts",
    "View",
    "Write",
]
