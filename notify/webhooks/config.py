"""The webhook endpoints a server posts to: `[[webhooks]]` in the config file, or
`--webhook URL=whsec_...` on the command line (docs/api.md "Webhooks").

An entry names its `url`, its Standard Webhooks `secret` (`whsec_` and base64, as Svix and the
spec's libraries print them), the `events` it wants, and for `message` events the groups
(`groups`, globs as the API keys read them). The delivery knobs (timeout, backoff, backlog caps)
are per entry, with defaults that suit a backend that is down for minutes, not days.
"""

from __future__ import annotations

import base64
import binascii
from fnmatch import fnmatchcase
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

EventType = Literal["member.arrived", "member.left", "user.arrived", "user.left",
                    "group.occupied", "group.vacated", "message"]
#: every membership and occupancy event: what `--webhook` subscribes (messages are opt-in:
#: each one costs an outbox row and a POST)
MEMBERSHIP: tuple[EventType, ...] = ("member.arrived", "member.left", "user.arrived",
                                     "user.left", "group.occupied", "group.vacated")
SECRET_PREFIX = "whsec_"


def secret_bytes(secret: str) -> bytes:
    """The key of a `whsec_...` secret; ValueError when it is not one."""
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"a webhook secret starts with {SECRET_PREFIX!r} (then base64)")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX):] + "==", validate=False)
    except (binascii.Error, ValueError):
        raise ValueError("a webhook secret is whsec_ and base64") from None
    if len(key) < 16:
        raise ValueError("a webhook secret's key has at least 16 bytes (24 or 32 is usual)")
    return key


class WebhookSettings(BaseModel):
    """One `[[webhooks]]` entry: one endpoint, delivered to in order (docs/api.md)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https?://", max_length=2048)
    secret: SecretStr
    #: what the metrics and logs call it (default: the URL)
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.:/-]{1,128}$")
    events: list[EventType] = Field(default_factory=lambda: list(MEMBERSHIP), min_length=1)
    #: the groups whose messages are sent (`message` events only; globs)
    groups: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=lambda: ["*"], min_length=1)
    #: seconds one POST may take, connection included
    timeout: float = Field(default=10.0, gt=0, le=300)
    #: the first retry's delay; each next one doubles, up to `backoff_max` (with jitter)
    backoff: float = Field(default=1.0, gt=0, le=3600)
    backoff_max: float = Field(default=300.0, gt=0, le=86_400)
    #: events kept for this endpoint, at most: past it the oldest are dropped (and counted)
    max_backlog: int = Field(default=100_000, ge=1)
    #: bytes of event bodies kept for this endpoint, at most (the same rule)
    max_backlog_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)

    @field_validator("secret")
    @classmethod
    def _secret(cls, v: SecretStr) -> SecretStr:
        secret_bytes(v.get_secret_value())
        return v

    @model_validator(mode="after")
    def _backoff(self) -> WebhookSettings:
        if self.backoff > self.backoff_max:
            raise ValueError("backoff must not exceed backoff_max")
        return self

    @property
    def key(self) -> str:
        """The endpoint's identity in the outbox and the metrics."""
        return self.name or self.url

    def wants(self, event: str, group: str) -> bool:
        if event not in self.events:
            return False
        return event != "message" or any(fnmatchcase(group, g) for g in self.groups)

    def wants_messages(self, group: str) -> bool:
        return self.wants("message", group)


def parse_flag(text: str) -> dict[str, str]:
    """`--webhook URL=whsec_...`: an endpoint for every membership event. The URL may hold `=`
    (a query) and base64 ends with `=`, so the split is at the last `=whsec_`."""
    url, sep, rest = text.rpartition(f"={SECRET_PREFIX}")
    if not sep or not url:
        raise ValueError(f"--webhook takes URL={SECRET_PREFIX}..., not {text[:40]!r}")
    return {"url": url, "secret": SECRET_PREFIX + rest}


def check_unique(hooks: list[WebhookSettings]) -> None:
    keys = [h.key for h in hooks]
    if len(set(keys)) != len(keys):
        raise ValueError(f"webhook names (default: their URL) must be unique: {sorted(keys)}")


__all__ = ["MEMBERSHIP", "EventType", "WebhookSettings", "check_unique", "parse_flag",
           "secret_bytes"]
