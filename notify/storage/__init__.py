"""Storage adapters behind the `MessageLog` seam (`notify.storage.base`): `MemoryLog`
(`memory`), `SqliteLog` (`sqlite`), `JetStreamLog` (`jetstream`).

This package's `__init__` imports nothing: the simulator and the replay use the memory log
without loading sqlite3 or nats.
"""
