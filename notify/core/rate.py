"""A token bucket: what rate limits spend (a connection's publishes, G11; a server API key's
requests). One definition for both, so both refill and clamp alike."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class TokenBucket:
    tokens: float
    #: when `tokens` was last brought up to date
    at: float

    def take(self, now: float, rate: float, burst: float) -> float:
        """Spend one token: 0.0 if there was one, else the seconds until one will be there.
        Refills at `rate` a second up to `burst`; a clock that went back refills nothing."""
        self.tokens = min(burst, self.tokens + max(now - self.at, 0.0) * rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / rate
