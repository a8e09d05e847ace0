"""`python -m bench <name> [args]`: run one benchmark (`fanout`, `catchup`, `core`, `cluster`,
`sdkfanout`, `sdkrecv`, `idle_memory`, `idle_conns`, `cluster_cost`, `timer`)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    benches = {"fanout": "bench.fanout", "catchup": "bench.catchup", "core": "bench.core",
               "cluster": "bench.cluster", "sdkfanout": "bench.sdkfanout",
               "sdkrecv": "bench.sdkrecv", "idle_memory": "bench.idle_memory",
               "idle_conns": "bench.idle_conns", "cluster_cost": "bench.cluster_cost",
               "timer": "bench.timer"}
    if not argv or argv[0] not in benches:
        print(f"usage: python -m bench {{{'|'.join(benches)}}} [--help]", file=sys.stderr)
        return 2
    import importlib

    module = importlib.import_module(benches[argv[0]])
    return int(module.main(argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
