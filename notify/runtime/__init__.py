"""The sans-I/O runtime: the one driver of the core's actions, the ports it talks to, and the
outbound frame encoding. Hosts (the asyncio server, the cluster, the simulator, the Spark replay)
are this driver plus their own I/O (docs/architecture.md).

It imports the core, the standard library, orjson (the frame encoding) and structlog (its few
log lines), and nothing of any host: the layers are checked by `./dev lint` (import-linter).
"""

from notify.runtime.driver import Driver
from notify.runtime.ports import (
    CheckpointAction,
    Done,
    Fetched,
    Observer,
    Page,
    Paged,
    Restorable,
    Store,
    Transport,
)
from notify.runtime.stats import DriverStats, bump

__all__ = ["CheckpointAction", "Done", "Driver", "DriverStats", "Fetched", "Observer", "Page",
           "Paged", "Restorable", "Store", "Transport", "bump"]
