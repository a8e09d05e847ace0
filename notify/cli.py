"""`notify` command line.

`notify serve` runs the server; `notify sub`, `notify pub` and `notify watch` try it from a
terminal: `notify watch doc-1` in one, `notify pub doc-1 '{"op": 1}'` in another.
`notify presence`, `notify history` and `notify remove` ask the server API (`--api URL --key
KEY`, docs/api.md), and `notify pub --api URL --key KEY` publishes through it without joining.
`notify probe URL...` is a black-box prober that exports the SLIs of docs/slo.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import ValidationError

from notify import eventloop
from notify.config import Settings
from notify.eventlog import EventLog

if TYPE_CHECKING:
    from client_sdk import ViewInstalled
    from notify.api.keys import Keyring
    from notify.server.app import NotifyServer
    from notify.storage.base import MessageLog

#: called once `notify serve` is listening (tools that embed it: `devtools.devdemo`)
OnReady = Callable[["NotifyServer"], object]

#: `notify serve` flags: (flag, settings section, type, help). Every flag defaults to "not given"
#: so that only the flags on the command line override the environment and the TOML file.
_SERVE_FLAGS: list[tuple[str, str, Any, str]] = [
    ("--host", "server", str, "interface to listen on (default 127.0.0.1)"),
    ("--port", "server", int, "port (default 8765; 0 = any free port)"),
    ("--data-dir", "server", str, "where the log and event logs live (default ./data)"),
    ("--durability", "server", str,
     "full (default): published after fsync, survives power loss; normal: a killed server"),
    ("--log-level", "server", str, "debug, info (default), warning, error"),
    ("--log-format", "server", str, "console (default) or json (one JSON object per line)"),
    ("--event-loop", "server", str, "auto (default: uvloop if installed), uvloop or asyncio"),
    ("--tls-cert", "server", str, "PEM certificate chain: serve wss:// (with --tls-key)"),
    ("--tls-key", "server", str, "PEM private key of --tls-cert"),
    ("--max-connections", "server", int, "open connections (default 100,000; 0 = no limit)"),
    ("--max-connections-per-ip", "server", int, "per client address (default 0 = no limit)"),
    ("--listen-backlog", "server", int,
     "connections the kernel queues before the server accepts them (default 4096)"),
    ("--shutdown-grace", "server", float, "seconds clients get to go on SIGTERM (default 5)"),
    ("--drain-delay", "server", float,
     "on SIGTERM, seconds of /readyz 503 before the listener closes (default 0)"),
    ("--heartbeat-interval", "timeouts", float, "default 5 s"),
    ("--heartbeat-timeout", "timeouts", float, "default 15 s"),
    ("--suspect-timeout", "timeouts", float, "default 3 s"),
    ("--install-hold", "timeouts", float, "default 0 s"),
    ("--flush-timeout", "timeouts", float, "default 5 s"),
    ("--ack-timeout", "timeouts", float, "default 10 s"),
    ("--hello-timeout", "timeouts", float, "close connections with no hello by then (10 s)"),
    ("--recovery-window", "timeouts", float,
     "after a restart, members may resume without a view change for this long (10 s)"),
    ("--write-timeout", "timeouts", float,
     "storage that has not finished a write by then stops the server (fail-stop, 30 s)"),
    ("--idle-group", "timeouts", float,
     "a group nobody is in leaves memory after this long; it comes back from the log (60 s)"),
    ("--quiet-group", "timeouts", float,
     "a group that accepted no message for this long lets its in-memory window go; members "
     "that resume later read from the log (60 s; 0: never)"),
    ("--max-frame-bytes", "limits", int, "default 1 MiB; larger frames close with 1009"),
    ("--max-outbound-frames", "limits", int, "slow-consumer bound (default 50,000)"),
    ("--max-outbound-bytes", "limits", int, "slow-consumer bound in bytes (default 16 MiB)"),
    ("--retain-messages", "limits", int,
     "messages the log keeps and serves per group (catch-up, history; default 100,000)"),
    ("--retain-bytes", "limits", int,
     "payload bytes the SQLite log keeps per group (default 64 MiB)"),
    ("--window-messages", "limits", int,
     "a loaded group's newest messages kept in memory for resumes (default 1,000; older "
     "ones within retention are read from the log)"),
    ("--window-bytes", "limits", int,
     "payload bytes of that in-memory window per group (default 1 MiB)"),
    ("--retain-age", "server", float, "seconds after which stored messages are deleted"),
    ("--max-groups-per-session", "limits", int, "default 1,000"),
    ("--max-group-members", "limits", int,
     "members one group may have; a join past it is refused group_full (default 1,000)"),
    ("--publish-rate", "limits", float, "publishes/s per connection (default 20,000; 0 = off)"),
    ("--publish-burst", "limits", int, "token bucket size (default 20,000)"),
    ("--max-pending-atomic", "limits", int, "unresolved atomics per sender (default 10,000)"),
    ("--auth-hs256-secret", "auth", str,
     "HS256 shared secret (prefer NOTIFY_AUTH__HS256_SECRET: flags show in `ps`)"),
    ("--auth-public-key-file", "auth", str, "PEM public key: RS256/ES256 tokens"),
    ("--auth-jwks-file", "auth", str, "JWKS file: RS256/ES256 tokens, key chosen by kid"),
    ("--auth-audience", "auth", str, "required `aud`"),
    ("--auth-issuer", "auth", str, "required `iss`"),
    ("--auth-leeway", "auth", float, "seconds of clock skew on exp/nbf (default 5)"),
    ("--auth-policy-file", "auth", str, "server-side grants by member (TOML or JSON)"),
    ("--api-port", "api", int,
     "serve the server API (HTTP/JSON, /api/v1, docs/api.md) on this port; needs a key"),
    ("--api-rate", "api", float, "server API requests/s per key (default 1,000; 0 = no limit)"),
    ("--api-burst", "api", int, "their token bucket's size (default 2,000)"),
]


def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, metavar="TOML",
                   help="TOML configuration file (also NOTIFY_CONFIG). Precedence: flags > "
                        "NOTIFY_* environment > this file > defaults")
    p.add_argument("--store", choices=["sqlite", "memory", "jetstream"],
                   default=argparse.SUPPRESS,
                   help="sqlite: DATA_DIR/notify.db, survives restarts (default); memory: does "
                        "not; jetstream: a replicated NATS JetStream stream (--nats, the "
                        "cluster extra, docs/cluster.md)")
    p.add_argument("--nats", type=lambda v: [u for u in v.split(",") if u],
                   default=argparse.SUPPRESS, metavar="URL[,URL]",
                   help="the NATS servers of the JetStream log")
    p.add_argument("--nats-stream", default=argparse.SUPPRESS,
                   help="the JetStream stream of the log (default NOTIFY)")
    p.add_argument("--nats-replicas", type=int, default=argparse.SUPPRESS,
                   help="its replicas when it is created (default 3)")
    p.add_argument("--cluster", type=lambda v: [u for u in v.split(",") if u],
                   default=argparse.SUPPRESS, metavar="URL[,URL]",
                   help="cluster mode on these NATS servers (JetStream; docs/cluster.md)")
    p.add_argument("--node-id", default=argparse.SUPPRESS, metavar="NAME",
                   help="this node's name in the cluster (letters, digits, _ and -)")
    p.add_argument("--replicas", type=int, default=argparse.SUPPRESS,
                   help="cluster mode: replicas of the log and the leases (default 3)")
    p.add_argument("--lease-ttl", type=float, default=argparse.SUPPRESS,
                   help="cluster mode: seconds a shard lease lives unrenewed (default 10)")
    p.add_argument("--standby", action="store_true", default=argparse.SUPPRESS,
                   help="cluster mode: a hot standby, owning no group while an active node "
                        "lives")
    p.add_argument("--event-log", nargs="?", const="", default=argparse.SUPPRESS, metavar="DIR",
                   help="write the delivery event log (JSON Lines); default DIR: DATA_DIR/events")
    p.add_argument("--origin", action="append", dest="origins", default=argparse.SUPPRESS,
                   metavar="ORIGIN", help="allowed browser Origin (repeat; default: any)")
    p.add_argument("--auth-required", action="store_true", default=argparse.SUPPRESS,
                   help="refuse to start without a token key")
    p.add_argument("--api-key", action="append", dest="api_keys", default=argparse.SUPPRESS,
                   metavar="NAME=SECRET",
                   help="a server API key with every scope, for every group (repeat; replaces "
                        "the config file's [[api.keys]]; prefer the file, flags show in `ps`)")
    p.add_argument("--webhook", action="append", dest="webhooks", default=argparse.SUPPRESS,
                   metavar="URL=whsec_...",
                   help="POST every membership and occupancy event to URL, signed with this "
                        "Standard Webhooks secret (repeat; replaces the config file's "
                        "[[webhooks]], where messages and the delivery knobs are; docs/api.md)")
    for flag, _, typ, help_ in _SERVE_FLAGS:
        p.add_argument(flag, type=typ, default=argparse.SUPPRESS, help=help_)


def settings_from_args(a: argparse.Namespace) -> Settings:
    """Settings from the TOML file, the environment and the flags given, in that precedence."""
    given = vars(a)
    cli: dict[str, Any] = {"server": {}, "timeouts": {}, "limits": {}, "auth": {}, "api": {}}
    for flag, section, _, _ in _SERVE_FLAGS:
        name = flag[2:].replace("-", "_")
        if name in given:
            field = name.removeprefix(f"{section}_") if section in ("auth", "api") else name
            cli[section][field] = given[name]
    if "api_keys" in given:
        from notify.api.keys import parse_flag

        try:
            pairs = [parse_flag(text) for text in given["api_keys"]]
        except ValueError as e:
            raise SystemExit(f"notify serve: {e}") from None
        cli["api"]["keys"] = [{"name": n, "secret": secret} for n, secret in pairs]
    if "webhooks" in given:
        from notify.webhooks.config import parse_flag as parse_webhook

        try:
            cli["webhooks"] = [parse_webhook(text) for text in given["webhooks"]]
        except ValueError as e:
            raise SystemExit(f"notify serve: {e}") from None
    for name in ("store", "event_log", "origins", "nats", "nats_stream", "nats_replicas",
                 "cluster", "node_id", "replicas", "lease_ttl", "standby"):
        if name in given:
            cli["server"][name] = given[name]
    if "auth_required" in given:
        cli["auth"]["required"] = True
    try:
        return Settings.load(config_file=a.config or os.environ.get("NOTIFY_CONFIG"),
                         cli={k: v for k, v in cli.items() if v})
    except (ValidationError, FileNotFoundError, ValueError) as e:
        raise SystemExit(f"notify serve: bad configuration: {e}") from None


async def _serve(a: argparse.Namespace, on_ready: OnReady | None = None) -> None:
    from notify.server.app import NotifyServer
    from notify.server.auth import TokenVerifier
    from notify.storage.memory import MemoryLog
    from notify.storage.sqlite import SqliteLog

    settings: Settings = a.settings
    srv, auth = settings.server, settings.auth
    log = structlog.get_logger("notify")
    log.info("config", **settings.masked())
    config = settings.core()
    verifier = None
    if auth.enabled:
        verifier = TokenVerifier.from_files(
            secret=auth.hs256_secret.get_secret_value() if auth.hs256_secret else None,
            public_key_file=str(auth.public_key_file) if auth.public_key_file else None,
            jwks_file=str(auth.jwks_file) if auth.jwks_file else None,
            policy_file=str(auth.policy_file) if auth.policy_file else None,
            algorithms=tuple(auth.algorithms), audience=auth.audience, issuer=auth.issuer,
            leeway=auth.leeway, claim=auth.claim)
    events = None
    if srv.event_log is not None:
        events = EventLog(srv.event_log or Path(srv.data_dir) / "events", "server")
    Path(srv.data_dir).mkdir(parents=True, exist_ok=True)
    store: MessageLog
    cluster = None
    # the JetStream log: the stream keeps each group's newest `most` records of each kind, and
    # its prune applies each group's rule below that (notify/storage/jetstream.py, "Retention")
    most = max([config.limits.retain_messages, *(r.messages for r in config.retention)])
    if srv.cluster:
        from notify.cluster.node import ClusterConfig, ClusterNode

        assert srv.node_id is not None
        store = await _jetstream(
            srv.cluster, stream=srv.nats_stream, replicas=srv.replicas,
            max_msgs_per_subject=most, owner=srv.node_id, retention=config.retention_for,
            max_payload_bytes=config.limits.max_frame_bytes)
        cluster = ClusterNode(ClusterConfig(srv.cluster, srv.node_id, replicas=srv.replicas,
                                            stream=srv.nats_stream, lease_ttl=srv.lease_ttl,
                                            node_ttl=min(3.0, srv.lease_ttl / 2),
                                            heartbeat=min(1.0, srv.lease_ttl / 6),
                                            standby=srv.standby))
    elif srv.store == "jetstream":
        # (no stream-wide max_age: it would empty a quiet group's subjects, the head and the
        # pruned record too; the rules' ages are applied by prune, which keeps them)
        store = await _jetstream(
            srv.nats, stream=srv.nats_stream, replicas=srv.nats_replicas,
            max_msgs_per_subject=most, retention=config.retention_for,
            max_payload_bytes=config.limits.max_frame_bytes)
    elif srv.store == "sqlite":
        store = SqliteLog(Path(srv.data_dir) / "notify.db", durability=srv.durability,
                          retain_messages=config.limits.retain_messages,
                          retain_age=srv.retain_age, retain_bytes=config.limits.retain_bytes,
                          retention=config.retention_for)
    else:
        store = MemoryLog(config.limits.retain_messages)
    keys = _api_keys(settings)  # (a bad key stops the start before anything listens)
    server = NotifyServer(config, host=srv.host, port=srv.port, event_log=events, store=store,
                          verifier=verifier, origins=srv.origins or None,
                          ssl=settings.ssl_context(), max_connections=srv.max_connections,
                          max_connections_per_ip=srv.max_connections_per_ip,
                          listen_backlog=srv.listen_backlog,
                          shutdown_grace=srv.shutdown_grace, drain_delay=srv.drain_delay,
                          placement=cluster)
    hooks = None
    if settings.webhooks:
        from notify.webhooks.service import Webhooks

        if cluster is not None:
            from notify.webhooks.jsoutbox import JetStreamOutbox

            # the outbox beside the log on JetStream; each node catches up the shards it
            # acquires, and delivers the endpoints whose shard it holds (docs/cluster.md)
            servers, stream, replicas = srv.cluster, f"{srv.nats_stream}_WEBHOOKS", srv.replicas
            hooks = Webhooks(server, settings.webhooks, f"jetstream:{stream}",
                             opener=lambda caps: JetStreamOutbox(servers, caps, stream=stream,
                                                                 replicas=replicas),
                             shards=cluster,
                             recheck_after=2 * srv.lease_ttl + config.timeouts.write_timeout)
        else:
            # the outbox beside the log (memory log: in memory too; docs/api.md "Webhooks");
            # it catches up on what a crash left out before the server listens
            hooks = Webhooks(server, settings.webhooks,
                             ":memory:" if srv.store == "memory"
                             else Path(srv.data_dir) / "webhooks.db",
                             durability=srv.durability)
        await hooks.start()
    try:
        await server.start()
    except BaseException:  # (its port taken...): the webhooks' tasks, session and outbox end
        if hooks is not None:
            await hooks.stop()
        raise
    api = None
    if keys is not None:
        from notify.api.app import ApiServer

        assert settings.api.port is not None
        api = ApiServer(server, keys, host=srv.host, port=settings.api.port, ssl=server.ssl,
                        rate=settings.api.rate, burst=settings.api.burst)
        try:
            await api.start()
        except OSError as e:
            await api.stop()  # (what it set up before the bind failed)
            await server.stop()
            if hooks is not None:
                await hooks.stop()
            raise SystemExit(f"notify serve: the server API cannot listen on "
                             f"{srv.host}:{settings.api.port}: {e}") from None
    if on_ready is not None:
        on_ready(server)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    halted = asyncio.ensure_future(server.halted.wait())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({halted, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if server.halt_reason is not None:
        # Fail-stop (G13): nothing more is sent or stored; a restart recovers from the log.
        log.critical("fail_stop", reason=server.halt_reason,
                     detail="the server stopped rather than break a promise; restart it")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_HALTED)  # now: no graceful shutdown, no task may send anything more
    halted.cancel()
    log.info("shutting_down", connections=server.connection_count)
    if api is not None:
        await api.stop()
    await server.stop()
    if hooks is not None:  # after the server: its last writes were hooked
        await hooks.stop()
    if server.halt_reason is not None:  # a part died while it drained (G13): say so, non-zero
        log.critical("fail_stop", reason=server.halt_reason,
                     detail="the server stopped rather than break a promise; restart it")
        raise SystemExit(EXIT_HALTED)
    log.info("stopped")


async def _jetstream(servers: list[str], **kw: Any) -> MessageLog:
    """The JetStream log, made off the loop (it connects). NATS servers whose `max_payload`
    cannot hold the record of the largest message stop the start, saying what to change."""
    from notify.storage.jetstream import JetStreamLog, MaxPayloadTooSmall

    try:
        return await asyncio.to_thread(JetStreamLog, servers, **kw)
    except MaxPayloadTooSmall as e:
        raise SystemExit(f"notify serve: {e}") from None


def _api_keys(settings: Settings) -> Keyring | None:
    """The server API's keys (None: no API)."""
    if settings.api.port is None:
        return None
    from notify.api.keys import ApiKey, Keyring

    try:
        return Keyring(ApiKey.of(k.name, secret=k.secret.get_secret_value() if k.secret else None,
                                 sha256=k.sha256, scopes=k.scopes, groups=k.groups)
                       for k in settings.api.keys)
    except ValueError as e:
        raise SystemExit(f"notify serve: bad configuration: {e}") from None


