"""The server API's keys: who may call it, for what, and where (docs/api.md).

A key has a name (what the logs and the metrics say, never its secret), the SHA-256 of its
secret, its scopes (`read`: a group's view and history, the listing; `publish` and `admin`: the
next endpoints) and its groups (globs, `fnmatch` as the retention rules and the token grants
read them: `chat:*`). A caller presents the secret as `Authorization: Bearer SECRET`; the
keyring hashes it and compares the digest with every key's in constant time
(`hmac.compare_digest`, and no early exit), so neither the time nor the order of the keys tells
a caller how close a guess came.

Each key also has a token bucket (`Bucket`): a key over its rate is answered 429.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from fnmatch import fnmatchcase

from notify.core.rate import TokenBucket


class Scope(StrEnum):
    PUBLISH = "publish"
    READ = "read"
    ADMIN = "admin"


ALL_SCOPES = frozenset(Scope)


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True, slots=True)
class ApiKey:
    name: str
    #: SHA-256 of the secret
    digest: bytes = field(repr=False)
    scopes: frozenset[Scope] = ALL_SCOPES
    #: globs of the groups it reaches
    groups: tuple[str, ...] = ("*",)

    def __post_init__(self) -> None:
        if len(self.digest) != 32:
            raise ValueError(f"API key {self.name!r}: a SHA-256 digest is 32 bytes")
        if not self.scopes or not self.groups:
            raise ValueError(f"API key {self.name!r} has no scope or no group")

    @classmethod
    def of(cls, name: str, *, secret: str | None = None, sha256: str | None = None,
           scopes: Iterable[str] = ALL_SCOPES, groups: Iterable[str] = ("*",)) -> ApiKey:
        """A key from its secret or the hex of the secret's SHA-256 (exactly one)."""
        if (secret is None) == (sha256 is None):
            raise ValueError(f"API key {name!r}: give one of secret, sha256")
        d = digest(secret) if secret is not None else bytes.fromhex(sha256 or "")
        return cls(name, d, frozenset(Scope(s) for s in scopes), tuple(groups))

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes

    def reaches(self, group: str) -> bool:
        return any(fnmatchcase(group, glob) for glob in self.groups)


def parse_flag(text: str) -> tuple[str, str]:
    """`--api-key NAME=SECRET` → (name, secret)."""
    name, sep, secret = text.partition("=")
    if not sep or not name or not secret:
        raise ValueError(f"--api-key takes NAME=SECRET, not {text.split('=', 1)[0]!r}...")
    return name, secret


class Keyring:
    """The configured keys, found by the secret a caller presents."""

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        self.keys = tuple(keys)
        names = [k.name for k in self.keys]
        if len(set(names)) != len(names):
            raise ValueError(f"API key names must be unique: {sorted(names)}")
        digests = [k.digest for k in self.keys]
        if len(set(digests)) != len(digests):
            raise ValueError("two API keys have the same secret")

    def __len__(self) -> int:
        return len(self.keys)

    def find(self, secret: str) -> ApiKey | None:
        """The key whose secret this is, or None; every key is compared, match or not."""
        d = digest(secret)
        found = None
        for key in self.keys:
            if hmac.compare_digest(d, key.digest):
                found = key
        return found


@dataclass(slots=True)
class Bucket(TokenBucket):
    """A key's requests: `rate` tokens a second up to `burst`; `take(now)` spends one (0.0,
    else the seconds until one will be there)."""

    rate: float = 0.0
    burst: float = 0.0

    def take(self, now: float) -> float:  # type: ignore[override]
        return TokenBucket.take(self, now, self.rate, self.burst)  # (slots: no bare super())


__all__ = ["ALL_SCOPES", "ApiKey", "Bucket", "Keyring", "Scope", "digest", "parse_flag"]
