"""Giving freed memory back to the system (issue 30, G14).

CPython's small objects and the payloads of a group's window live in the C allocator's heap. When
groups leave memory (idle, G14) Python frees them, but glibc keeps the pages for reuse, so the
process's resident size stays where the busiest moment left it: measured with `bench
idle_memory`, 50 evicted groups of 2 MB each left 492 MiB resident, and `malloc_trim(0)` brought
it to 167 MiB. The server calls `release_free_memory()` after each retention pass (every 60 s),
off the event loop. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

import structlog

log = structlog.get_logger("notify.server")


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim  # glibc only (ctypes releases the GIL meanwhile)
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Hand the heap's free pages back to the system; False where that cannot be done."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True
