"""The delivery event log writes one JSON object per line with the DESIGN §6 common fields."""

from __future__ import annotations

from pathlib import Path

import orjson
from drive import stored

from notify.core import CoreConfig, Hello, Hub, Join, Order, Publish
from notify.core.actions import LogEvent
from notify.eventlog import EventLog


def test_core_events_reach_the_jsonl_file(tmp_path: Path) -> None:
    hub = Hub(CoreConfig(event_log=True), new_token=lambda: "s1", epoch=1)
    log = EventLog(tmp_path, "server")
    actions = []
    hub.opened(1, 10.0)
    actions += hub.handle(1, Hello(1, "a"), 10.0)
    actions += stored(hub, hub.handle(1, Join("r", "g"), 10.0))
    actions += stored(hub, hub.handle(1, Publish("p", "g", "id1", 1, Order.FIFO, {"k": 1}), 10.5))
    for a in actions:
        if isinstance(a, LogEvent):
            log.write(a.event, a.ts, **a.fields)
    log.close()
    lines = [orjson.loads(x) for x in log.path.read_text().splitlines()]
    assert [x["event"] for x in lines] == ["conn.open", "view.propose", "view.install",
                                           "msg.accept"]
    assert all(x["node"] == "server" and isinstance(x["ts"], float) for x in lines)
    accept = lines[-1]
    assert (accept["group"], accept["offset"], accept["stream"], accept["seq"], accept["sender"],
            accept["order"], accept["atomic"]) == ("g", 1, "fifo:a", 1, "a", "fifo", False)
    assert lines[2]["members"] == ["a"] and lines[2]["view"] == 1


def test_rotation_keeps_backups(tmp_path: Path) -> None:
    log = EventLog(tmp_path, "c1", max_bytes=2_000, backups=3)
    for i in range(200):
        log.write("client.deliver", float(i), offset=i, stream="total", seq=i)
    log.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert "events-c1.jsonl" in files and "events-c1.jsonl.1" in files
    assert len(files) <= 4


def test_a_quiet_log_level_does_not_silence_the_event_log(tmp_path: Path) -> None:
    """`notify serve --log-level warning` configures structlog's filter globally."""
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        log = EventLog(tmp_path, "server")
        log.write("msg.accept", 1.0, offset=1)
        log.close()
        assert orjson.loads(log.path.read_text())["offset"] == 1
    finally:
        structlog.reset_defaults()