#: exit status of `notify serve` after a fail-stop (EX_SOFTWARE)
EXIT_HALTED = 70


def _client_args(p: argparse.ArgumentParser) -> None:
    import os

    p.add_argument("group")
    p.add_argument("--url", default="ws://127.0.0.1:8765")
    p.add_argument("--member", default=None,
                   help="member id (default: the token's subject, or cli-<random>)")
    p.add_argument("--token", default=os.environ.get("NOTIFY_TOKEN"),
                   help="JWT for a server that checks tokens (default: $NOTIFY_TOKEN)")
    p.add_argument("--accept-from", choices=["members", "any"], default="members")


def _member(a: argparse.Namespace) -> str:
    import secrets

    if a.member:
        return str(a.member)
    if a.token:  # the server takes the member id from the token: ask for that one
        import jwt

        sub = jwt.decode(a.token, options={"verify_signature": False}).get("sub")
        if isinstance(sub, str):
            return sub
    return f"cli-{secrets.token_hex(3)}"


def _payload(text: str) -> object:
    import orjson

    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text  # not JSON: send it as a string


async def _pub(a: argparse.Namespace) -> int:
    from client_sdk import NotifyError, PublishRejected, ServerAPI, connect

    if a.api is not None:  # through the server API: no join, so no view change either
        if a.same_view:
            print("notify: --same-view is for members; the server API publishes into the "
                  "current view", file=sys.stderr)
            return 2
        if not a.key:
            print("notify: --api needs --key (or $NOTIFY_API_KEY)", file=sys.stderr)
            return 2
        try:
            async with ServerAPI(a.api, a.key) as api:
                p = await api.publish(a.group, _payload(a.message), order=a.order,
                                      atomic=a.atomic, idempotency_key=a.idempotency_key)
        except NotifyError as e:
            print(f"notify: {e}", file=sys.stderr)
            return 2
        line = f"published offset={p.offset} id={p.id}"
        if a.atomic:
            line += f" committed={p.committed}"
        print(line + (" (replayed)" if p.replayed else ""))
        return 0
    try:
        async with connect(a.url, member=_member(a), token=a.token) as c:
            group = await c.join(a.group)
            try:
                r = await group.publish(_payload(a.message), order=a.order, atomic=a.atomic,
                                        same_view=a.same_view)
            except PublishRejected as e:
                print(f"rejected: {e.code}", file=sys.stderr)
                return 1
            line = f"published offset={r.offset} id={r.id}"
            if a.atomic:
                line += f" committed={r.committed}" + (f" reason={r.reason}" if r.reason else "")
            print(line)
            await group.leave()
    except NotifyError as e:
        print(f"notify: {e}", file=sys.stderr)
        return 2
    return 0


