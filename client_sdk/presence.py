"""Presence by user: who is here, not how many tabs they have open.

A member of a group is one client instance of a user (a process, a tab, a device), and its
member id says both: `user#instance`, or just `user` for a client that names no instance
(docs/protocol.md, "Users and instances"). Views list instances; an application renders users:
`users(members)` groups a view's instances by user, and `arrivals(before, after)` says which
users came (their first instance in) and went (their last instance out), the way Phoenix
Presence reports joins and leaves of a user with many metas.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable

#: between the user and the instance in a member id (never part of a user id)
SEPARATOR = "#"
#: `connect(instance=AUTO)`: the SDK picks a random instance (the default)
AUTO = "auto"
#: the close code of a connection whose instance another connection claimed (a clash)
REPLACED_CLOSE = 4002
#: the server API disconnected this user (its token revoked): never reconnect with it
DISCONNECTED_CLOSE = 4007


def user_of(member: str) -> str:
    """The user a member id belongs to."""
    return member.split(SEPARATOR, 1)[0]


def member_id(user: str, instance: str | None) -> str:
    return user if instance is None else f"{user}{SEPARATOR}{instance}"


def users(members: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Each user of `members`, with its instances (member ids), in view order."""
    out: dict[str, list[str]] = {}
    for m in members:
        out.setdefault(user_of(m), []).append(m)
    return {u: tuple(ms) for u, ms in out.items()}


def arrivals(before: Iterable[str], after: Iterable[str]) -> tuple[tuple[str, ...],
                                                                   tuple[str, ...]]:
    """(users present in `after` but not `before`, users present before but not after): a
    second tab of a user already here is no arrival, closing one of two tabs no departure."""
    was = {user_of(m) for m in before}
    now = {user_of(m) for m in after}
    return tuple(sorted(now - was)), tuple(sorted(was - now))


def new_instance() -> str:
    """A random instance id (8 URL-safe characters): what the SDK picks for a client that
    names none."""
    return secrets.token_urlsafe(6)
