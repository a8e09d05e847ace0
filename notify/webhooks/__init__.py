"""Webhooks (issue 31, second part; docs/api.md "Webhooks"): the app backend hears of arrivals,
departures, occupancy and, if it asks, messages, as signed POSTs (Standard Webhooks), at least
once. An adapter on a running `NotifyServer`, beside the server API (a host layer; the core
never imports it):

- `config`: the `[[webhooks]]` entries and the `--webhook URL=SECRET` flag;
- `events`: what a stored view or message means for the backend (the view diff), pure;
- `backoff`: the retry delays, pure;
- `outbox`: the durable outbox (SQLite beside the log) and its per-group cursors;
- `source`: stored writes → events, and the catch-up from the log after a crash;
- `sender`: one endpoint's delivery loop (signing, POST, retries, in order);
- `metrics`: the Prometheus families; `service`: `Webhooks`, which wires and supervises it all.

Like `notify.api`, this `__init__` imports nothing.
"""