async def _sub(a: argparse.Namespace, *, views: bool) -> int:
    """Print the group's events until interrupted; reconnects and resumes by itself."""
    import orjson

    from client_sdk import Message, NotifyError, ViewChanging, ViewInstalled, connect, user_of

    try:
        async with connect(a.url, member=_member(a), token=a.token) as c:
            if views:
                c.on_state_change(lambda old, new: print(f"# connection {new.value}", flush=True))
            group = await c.join(a.group, accept_from=a.accept_from)
            async for e in group:
                if isinstance(e, Message):
                    body = orjson.dumps(e.payload).decode()
                    print(f"{e.offset} {e.stream}#{e.seq} {user_of(e.sender)}: {body}"
                          if views else body, flush=True)
                elif views and isinstance(e, ViewInstalled):
                    print(_view_line(e), flush=True)
                elif views and isinstance(e, ViewChanging):
                    print(f"# view {e.proposed} proposed ({e.reason}): {', '.join(e.members)}",
                          flush=True)
                elif views:
                    print(f"# {type(e).__name__} {e}", flush=True)
    except NotifyError as e:
        print(f"notify: {e}", file=sys.stderr)
        return 2
    return 0


def _api_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("group")
    url, key = os.environ.get("NOTIFY_API_URL"), os.environ.get("NOTIFY_API_KEY")
    p.add_argument("--api", default=url, required=url is None, metavar="URL",
                   help="the server API (`notify serve --api-port`): http://HOST:PORT "
                        "(default: $NOTIFY_API_URL)")
    p.add_argument("--key", default=key, required=key is None,
                   help="an API key's secret with the read scope (admin for remove; default: "
                        "$NOTIFY_API_KEY; "
                        "flags show in `ps`)")
    p.add_argument("--log-level", default="warning")


