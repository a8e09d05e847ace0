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
    #: a join that would take the group past `max_group_members` (its view, with the joins
    #: already pending and without the members whose removal is certain; a member that only
    #: went quiet still counts: its resume would call its removal off)
    GROUP_FULL = "group_full"
    UNKNOWN_OFFSET = "unknown_offset"  # ack for an offset that is not an atomic message
    WRONG_VIEW = "wrong_view"  # flush_ok for a view that is not being proposed
    OFFSET_UNAVAILABLE = "offset_unavailable"  # resume point older than retention / other epoch
    BAD_RESUME = "bad_resume"  # resume point in the future
    UNKNOWN_TRANSFER = "unknown_transfer"  # state_chunk for no transfer this member serves
    BAD_CHUNK = "bad_chunk"  # state_chunk out of order
    STATE_UNAVAILABLE = "state_unavailable"  # no member (left) can give a joiner the state
    STATE_TOO_LARGE = "state_too_large"  # a snapshot over Limits.max_state_bytes
    BAD_CHECKPOINT = "bad_checkpoint"  # position not in this log, bad sha256 or compression
    INTERNAL = "internal"  # a server bug; the frame was dropped, the connection stays up
    UNAVAILABLE = "unavailable"  # the group's state cannot be read from the log now; retry
    # -- authentication and authorisation (docs/security.md); the first four close with 4004
    TOKEN_REQUIRED = "token_required"  # hello without a token on a server that requires one
    TOKEN_INVALID = "token_invalid"  # bad signature/key/algorithm/audience/issuer, no `sub`...
    TOKEN_EXPIRED = "token_expired"  # `exp` is past (at hello or refresh)
    #: issued (`iat`) no later than the server API's disconnect of its user (revocation)
    TOKEN_REVOKED = "token_revoked"
    MEMBER_MISMATCH = "member_mismatch"  # `member` (or a refresh token's `sub`) is not the sub
    FORBIDDEN = "forbidden"  # join / want_state outside the token's grants
    #: a hello for a new instance of a user that has `max_instances_per_user` connected ones
    TOO_MANY_INSTANCES = "too_many_instances"
    #: a resuming join of a member the server API removed from the group (perhaps while it was
    #: away, so that it never saw the install): it is over; a join without `resume` is let in
    REMOVED = "removed"


class RejectCode(StrEnum):
    """Why a publish was refused (`rejected` frame); nothing of it was delivered."""

    STALE_VIEW = "stale_view"  # same_view and the stamped view is not the current one (G6)
    FUTURE_VIEW = "future_view"
    NOT_MEMBER = "not_member"
    NO_GROUP = "no_group"
    VIEW_CHANGING = "view_changing"  # sent after this member's flush_ok, before the install
    LEAVING = "leaving"
    FORBIDDEN = "forbidden"  # no `publish` (or `publish_atomic`) grant for this group
    RATE_LIMITED = "rate_limited"  # over `publish_rate` (token bucket per connection)
    TOO_MANY_PENDING = "too_many_pending"  # over `max_pending_atomic` unresolved atomics
    #: the log could not store it (e.g. a full disk); nothing of it was delivered, and the
    #: same id may be published again
    STORAGE_FAILED = "storage_failed"
    #: the payload is JSON that cannot be carried as is (G12), refused at the edge: an integer
    #: outside 64 bits, a lone surrogate, NaN/Infinity, nested deeper than `max_payload_depth`
    BAD_PAYLOAD = "bad_payload"


class CloseCode(IntEnum):
    """WebSocket close codes the server uses besides the RFC 6455 ones (1009 = frame too big)."""

    SLOW_CONSUMER = 4001
    REPLACED = 4002  # a new incarnation of the same member connected
    SHUTDOWN = 4003  # graceful shutdown: reconnect (elsewhere) and resume
    UNAUTHORIZED = 4004  # hello refused: the error frame before the close says why
    TOKEN_EXPIRED = 4005  # the token expired and no `refresh` came in time
    HELLO_TIMEOUT = 4006  # no successful hello within `hello_timeout`
    #: the server API disconnected the user: its session is over; do not reconnect with the
    #: same token (with auth it was revoked)
    DISCONNECTED = 4007
