"""notify: a group notification service with versioned views, virtual synchrony and atomic
multicast over WebSocket (see docs/architecture.md)."""

__version__ = "0.1.0"
