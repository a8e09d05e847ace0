"""Prometheus metrics (`/metrics`), read at scrape time from plain counters.

The hot path (fan-out, outboxes) only bumps ints in `ServerStats`; this collector turns them and
the hub's tables into Prometheus families when a scraper asks, so metrics cost nothing between
scrapes. Durations are histograms observed once per view install. Every server has its own
`CollectorRegistry`, so several servers in one process (tests) never share counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from notify.core.hub import Hub
from notify.runtime.placement import Placement
from notify.runtime.stats import DriverStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class ServerStats(DriverStats):
    """Plain counters bumped by the server (and, those of `DriverStats`, by its driver);
    exported by `NotifyCollector`."""

    frames_in: int = 0
    #: client `batch` messages (their frames count in `frames_in`)
    batches_in: int = 0
    slow_consumers: int = 0
    #: views installed, by the reasons of their proposal (a merged one counts for each)
    view_changes: dict[str, int] = field(default_factory=dict)
    view_installs: int = 0
    atomic: dict[str, int] = field(default_factory=dict)
    connections_refused: dict[str, int] = field(default_factory=dict)
    connections_total: int = 0
    bytes_out: list[int] = field(default_factory=lambda: [0])


class Scraped(Protocol):
    """What the collector reads of the server it reports on."""

    @property
    def stats(self) -> ServerStats: ...

    @property
    def hub(self) -> Hub: ...

    @property
    def placement(self) -> Placement: ...

    @property
    def draining(self) -> bool: ...

    @property
    def connection_count(self) -> int: ...

    def queue_depths(self) -> tuple[int, int]: ...


class NotifyCollector(Collector):
    def __init__(self, server: Scraped) -> None:
        self._server = server

    def collect(self) -> Iterator[Metric]:
        srv, st = self._server, self._server.stats
        hub = srv.hub

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"notify_{name}", doc, value=value)

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            return CounterMetricFamily(f"notify_{name}", doc, value=value)

        def by(name: str, doc: str, label: str, values: dict[str, int] | dict[int, int],
               ) -> CounterMetricFamily:
            c = CounterMetricFamily(f"notify_{name}", doc, labels=[label])
            for k, v in sorted(values.items(), key=lambda kv: str(kv[0])):
                c.add_metric([str(k)], v)
            return c

        yield gauge("up", "1 while serving, 0 once shutting down", 0 if srv.draining else 1)
        yield gauge("connections", "open WebSocket connections", srv.connection_count)
        yield counter("connections_opened", "WebSocket connections accepted",
                      st.connections_total)
        yield by("connections_refused", "connections refused before the handshake",
                 "reason", st.connections_refused)
        yield gauge("sessions", "sessions with a live connection", hub.live_sessions())
        yield gauge("groups", "groups in memory (one nobody is in leaves after idle_group)",
                    len(hub.groups))
        yield counter("groups_loaded", "groups brought back from the log after leaving memory",
                      st.groups_loaded)
        yield counter("history_pages", "history pages answered (catch-up past the in-memory "
                      "window, scrollback)", st.history_pages)
        yield gauge("members", "members of the current views, summed over groups",
                    sum(len(g.view.members) for g in hub.groups.values()))
        depth, deepest = srv.queue_depths()
        yield gauge("outbound_queued_frames", "frames queued in all outboxes", depth)
        yield gauge("outbound_queue_max_frames", "frames queued in the fullest outbox", deepest)
        yield counter("frames_received", "client frames received", st.frames_in)
        yield counter("batches_received", "client batch messages received (their frames are "
                      "counted in frames_received)", st.batches_in)
        yield by("errors", "error frames sent, by code", "code", st.by_code)
        yield by("rejected", "rejected publishes, by code", "code", st.rejected)
        yield by("closes", "connections closed by the server, by close code", "code", st.closes)
        yield counter("slow_consumers", "members cut as slow consumers (4001)",
                      st.slow_consumers)
        yield by("view_changes", "view changes installed, by reason", "reason", st.view_changes)
        yield counter("view_installs", "views installed", st.view_installs)
        yield counter("messages", "messages accepted into a group log", st.messages)
        yield counter("deliveries", "deliver frames handed to members (fan-out)", st.deliveries)
        yield counter("sent_bytes", "bytes written to WebSockets", st.bytes_out[0])
        yield by("atomic", "atomic messages resolved, by outcome", "outcome", st.atomic)
        yield counter("internal_errors", "server bugs caught (frame dropped)", st.internal_errors)
        for kind, name, doc, value in srv.placement.samples():
            if isinstance(value, tuple):
                yield by(name, doc, *value)
            elif kind == "gauge":
                yield gauge(name, doc, value)
            else:
                yield counter(name, doc, value)


class Metrics:
    """A server's registry: the collector plus the duration histograms."""

    def __init__(self, server: Scraped) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(NotifyCollector(server))
        buckets = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
        self.install_seconds = Histogram(
            "notify_view_install_seconds", "from a view's proposal to its install (the flush)",
            buckets=buckets, registry=self.registry)
        self.write_seconds = Histogram(
            "notify_write_seconds", "from a write (a batch of messages, or a view) to the log's "
            "answer (durable, and replicated on a cluster)",
            buckets=buckets, registry=self.registry)
        #: the server API (notify/api): requests by endpoint (its route's name, or `other`)
        #: and HTTP status code
        self.api_requests = Counter(
            "notify_api_requests", "server API requests, by endpoint and HTTP status code",
            ["endpoint", "code"], registry=self.registry)
        self.commit_seconds = Histogram(
            "notify_atomic_commit_seconds", "from an atomic publish to its commit",
            buckets=buckets, registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)


__all__ = ["CONTENT_TYPE", "Metrics", "NotifyCollector", "ServerStats"]
