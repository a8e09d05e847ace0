"""`notify probe URL [URL...]`: the arguments and the entry point (notify/cli.py adds the
subcommand). Runs until interrupted, or for `--duration` seconds."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from notify.probe.config import ProbeConfig

__all__ = ["add_arguments", "run"]

_D = ProbeConfig()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("urls", nargs="+", metavar="URL",
                   help="the targets (ws://HOST:PORT): one server, or every node of a cluster")
    p.add_argument("--group", default=_D.group, help=f"the probe group (default {_D.group})")
    p.add_argument("--rate", type=float, default=_D.rate,
                   help=f"SDK publishes per second per target (default {_D.rate})")
    p.add_argument("--publish-deadline", type=float, default=_D.publish_deadline,
                   help="seconds a publish may take to be answered and count good "
                        f"(default {_D.publish_deadline})")
    p.add_argument("--latency-threshold", type=float, default=_D.latency_threshold,
                   help="seconds from publish to receipt for a delivery to count good "
                        f"(default {_D.latency_threshold})")
    p.add_argument("--reconnect-every", type=float, default=_D.reconnect_every,
                   help="seconds between deliberate drops of the receiver's socket; 0: never "
                        f"(default {_D.reconnect_every})")
    p.add_argument("--resume-deadline", type=float, default=_D.resume_deadline,
                   help=f"seconds a resume may take (default {_D.resume_deadline})")
    p.add_argument("--view-change-every", type=float, default=_D.view_change_every,
                   help="seconds between deliberate view changes (a member joins and leaves); "
                        f"0: never (default {_D.view_change_every})")
    p.add_argument("--view-change-threshold", type=float, default=_D.view_change_threshold,
                   help="seconds from view_change to view_install for a view change to count "
                        f"good (default {_D.view_change_threshold})")
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
            group=a.group, rate=a.rate, publish_deadline=a.publish_deadline,
            latency_threshold=a.latency_threshold, reconnect_every=a.reconnect_every,
            resume_deadline=a.resume_deadline, view_change_every=a.view_change_every,
            view_change_threshold=a.view_change_threshold, api_url=a.api,
            api_key=a.key if a.api is not None else None, api_rate=a.api_rate, token=a.token)
        prober = Prober(a.urls, config)
    except ValueError as e:
        print(f"notify probe: {e}", file=sys.stderr)
        return 2
    asyncio.run(prober.run(duration=a.duration, metrics_port=a.metrics_port,
                           metrics_host=a.metrics_host))
    return 0
