"""`notify probe URL [URL...]`: the arguments and the entry point (notify/cli.py adds the
subcommand). Runs until SIGTERM or SIGINT, or for `--duration` seconds; either way it stops
gracefully: each session leaves the probe group (no member is left for the server to suspect)
and the exit code is 0."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import TYPE_CHECKING

from notify.probe.config import ProbeConfig

if TYPE_CHECKING:
    from notify.probe.prober import Prober

__all__ = ["SLI_SETTINGS", "add_arguments", "flag", "run"]

_D = ProbeConfig()

#: the `ProbeConfig` fields that define the SLIs and the deliberate faults, each an option
#: (`flag(name)`, seconds or a rate), with what it means (`--help` adds the default)
SLI_SETTINGS = {
    "rate": "SDK publishes per second per target",
    "publish_deadline": "seconds a publish may take to be answered and count good",
    "latency_threshold": "seconds from publish to receipt for a delivery to count good",
    "reconnect_every": "seconds between deliberate drops of the receiver's socket; 0: never",
    "resume_deadline": "seconds a resume may take",
    "view_change_every": "seconds between deliberate view changes (a member joins and leaves); "
                         "0: never",
    "view_change_threshold": "seconds from view_change to view_install for a view change to "
                             "count good",
}


def flag(name: str) -> str:
    """The option of `ProbeConfig` field `name`: `--publish-deadline`."""
    return "--" + name.replace("_", "-")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("urls", nargs="+", metavar="URL",
                   help="the targets (ws://HOST:PORT): one server, or every node of a cluster")
    p.add_argument("--group", default=_D.group, help=f"the probe group (default {_D.group})")
    for name, text in SLI_SETTINGS.items():
        default = getattr(_D, name)
        p.add_argument(flag(name), type=float, default=default,
                       help=f"{text} (default {default})")
    p.add_argument("--api", default=None, metavar="URL",
                   help="also publish through the server API at this URL (http://HOST:PORT)")
    p.add_argument("--key", default=os.environ.get("NOTIFY_API_KEY"),
                   help="with --api: a key's secret with the publish scope "
                        "(default: $NOTIFY_API_KEY)")
    p.add_argument("--api-rate", type=float, default=_D.api_rate,
                   help=f"server API publishes per second per target (default {_D.api_rate})")
    p.add_argument("--token", default=os.environ.get("NOTIFY_TOKEN"),
                   help="a token for the WebSocket connections (default: $NOTIFY_TOKEN)")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="serve the SLIs on http://HOST:PORT/metrics (default: not served)")
    p.add_argument("--metrics-host", default="127.0.0.1",
                   help="the address of --metrics-port (default 127.0.0.1)")
    p.add_argument("--duration", type=float, default=None,
                   help="stop after this many seconds (default: run until interrupted)")
    p.add_argument("--log-level", default="info")


def run(a: argparse.Namespace) -> int:
    from notify.probe.prober import Prober  # (the SDK and aiohttp: only when probing)

    if a.api is not None and not a.key:
        print("notify probe: --api needs --key (or $NOTIFY_API_KEY)", file=sys.stderr)
        return 2
    try:
        config = ProbeConfig(
            group=a.group, **{name: getattr(a, name) for name in SLI_SETTINGS}, api_url=a.api,
            api_key=a.key if a.api is not None else None, api_rate=a.api_rate, token=a.token)
        prober = Prober(a.urls, config)
    except ValueError as e:
        print(f"notify probe: {e}", file=sys.stderr)
        return 2
    return asyncio.run(_until_stopped(prober, a))


async def _until_stopped(prober: Prober, a: argparse.Namespace) -> int:
    """`prober.run()` until its duration, or a SIGTERM/SIGINT, which cancels it: the prober's
    stop closes its sessions (they leave the group) before we return."""
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    assert me is not None
    signalled: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        signalled.append(sig.name)
        me.cancel()

    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await prober.run(duration=a.duration, metrics_port=a.metrics_port,
                         metrics_host=a.metrics_host)
    except asyncio.CancelledError:
        if not signalled:
            raise
        print(f"notify probe: stopped ({signalled[0]})", file=sys.stderr)
    finally:  # (a signal after the run must not cancel this task as it returns)
        for sig in signals:
            loop.remove_signal_handler(sig)
    return 0
