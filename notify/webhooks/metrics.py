"""The webhooks' Prometheus families, read at scrape time from the service's plain counters
(as notify/server/metrics.py does), on the server's own registry: `/metrics` on the WebSocket
port shows them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from notify.webhooks.outbox import OutboxPort
from notify.webhooks.sender import Sender


class Reported(Protocol):
    """What the collector reads of the service (`notify.webhooks.service.Webhooks`)."""

    @property
    def outbox(self) -> OutboxPort | None: ...

    @property
    def senders(self) -> Mapping[str, Sender]: ...

    @property
    def overflowed(self) -> Mapping[str, int]: ...

    @property
    def pending(self) -> int: ...

    @property
    def restarts(self) -> int: ...


class WebhookCollector(Collector):
    def __init__(self, service: Reported) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        s = self._service
        outbox = s.outbox
        backlog = GaugeMetricFamily("notify_webhook_backlog",
                                    "events in the outbox not yet delivered, per endpoint",
                                    labels=["endpoint"])
        size = GaugeMetricFamily("notify_webhook_backlog_bytes",
                                 "body bytes of those events, per endpoint", labels=["endpoint"])
        delivered = CounterMetricFamily("notify_webhook_delivered",
                                        "events delivered (answered 2xx), per endpoint",
                                        labels=["endpoint"])
        failed = CounterMetricFamily("notify_webhook_failures",
                                     "failed delivery attempts (each retry), per endpoint",
                                     labels=["endpoint"])
        failing = GaugeMetricFamily("notify_webhook_failing",
                                    "consecutive failed attempts of the endpoint's oldest "
                                    "event (0: healthy)", labels=["endpoint"])
        dropped = CounterMetricFamily("notify_webhook_dropped",
                                      "events dropped undelivered, per endpoint and reason "
                                      "(backlog: the endpoint's cap; overflow: the writer's)",
                                      labels=["endpoint", "reason"])
        for key, sender in s.senders.items():
            backlog.add_metric([key], outbox.count.get(key, 0) if outbox else 0)
            size.add_metric([key], outbox.bytes.get(key, 0) if outbox else 0)
            delivered.add_metric([key], sender.stats.delivered)
            failed.add_metric([key], sender.stats.failed)
            failing.add_metric([key], sender.stats.failing)
            dropped.add_metric([key, "backlog"], outbox.dropped.get(key, 0) if outbox else 0)
            dropped.add_metric([key, "overflow"], s.overflowed.get(key, 0))
        yield from (backlog, size, delivered, failed, failing, dropped)
        yield GaugeMetricFamily("notify_webhook_pending",
                                "events derived and not yet in the outbox", value=s.pending)
        yield CounterMetricFamily("notify_webhook_task_restarts",
                                  "webhook tasks restarted after they died", value=s.restarts)


__all__ = ["WebhookCollector"]
