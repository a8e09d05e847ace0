"""What a prober is told: its targets' shared settings, with the defaults docs/slo.md assumes.

The thresholds are part of the SLI definitions (docs/slo.md): changing one changes what "good"
means, so the SLO's history stops being comparable. Keep them as the SLO document states them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ProbeConfig"]


@dataclass(frozen=True, slots=True)
class ProbeConfig:
    #: the group the prober joins on every target (a group of its own: it sees only its traffic)
    group: str = "probe"
    #: SDK publishes per second, per target
    rate: float = 1.0
    #: publish success: answered `published` within this many seconds
    publish_deadline: float = 5.0
    #: delivery: received within this many seconds of the publish call
    latency_threshold: float = 1.0
    #: seconds between deliberate drops of the receiver's socket (resume SLI); 0: never
    reconnect_every: float = 60.0
    #: a resume is good if the group answers `view_resume` within this many seconds, with the
    #: view unchanged
    resume_deadline: float = 10.0
    #: seconds between deliberate view changes (a third member joins, then leaves); 0: never
    view_change_every: float = 300.0
    #: view-change time: `view_change` → `view_install` at the receiver within this many seconds
    view_change_threshold: float = 1.0
    #: publishes through the server API (client_sdk.ServerAPI): its URL and key; None: off
    api_url: str | None = None
    api_key: str | None = None
    #: server API publishes per second, per target (when `api_url` is set)
    api_rate: float = 0.2
    #: a token for the WebSocket connections (servers with authentication); None: no auth
    token: str | None = None
    #: probe messages awaiting their answer or delivery, per target and SLI: more evict the
    #: oldest, counted bad (bounded memory whatever the outage)
    max_outstanding: int = 10_000
    #: seconds to connect and join, and to close, each time
    connect_timeout: float = 10.0
    #: seconds a failed session or probe waits before trying again (doubled up to `max_backoff`)
    backoff: float = 0.5
    max_backoff: float = 30.0

    def __post_init__(self) -> None:
        for name in ("rate", "publish_deadline", "latency_threshold", "resume_deadline",
                     "view_change_threshold", "api_rate", "connect_timeout", "backoff",
                     "max_backoff"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        for name in ("reconnect_every", "view_change_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: never)")
        if self.max_outstanding < 1:
            raise ValueError("max_outstanding must be >= 1")
        if (self.api_url is None) != (self.api_key is None):
            raise ValueError("the server API needs both its URL and a key")
