"""Which shard a group is in, and which live node should own a shard (DESIGN §9).

Groups hash to a fixed number of virtual shards (`SHARDS`); ownership moves a shard, never a
single group, so a node's lease table has a few hundred entries however many groups there are.
Who *should* own a shard is rendezvous hashing over the live nodes: every node computes the same
answer from the same membership, and when a node joins or leaves only the shards it wins or held
move (about 1/n of them), not a reshuffle. Who *does* own it is the lease (`ownership.py`).

Both hashes are BLAKE2b, not Python's `hash` (salted per process: nodes would disagree).
"""

from __future__ import annotations

from collections.abc import Iterable
from hashlib import blake2b

#: virtual shards; fixed for the life of a cluster (changing it moves every group)
SHARDS = 256


def shard_of(group: str, shards: int = SHARDS) -> int:
    digest = blake2b(group.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def preferred(shard: int, nodes: Iterable[str]) -> str | None:
    """The live node that should own `shard` (highest random weight); None without nodes."""
    best: tuple[bytes, str] | None = None
    for node in nodes:
        weight = blake2b(f"{shard}/{node}".encode(), digest_size=8).digest()
        if best is None or (weight, node) > best:
            best = (weight, node)
    return None if best is None else best[1]
