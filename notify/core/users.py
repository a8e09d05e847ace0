"""Identity = (user, instance): a member of a group is one client instance of a user.

A *user* is who is logged in: the token's `sub`, or `hello.member` in development mode. Grants
are the user's. An *instance* is one client process, tab or device of that user: it is what
joins groups, has a view slot, a per-sender FIFO stream, publish ids and resume points (DESIGN's
guarantees hold per instance). Two tabs of one user are two members of a group, not a clash.

The member id that views, messages and the event log carry says both: `user#instance`, or just
`user` for a client that names no instance (the protocol as it was: such a member id is
unchanged). `#` cannot occur in a user id (hello's name rule), so `user_of` is exact.

Phoenix Presence, Centrifugo (user, client) and Ably (clientId, connectionId) make the same
split: presence is shown by user, delivery is per connection.
"""

from __future__ import annotations

import re

from notify.core.view import MemberId

#: between the user and the instance in a member id
SEPARATOR = "#"
#: member ids of the server's own trusted senders (`api:NAME`, one per server API key,
#: notify/core/hub.py `Hub.trust`): no client may name itself so
TRUSTED_PREFIX = "api:"
#: an instance id: what the SDKs pick (random, URL-safe) fits it
INSTANCE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def member_id(user: str, instance: str | None) -> str:
    """The member id of `user`'s `instance` (None: the user itself, as before instances)."""
    return user if instance is None else f"{user}{SEPARATOR}{instance}"


def user_of(member: str) -> str:
    """The user a member id belongs to."""
    return member.split(SEPARATOR, 1)[0]


def trusted_sender(name: str) -> MemberId:
    """The member id the server API key `name` publishes as."""
    return f"{TRUSTED_PREFIX}{name}"


def is_trusted(member: str) -> bool:
    return member.startswith(TRUSTED_PREFIX)


def split_member(member: str) -> tuple[str, str | None]:
    """(user, instance) of a member id; instance None for a member that names none."""
    user, sep, instance = member.partition(SEPARATOR)
    return user, (instance if sep else None)