async def _presence(a: argparse.Namespace) -> int:
    """Who is in the group, by user, through the server API (no join)."""
    from client_sdk import NotifyError, ServerAPI

    try:
        async with ServerAPI(a.api, a.key) as api:
            view = await api.group(a.group)
    except NotifyError as e:
        print(f"notify: {e}", file=sys.stderr)
        return 2
    print(f"view {view.version}: {len(view.users)} users, {len(view.members)} instances")
    for user, instances in view.users.items():
        print(f"{user}: {', '.join(instances)}")
    return 0


async def _history(a: argparse.Namespace) -> int:
    """The group's messages from the log through the server API (no join), one per line:
    `offset stream#seq sender: payload`, or the API's JSON objects with --json."""
    import orjson

    from client_sdk import NotifyError, ServerAPI
    from notify.api.openapi import MAX_LIMIT

    try:
        async with ServerAPI(a.api, a.key) as api:
            n = 0
            async for m in api.messages(a.group, after=a.after, page=min(a.limit, MAX_LIMIT)):
                if a.json:
                    print(orjson.dumps(m).decode())  # (its fields are the API's, in order)
                else:
                    print(f"{m.offset} {m.stream}#{m.seq} {m.sender}: "
                          f"{orjson.dumps(m.payload).decode()}")
                n += 1
                if n >= a.limit:
                    break
    except NotifyError as e:
        print(f"notify: {e}", file=sys.stderr)
        return 2
    return 0


