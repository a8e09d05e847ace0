"""`Prober`: every target's probe, supervised, and the SLIs served on `/metrics`.

Supervision (STYLE.md, OTP's one_for_one): each target's `TargetProbe` runs under its own
supervisor loop. A probe that fails (an error its loops do not expect: a prober bug) is logged,
counted in `notify_probe_restarts_total{target}` and started again after a backoff that doubles
up to `max_backoff`; one target's failure never stops another's probe, nor the metrics endpoint.
The metrics endpoint runs on this event loop (aiohttp), not in a thread of its own, so it stops
with the prober and nothing outlives `run()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Sequence

from aiohttp import web

from notify.probe.config import ProbeConfig
from notify.probe.metrics import ProbeMetrics
from notify.probe.target import TargetProbe

__all__ = ["Prober"]

log = logging.getLogger("notify.probe")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Prober:
    def __init__(self, targets: Sequence[str], config: ProbeConfig | None = None,
                 metrics: ProbeMetrics | None = None) -> None:
        if not targets:
            raise ValueError("a prober needs at least one target URL")
        if len(set(targets)) != len(targets):
            raise ValueError("a target is given twice")
        self.config = config or ProbeConfig()
        self.metrics = metrics or ProbeMetrics()
        self.run_id = secrets.token_hex(6)
        #: the probe of each target, the one running now (replaced when restarted)
        self.probes: dict[str, TargetProbe] = {}
        self.targets = list(targets)

    async def run(self, *, duration: float | None = None, metrics_port: int | None = None,
                  metrics_host: str = "127.0.0.1") -> None:
        """Probe every target until cancelled, or for `duration` seconds."""
        runner = None
        try:
            if metrics_port is not None:
                runner = await self._serve_metrics(metrics_host, metrics_port)
            async with asyncio.timeout(duration):
                async with asyncio.TaskGroup() as tg:
                    for t in self.targets:
                        tg.create_task(self._supervise(t), name=f"probe-{t}")
        except TimeoutError:
            if duration is None:
                raise
        finally:
            if runner is not None:
                await runner.cleanup()

    async def _supervise(self, target: str) -> None:
        c = self.config
        delay = c.backoff
        while True:
            probe = TargetProbe(target, c, self.metrics, self.run_id)
            self.probes[target] = probe
            started = asyncio.get_running_loop().time()
            try:
                await probe.run()
                return  # (only when every loop ended, which they do not)
            except Exception:
                log.exception("probe %s: failed; restarting in %.1f s", target, delay)
                self.metrics.restarts.labels(target).inc()
            if asyncio.get_running_loop().time() - started > c.max_backoff:
                delay = c.backoff  # it ran a good while: start the backoff over
            await asyncio.sleep(delay)
            delay = min(delay * 2, c.max_backoff)

    async def _serve_metrics(self, host: str, port: int) -> web.AppRunner:
        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=self.metrics.exposition(),
                                headers={"Content-Type": CONTENT_TYPE})

        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/healthz", healthz)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port, shutdown_timeout=1.0).start()
        except BaseException:
            with contextlib.suppress(Exception):
                await runner.cleanup()
            raise
        log.info("probe: SLIs on http://%s:%d/metrics", host, port)
        return runner
