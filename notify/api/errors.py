"""The server API's errors: one JSON shape, stable codes (docs/api.md, "Errors").

Every answer that is not a success is `{"error": {"code", "message"}}` with one of the codes
below; clients branch on `code` (and the HTTP status), never on `message`. As on the WebSocket
edge (G12), what a caller sent wrong is a 4xx naming the field, never a 5xx: a 5xx says the
server could not answer (503 `unavailable`: shutting down, the log unreadable, a cluster) or
has a bug (500 `internal`, logged).
"""

from __future__ import annotations

from enum import StrEnum

import orjson


class ApiErrorCode(StrEnum):
    BAD_REQUEST = "bad_request"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    UNKNOWN_GROUP = "unknown_group"
    UNKNOWN_MEMBER = "unknown_member"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    #: an Idempotency-Key used again with another request
    CONFLICT = "conflict"
    TOO_LARGE = "too_large"
    RATE_LIMITED = "rate_limited"
    INTERNAL = "internal"
    UNAVAILABLE = "unavailable"


#: each code's HTTP status
STATUS = {
    ApiErrorCode.BAD_REQUEST: 400,
    ApiErrorCode.UNAUTHORIZED: 401,
    ApiErrorCode.FORBIDDEN: 403,
    ApiErrorCode.UNKNOWN_GROUP: 404,
    ApiErrorCode.UNKNOWN_MEMBER: 404,
    ApiErrorCode.NOT_FOUND: 404,
    ApiErrorCode.METHOD_NOT_ALLOWED: 405,
    ApiErrorCode.CONFLICT: 409,
    ApiErrorCode.TOO_LARGE: 413,
    ApiErrorCode.RATE_LIMITED: 429,
    ApiErrorCode.INTERNAL: 500,
    ApiErrorCode.UNAVAILABLE: 503,
}


class ApiError(Exception):
    """An answer other than success; raised by a handler, written by the error middleware."""

    def __init__(self, code: ApiErrorCode, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message
        self.status = STATUS[code]
        self.headers = headers or {}

    def body(self) -> bytes:
        return orjson.dumps({"error": {"code": self.code.value, "message": self.message}})


def bad_request(field: str, why: str) -> ApiError:
    """400 naming what was wrong: `after: ...`, `group: ...`."""
    return ApiError(ApiErrorCode.BAD_REQUEST, f"{field}: {why}")


def unknown_group(group: str) -> ApiError:
    return ApiError(ApiErrorCode.UNKNOWN_GROUP, f"no group {group!r}: the log has no view of it")


def unknown_member(group: str, member: str) -> ApiError:
    return ApiError(ApiErrorCode.UNKNOWN_MEMBER,
                    f"no member {member!r} (nor an instance of such a user) in the view of "
                    f"{group!r}")


def unavailable(why: str) -> ApiError:
    return ApiError(ApiErrorCode.UNAVAILABLE, why, {"Retry-After": "1"})


__all__ = ["STATUS", "ApiError", "ApiErrorCode", "bad_request", "unavailable", "unknown_group",
           "unknown_member"]
