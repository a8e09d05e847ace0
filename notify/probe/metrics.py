"""The prober's SLIs as Prometheus good/total counter pairs (docs/slo.md).

Each SLI is `good_total / total` over a window, so each is exported as two counters that move
together: `notify_probe_<sli>_total` counts every event, `notify_probe_<sli>_good_total` the
good ones. A pair (rather than a success and a failure counter) is what the SRE workbook's
recording rules divide, and a scrape that reads one counter before the other can only make the
ratio look worse, never better than 1. Labels: `target` (the URL probed) and, for publish and
delivery, `path` (`sdk` or `api`).

The prober has its own `CollectorRegistry`: several probers in one process (tests) never share
counts, and nothing of the server's metrics is mixed in.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["SLIS", "ProbeMetrics"]

#: SLI -> whether it has a `path` label
SLIS = {"publish": True, "delivery": True, "resume": False, "view_change": False}

_DOC = {
    "publish": "probe publishes; good: answered `published` within the publish deadline",
    "delivery": "probe messages published; good: received within the latency threshold",
    "resume": "deliberate reconnects of the receiver; good: resumed with no view change",
    "view_change": "view changes the receiver saw proposed; good: installed within the "
                   "view-change threshold",
}

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ProbeMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self._total: dict[str, Counter] = {}
        self._good: dict[str, Counter] = {}
        for sli, has_path in SLIS.items():
            labels = ["target", "path"] if has_path else ["target"]
            self._total[sli] = Counter(f"notify_probe_{sli}", _DOC[sli], labels, registry=r)
            self._good[sli] = Counter(f"notify_probe_{sli}_good", _DOC[sli] + " (the good ones)",
                                      labels, registry=r)
        self.latency = Histogram("notify_probe_delivery_seconds",
                                 "publish call → receipt, of the probe messages received in time",
                                 ["target", "path"], buckets=_LATENCY_BUCKETS, registry=r)
        self.view_change_seconds = Histogram(
            "notify_probe_view_change_seconds", "view_change → view_install at the receiver",
            ["target"], buckets=_LATENCY_BUCKETS, registry=r)
        self.late = Counter("notify_probe_late_deliveries",
                            "probe messages received after they were counted bad (late), or "
                            "twice", ["target", "path"], registry=r)
        self.outstanding = Gauge("notify_probe_outstanding",
                                 "probe events awaiting their answer, delivery or install",
                                 ["target"], registry=r)
        self.restarts = Counter("notify_probe_restarts",
                                "probes of a target restarted after a failure (a prober bug, or "
                                "an error it does not expect)", ["target"], registry=r)
        self.sessions = Counter("notify_probe_sessions",
                                "sender/receiver sessions opened (a new one after the last "
                                "was lost for good)", ["target"], registry=r)

    def event(self, sli: str, target: str, good: bool, path: str | None = None) -> None:
        """Count one event of `sli` (good or bad)."""
        labels = (target,) if path is None else (target, path)
        self._total[sli].labels(*labels).inc()
        if good:
            self._good[sli].labels(*labels).inc()

    def count(self, sli: str, target: str, *, good: bool = False,
              path: str | None = None) -> float:
        """The events of `sli` so far (the good ones with `good=True`), summed over paths unless
        `path` is given. For tests and reports."""
        name = f"notify_probe_{sli}{'_good' if good else ''}_total"
        total = 0.0
        for metric in self.registry.collect():
            for s in metric.samples:
                if (s.name == name and s.labels.get("target") == target
                        and (path is None or s.labels.get("path") == path)):
                    total += s.value
        return total

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
