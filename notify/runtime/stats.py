"""What the driver counts: plain integers bumped on the hot path, read by whoever exports them
(the server's `/metrics`, a test). Nothing is computed until somebody reads."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DriverStats:
    """The counters of the core's actions as the driver applies them."""

    errors_out: int = 0
    internal_errors: int = 0
    #: error frames sent, by code
    by_code: dict[str, int] = field(default_factory=dict)
    #: rejected frames sent, by code
    rejected: dict[str, int] = field(default_factory=dict)
    #: connections the core closed, by close code
    closes: dict[int, int] = field(default_factory=dict)
    #: `published` answers sent (messages accepted into a group's log)
    messages: int = 0
    #: `deliver` frames handed to members (fan-out)
    deliveries: int = 0
    #: groups brought back from the log after they had left memory (G14)
    groups_loaded: int = 0
    #: `history_page`s answered (catch-up past the in-memory window, scrollback)
    history_pages: int = 0
    #: groups dropped from this node (their shard moved, or a write was fenced)
    groups_dropped: int = 0
    #: writes refused because another node owns their group now
    fence_refusals: int = 0


def bump(d: dict[str, int] | dict[int, int], key: object, n: int = 1) -> None:
    d[key] = d.get(key, 0) + n  # type: ignore[index, call-overload]


__all__ = ["DriverStats", "bump"]
