"""notify/server/heap.py: freed memory goes back to the system (glibc's malloc_trim)."""

from __future__ import annotations

import gc
from pathlib import Path

from notify.server.heap import release_free_memory


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_freed_small_objects_are_given_back() -> None:
    """Many small objects (what a group's window is made of), freed: glibc keeps their pages
    until they are trimmed."""
    blobs = [b"x" * 600 + bytes([i % 256]) for i in range(300_000)]  # about 200 MiB
    held = _rss_kib()
    del blobs
    gc.collect()
    kept = _rss_kib()
    assert release_free_memory()
    after = _rss_kib()
    # free() kept the pages (about 190 MiB more than at the start here); the trim gives them back
    assert after < kept - 100_000, (held, kept, after)
