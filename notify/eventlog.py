"""The delivery event log (DESIGN §6): JSON Lines through structlog, in rotated files.

One record per line with `ts`, `event`, `node` and the event's own fields; the Spark jobs in
`spark_analysis/` read these files. Written by the server (`--event-log DIR`) and optionally by
SDK clients. Rotation is the stdlib's `RotatingFileHandler`; rendering is structlog's JSON
renderer with orjson. The file is written off the event loop: records go through the stdlib's
`QueueHandler` to a `QueueListener` thread, so a slow disk never stalls deliveries. The queue is
bounded (`max_queued` records, G14): past it a record is dropped and counted (`dropped`), never
waited for.
"""

from __future__ import annotations

import logging
import logging.handlers
import queue
from pathlib import Path
from typing import Any

import orjson
import structlog


def _orjson_str(obj: Any, **_: Any) -> str:
    return orjson.dumps(obj).decode()


class EventLog:
    """Appends events for one node (`server` or a client id) under `directory`."""

    def __init__(self, directory: str | Path, node: str, *, max_bytes: int = 64 << 20,
                 backups: int = 20, max_queued: int = 100_000) -> None:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in node)
        self.path = path / f"events-{safe}.jsonl"
        logger = logging.getLogger(f"notify.events.{safe}.{id(self)}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        self._handler = logging.handlers.RotatingFileHandler(
            self.path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self._handler.setFormatter(logging.Formatter("%(message)s"))
        self._queue: queue.Queue[logging.LogRecord] = queue.Queue(max_queued)
        self._queued = _DroppingQueueHandler(self._queue)
        self._listener = logging.handlers.QueueListener(self._queue, self._handler)
        self._listener.start()
        logger.addHandler(self._queued)
        self._logger = logger
        # Its own wrapper class: the event log is data, not diagnostics, so the level filter
        # the CLI configures for structlog (`--log-level`) must not drop it.
        self._log = structlog.wrap_logger(
            logger,
            wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
            processors=[structlog.processors.JSONRenderer(serializer=_orjson_str)],
            context_class=dict,
        ).bind(node=node)

    def write(self, event: str, ts: float, **fields: Any) -> None:
        self._log.info(event, ts=ts, **fields)

    @property
    def dropped(self) -> int:
        """Records dropped because the writer thread fell `max_queued` behind."""
        return self._queued.dropped

    def flush(self) -> None:
        """Wait until every record written so far is in the file."""
        self._listener.stop()
        self._handler.flush()
        self._listener.start()

    def close(self) -> None:
        self._logger.removeHandler(self._queued)
        self._listener.stop()  # writes out what is queued
        self._handler.close()


class _DroppingQueueHandler(logging.handlers.QueueHandler):
    def __init__(self, q: queue.Queue[logging.LogRecord]) -> None:
        super().__init__(q)
        self.dropped = 0

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1