async def _remove(a: argparse.Namespace) -> int:
    """Remove a member (or every instance of a user) from a group through the server API."""
    from client_sdk import NotifyError, ServerAPI

    try:
        async with ServerAPI(a.api, a.key) as api:
            r = await api.remove(a.group, a.member)
    except NotifyError as e:
        print(f"notify: {e}", file=sys.stderr)
        return 2
    print(f"removed from {r.group} (view {r.version}): {', '.join(r.removed)}")
    return 0


def _view_line(e: ViewInstalled) -> str:
    """A view as `notify watch` shows it: the users present (with how many instances, when
    more than one), who arrived and who left, then the instances that changed."""
    users = ", ".join(u if len(ms) == 1 else f"{u} x{len(ms)}" for u, ms in e.users.items())
    came = f" arrived: {','.join(e.users_joined)}" if e.users_joined else ""
    went = f" left: {','.join(e.users_left)}" if e.users_left else ""
    moved = " ".join([*(f"+{m}" for m in e.joined), *(f"-{m}" for m in e.left)])
    return f"view {e.view}: {users}{came}{went} ({moved})" if moved else \
        f"view {e.view}: {users}{came}{went}"


def main(argv: list[str] | None = None, *, on_ready: OnReady | None = None) -> int:
    """The `notify` command. `on_ready(server)` is called once `notify serve` listens."""
    parser = argparse.ArgumentParser(prog="notify", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    _serve_args(sub.add_parser("serve", help="run the notification server"))
    p = sub.add_parser("pub", help="publish one message to a group")
    _client_args(p)
    p.add_argument("message", help="JSON payload (or any text, sent as a string)")
    p.add_argument("--order", choices=["fifo", "total"], default="fifo")
    p.add_argument("--atomic", action="store_true", help="all-or-nothing; prints the outcome")
    p.add_argument("--same-view", action="store_true")
    p.add_argument("--api", default=None, metavar="URL",
                   help="publish through the server API (http://HOST:PORT) as the key's "
                        "trusted sender, without joining the group")
    p.add_argument("--key", default=os.environ.get("NOTIFY_API_KEY"),
                   help="with --api: an API key's secret with the publish scope (default: "
                        "$NOTIFY_API_KEY)")
    p.add_argument("--idempotency-key", default=None,
                   help="with --api: the publish id (a retry with it is delivered once)")
    _client_args(sub.add_parser("sub", help="print a group's messages, one JSON per line"))
    _client_args(sub.add_parser("watch", help="print a group's views and messages as they change"))
    for name in ("pub", "sub", "watch"):
        sub.choices[name].add_argument("--log-level", default="warning")
    _api_args(sub.add_parser("presence", help="a group's view and users, through the server "
                                              "API (docs/api.md)"))
    p = sub.add_parser("history", help="a group's messages from the log, through the server "
                                       "API, one per line")
    _api_args(p)
    p.add_argument("--after", type=int, default=0, help="from after this offset (default 0)")
    p.add_argument("--limit", type=int, default=1_000_000,
                   help="print at most this many (default: every one the log holds)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p = sub.add_parser("remove", help="remove a member, or every instance of a user, from a "
                                      "group, through the server API (admin scope)")
    _api_args(p)
    p.add_argument("member", help="a member id (user#instance) or a user id (every instance)")
    from notify.probe import cli as probe_cli  # (the SDK and aiohttp: loaded for `probe` only)

    probe_cli.add_arguments(sub.add_parser(
        "probe", help="a black-box prober: publish and receive like a client, export the SLIs "
                      "(docs/slo.md)"))
    a = parser.parse_args(argv)
    log_format = "console"
    if a.cmd == "serve":
        a.settings = settings_from_args(a)
        a.log_level, log_format = a.settings.server.log_level, a.settings.server.log_format
    level = getattr(logging, a.log_level.upper(), logging.INFO)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(message)s")
    # one line per connection is noise at INFO; the delivery event log records them
    logging.getLogger("websockets").setLevel(logging.WARNING)
    processors: list[Any] = [structlog.contextvars.merge_contextvars,
                             structlog.processors.add_log_level,
                             structlog.processors.TimeStamper(fmt="iso", utc=True)]
    if log_format == "json":
        processors += [structlog.processors.format_exc_info,
                       structlog.processors.JSONRenderer()]
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(processors=processors,
                        wrapper_class=structlog.make_filtering_bound_logger(level))
    try:
        if a.cmd == "serve":
            eventloop.run(_serve(a, on_ready), a.settings.server.event_loop)
        elif a.cmd == "pub":
            return asyncio.run(_pub(a))
        elif a.cmd == "presence":
            return asyncio.run(_presence(a))
        elif a.cmd == "history":
            return asyncio.run(_history(a))
        elif a.cmd == "remove":
            return asyncio.run(_remove(a))
        elif a.cmd == "probe":
            return probe_cli.run(a)
        else:
            return asyncio.run(_sub(a, views=a.cmd == "watch"))
    except KeyboardInterrupt:
        return 130
    except OSError as e:
        print(f"notify: cannot reach {getattr(a, 'url', '')}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
