"""Who a connection is and what it may do: identities and per-group permissions.

Theory of operation. Verifying a token (signatures, keys, the clock) is the adapter's job
(`notify/server/auth.py`); what it hands the core is an `Identity`: the member id (the token's
`sub`), when the identity stops being valid (the token's `exp`, compared with the `now` the core
is fed), and its `Grants`. Grants are an ordered list of `(glob pattern, permissions)` rules;
every rule whose pattern matches a group name adds its permissions (a union, so rule order never
matters). The four permissions are the four things a group can be asked for: `join`, `publish`,
`publish_atomic` (an atomic publish needs both) and `state` (a join with `want_state`).

With no authentication configured (the development mode) the hub gives every session
`ALLOW_ALL`, which is the behaviour of the server before authentication existed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any

from notify.core.view import MemberId


class Perm(StrEnum):
    JOIN = "join"
    PUBLISH = "publish"
    PUBLISH_ATOMIC = "publish_atomic"
    STATE = "state"


#: what `"*"` in a permission list stands for
ALL_PERMS: frozenset[Perm] = frozenset(Perm)


class ClaimsError(ValueError):
    """The token verified but its claims are not usable (no `sub`, a malformed `groups`)."""


#: answers a `Grants` remembers (one per group and permission asked about) before it forgets
#: them all: a session that publishes to ever new group names cannot grow it without bound
_MEMO = 1024


@dataclass(frozen=True, slots=True)
class Grants:
    rules: tuple[tuple[str, frozenset[Perm]], ...] = ()
    #: (group, perm) -> allowed: asked on every publish, with the same few groups
    _memo: dict[tuple[str, Perm], bool] = field(default_factory=dict, compare=False,
                                               hash=False, repr=False)

    def allows(self, group: str, perm: Perm) -> bool:
        key = (group, perm)
        known = self._memo.get(key)
        if known is not None:
            return known
        allowed = any(perm in perms and fnmatchcase(group, pattern)
                      for pattern, perms in self.rules)
        if len(self._memo) >= _MEMO:
            self._memo.clear()
        self._memo[key] = allowed
        return allowed

    def __or__(self, other: Grants) -> Grants:
        return Grants(self.rules + other.rules)

    @classmethod
    def parse(cls, spec: Mapping[str, Any] | None) -> Grants:
        """`{"doc-*": ["join", "publish"], "public": ["*"]}` → Grants; raises ClaimsError."""
        if spec is None:
            return cls()
        if not isinstance(spec, Mapping):
            raise ClaimsError("`groups` must map glob patterns to lists of permissions")
        rules: list[tuple[str, frozenset[Perm]]] = []
        for pattern, perms in spec.items():
            if not isinstance(pattern, str) or not pattern or len(pattern) > 256:
                raise ClaimsError(f"bad group pattern {str(pattern)[:64]!r}")
            rules.append((pattern, _perms(perms)))
        return cls(tuple(rules))


def _perms(perms: object) -> frozenset[Perm]:
    if isinstance(perms, str):
        perms = [perms]
    if not isinstance(perms, Iterable):
        raise ClaimsError("permissions are a list of join, publish, publish_atomic, state, *")
    out: set[Perm] = set()
    for p in perms:
        if p == "*":
            out |= ALL_PERMS
        elif p in Perm.__members__.values():
            out.add(Perm(p))
        else:
            raise ClaimsError(f"unknown permission {str(p)[:64]!r}")
    return frozenset(out)


ALLOW_ALL = Grants((("*", ALL_PERMS),))


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated member: the token's `sub`, its `exp` (None: never) and its grants."""

    member: MemberId
    grants: Grants
    expires: float | None = None

    def expired(self, now: float) -> bool:
        return self.expires is not None and now >= self.expires


@dataclass(frozen=True, slots=True)
class Policy:
    """Server-side grants by member: `{"member glob": {"group glob": [perms]}}` (a policy file).
    A member gets the union of the grants of every member pattern it matches."""

    rules: tuple[tuple[str, Grants], ...] = ()

    def grants_for(self, member: MemberId) -> Grants:
        out = Grants()
        for pattern, grants in self.rules:
            if fnmatchcase(member, pattern):
                out = out | grants
        return out

    @classmethod
    def parse(cls, spec: Mapping[str, Any]) -> Policy:
        if not isinstance(spec, Mapping):
            raise ClaimsError("a policy maps member patterns to {group pattern: permissions}")
        return cls(tuple((str(m), Grants.parse(g)) for m, g in spec.items()))


def identity_from_claims(claims: Mapping[str, Any], *, claim: str = "groups",
                         policy: Policy | None = None) -> Identity:
    """The identity a verified token's claims describe; raises ClaimsError.

    Its grants are the union of the token's `claim` (default `groups`) and what `policy` grants
    its member. A token without the claim, on a server without a policy, may do everything:
    authentication without per-group authorisation."""
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise ClaimsError("the token has no `sub` (member id)")
    exp = claims.get("exp")
    if exp is not None and (isinstance(exp, bool) or not isinstance(exp, int | float)):
        raise ClaimsError("`exp` must be a number")
    from_token = Grants.parse(claims[claim]) if claim in claims else None
    if from_token is None and policy is None:
        grants = ALLOW_ALL
    else:
        grants = (from_token or Grants()) | (policy.grants_for(sub) if policy else Grants())
    return Identity(sub, grants, None if exp is None else float(exp))


__all__ = ["ALLOW_ALL", "ALL_PERMS", "ClaimsError", "Grants", "Identity", "Perm", "Policy",
           "identity_from_claims"]
