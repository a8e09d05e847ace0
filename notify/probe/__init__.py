"""`notify probe`: a black-box prober (seed 002: Pub/Sub's probers publish and receive like a
client and alert on SLO burn). It joins a probe group on each target with two SDK clients,
publishes at a set rate and receives its own messages, reconnects and changes the view on
purpose, optionally publishes through the server API, and exports each SLI as a Prometheus
good/total counter pair. The SLIs, the SLOs on them and the alert rules: docs/slo.md.

It is a client of the service and nothing more: it imports the SDK, never the server (the
`probe` import-linter contract). The names load on first use, so `notify serve` (whose CLI
lists the `probe` subcommand) never imports the SDK nor the prober.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from notify.probe.config import ProbeConfig
    from notify.probe.ledger import Ledger, Settled
    from notify.probe.metrics import SLIS, ProbeMetrics
    from notify.probe.prober import Prober
    from notify.probe.session import Session
    from notify.probe.target import TargetProbe

_WHERE = {"ProbeConfig": "config", "Ledger": "ledger", "Settled": "ledger", "SLIS": "metrics",
          "ProbeMetrics": "metrics", "Prober": "prober", "Session": "session",
          "TargetProbe": "target"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"notify.probe.{module}"), name)


__all__ = ["SLIS", "Ledger", "ProbeConfig", "ProbeMetrics", "Prober", "Session", "Settled",
           "TargetProbe"]
