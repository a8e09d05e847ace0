"""Stable error codes and close codes (DESIGN §2 G12, documented in docs/protocol.md).

A peer's mistake becomes an `error` or `rejected` frame carrying one of these codes; the core
raises only for programming mistakes of its own callers.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class ErrorCode(StrEnum):
    BAD_FRAME = "bad_frame"  # not JSON, not an object, or a field of the wrong type/missing
    UNKNOWN_TYPE = "unknown_type"  # `type` names no client frame
    FRAME_TOO_LARGE = "frame_too_large"
    PROTOCOL_VERSION = "protocol_version"
    HELLO_REQUIRED = "hello_required"  # a frame before `hello`
    ALREADY_HELLO = "already_hello"
    BAD_GROUP_NAME = "bad_group_name"
    NO_GROUP = "no_group"
    NOT_MEMBER = "not_member"
    ALREADY_MEMBER = "already_member"
    JOIN_PENDING = "join_pending"
    TOO_MANY_GROUPS = "too_many_groups"
    UNKNOWN_OFFSET = "unknown_offset"  # ack for an offset that is not an atomic message
    WRONG_VIEW = "wrong_view"  # flush_ok for a view that is not being proposed
    OFFSET_UNAVAILABLE = "offset_unavailable"  # resume point older than retention / other epoch
    BAD_RESUME = "bad_resume"  # resume point in the future
    INTERNAL = "internal"  # a server bug; the frame was dropped, the connection stays up


class RejectCode(StrEnum):
    """Why a publish was refused (`rejected` frame); nothing of it was delivered."""

    STALE_VIEW = "stale_view"  # same_view and the stamped view is not the current one (G6)
    FUTURE_VIEW = "future_view"
    NOT_MEMBER = "not_member"
    NO_GROUP = "no_group"
    VIEW_CHANGING = "view_changing"  # sent after this member's flush_ok, before the install
    LEAVING = "leaving"


class CloseCode(IntEnum):
    """WebSocket close codes the server uses besides the RFC 6455 ones (1009 = frame too big)."""

    HEARTBEAT_TIMEOUT = 4000
    SLOW_CONSUMER = 4001
    REPLACED = 4002  # a new incarnation of the same member connected
    SHUTDOWN = 4003
