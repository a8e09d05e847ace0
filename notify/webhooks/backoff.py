"""How long a failing endpoint waits before the next attempt: exponential, capped, jittered.

The n-th retry (n from 1) waits `base * 2**(n-1)`, at most `cap`, times a factor drawn in
[1 - jitter, 1]: endpoints that failed together (one backend restarting) do not come back in
lockstep. The random draw is a parameter (`rand`, in [0, 1)), so tests pin it.
"""

from __future__ import annotations

import random
from collections.abc import Callable


def delay(attempt: int, base: float, cap: float, *, jitter: float = 0.2,
          rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait before retry number `attempt` (1: the first retry)."""
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, not {attempt}")
    raw = cap if attempt > 64 else min(cap, base * 2.0 ** (attempt - 1))
    return raw * (1.0 - jitter * rand())


__all__ = ["delay"]
