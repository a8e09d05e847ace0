"""Server configuration: one model, three sources, one precedence order.

    command-line flags > environment (NOTIFY_*) > TOML file (--config, NOTIFY_CONFIG) > defaults

Sections mirror the TOML file: `[server]`, `[timeouts]`, `[limits]`, `[auth]`, `[api]` (with
`[[api.keys]]`), `[[retention]]`, `[[webhooks]]`. An environment variable names its section and
field joined by a double underscore: `NOTIFY_AUTH__HS256_SECRET`,
`NOTIFY_LIMITS__PUBLISH_RATE`, `NOTIFY_SERVER__PORT`. Secrets are `SecretStr`: `masked()` (what
the server prints at start-up) shows them as `**********`. See docs/operations.md.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from notify.core import CoreConfig, Limits, Retention, Timeouts
from notify.webhooks.config import WebhookSettings, check_unique

_D, _L = Timeouts(), Limits()


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    data_dir: Path = Path("./data")
    store: Literal["sqlite", "memory", "jetstream"] = "sqlite"
    #: the NATS servers of the JetStream log (`store = "jetstream"`, docs/cluster.md)
    nats: list[str] = Field(default_factory=list)
    nats_stream: str = "NOTIFY"
    nats_replicas: int = Field(default=3, ge=1, le=5)
    #: cluster mode (docs/cluster.md): the NATS servers; the log, leases and routing between
    #: nodes all go through them (the store is then JetStream on them)
    cluster: list[str] = Field(default_factory=list)
    #: this node's name in the cluster (one NATS subject token, unique per node)
    node_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    #: the replicas of the log stream and KV buckets when cluster mode creates them
    replicas: int = Field(default=3, ge=1, le=5)
    #: seconds a shard lease lives without renewal: about how long a dead owner's groups
    #: wait before another node takes them
    lease_ttl: float = Field(default=10.0, ge=0.5, le=300)
    #: a hot standby: an edge that owns no group while a node that is not a standby lives,
    #: and takes them all when the last one dies (docs/cluster.md, "Standby")
    standby: bool = False
    durability: Literal["normal", "full"] = "full"
    #: delete stored messages older than this many seconds (None: keep them; the count bound
    #: `limits.retain_messages` applies in any case)
    retain_age: float | None = Field(default=None, gt=0)
    #: None: off; "": DATA_DIR/events; else the directory
    event_log: str | None = None
    log_level: str = "info"
    log_format: Literal["console", "json"] = "console"
    #: "auto": uvloop when it is installed (`notify[fast]`), else asyncio's loop
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: allowed browser Origins (empty: any). Clients that send no Origin are not browsers.
    origins: list[str] = Field(default_factory=list)
    max_connections: int = Field(default=100_000, ge=0)
    max_connections_per_ip: int = Field(default=0, ge=0)
    #: connections the kernel completes while the server has not accepted them yet (`listen`'s
    #: backlog; the kernel caps it at net.core.somaxconn). asyncio's default of 100 overflowed
    #: when 2,000 clients connected at once (a restart's reconnections): the SYNs dropped were
    #: sent again a second later, and accepting them took 2.5-4.7 times as long
    listen_backlog: int = Field(default=4096, ge=1)
    shutdown_grace: float = Field(default=5.0, ge=0)
    #: on SIGTERM, seconds of `/readyz` 503 before the listener closes (load balancer drain)
    drain_delay: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _cluster(self) -> ServerSettings:
        if self.cluster and not self.node_id:
            raise ValueError("cluster mode needs this node's name (node_id, --node-id)")
        if self.node_id and not self.cluster:
            raise ValueError("node_id is for cluster mode: give the NATS servers (cluster, "
                             "--cluster)")
        if self.standby and not self.cluster:
            raise ValueError("standby is for cluster mode: give the NATS servers (cluster, "
                             "--cluster)")
        if self.cluster:
            if self.store == "memory":
                raise ValueError("cluster mode keeps the log on JetStream: store = \"memory\" "
                                 "cannot be used with it")
            # the log is the cluster's JetStream (what the start-up `config` line says too)
            self.store, self.nats = "jetstream", list(self.cluster)
        return self

    @model_validator(mode="after")
    def _nats_urls(self) -> ServerSettings:
        if self.store == "jetstream" and not self.nats:
            raise ValueError("store = \"jetstream\" needs the NATS servers (nats, --nats)")
        return self

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        return self


class TimeoutSettings(_Section):
    heartbeat_interval: float = Field(default=_D.heartbeat_interval, gt=0)
    heartbeat_timeout: float = Field(default=_D.heartbeat_timeout, gt=0)
    suspect_timeout: float = Field(default=_D.suspect_timeout, ge=0)
    install_hold: float = Field(default=_D.install_hold, ge=0)
    flush_timeout: float = Field(default=_D.flush_timeout, gt=0)
    ack_timeout: float = Field(default=_D.ack_timeout, gt=0)
    hello_timeout: float = Field(default=_D.hello_timeout, gt=0)
    recovery_window: float = Field(default=_D.recovery_window, ge=0)
    write_timeout: float = Field(default=_D.write_timeout, gt=0)
    clash_hold: float = Field(default=_D.clash_hold, ge=0)
    idle_group: float = Field(default=_D.idle_group, ge=0)
    quiet_group: float = Field(default=_D.quiet_group, ge=0)

    @model_validator(mode="after")
    def _heartbeat(self) -> TimeoutSettings:
        if not self.heartbeat_interval < self.heartbeat_timeout:
            raise ValueError("heartbeat_interval must be below heartbeat_timeout")
        return self


class LimitSettings(_Section):
    max_frame_bytes: int = Field(default=_L.max_frame_bytes, ge=1024)
    #: the edge's JSON parser stops at 200 levels; 128 leaves room for the frame around it
    max_payload_depth: int = Field(default=_L.max_payload_depth, ge=1, le=128)
    max_outbound_frames: int = Field(default=_L.max_outbound_frames, ge=1)
    max_outbound_bytes: int = Field(default=_L.max_outbound_bytes, ge=1)
    retain_messages: int = Field(default=_L.retain_messages, ge=1)
    retain_bytes: int = Field(default=_L.retain_bytes, ge=1)
    window_messages: int = Field(default=_L.window_messages, ge=1)
    window_bytes: int = Field(default=_L.window_bytes, ge=1)
    max_groups_per_session: int = Field(default=_L.max_groups_per_session, ge=1)
    max_group_members: int = Field(default=_L.max_group_members, ge=1)
    max_instances_per_user: int = Field(default=_L.max_instances_per_user, ge=1)
    publish_rate: float = Field(default=_L.publish_rate, ge=0)
    publish_burst: int = Field(default=_L.publish_burst, ge=1)
    max_pending_atomic: int = Field(default=_L.max_pending_atomic, ge=1)


class AuthSettings(_Section):
    """Exactly one key kind, or none (insecure development mode)."""

    hs256_secret: SecretStr | None = None
    public_key_file: Path | None = None
    jwks_file: Path | None = None
    algorithms: list[str] = Field(default_factory=list)
    audience: str | None = None
    issuer: str | None = None
    #: seconds of clock skew tolerated on exp/nbf
    leeway: float = Field(default=5.0, ge=0)
    #: the claim holding `{"group glob": [permissions]}`
    claim: str = "groups"
    policy_file: Path | None = None
    #: refuse to start without a key (production deployments should set this)
    required: bool = False

    @model_validator(mode="after")
    def _one_key(self) -> AuthSettings:
        n = sum(x is not None for x in (self.hs256_secret, self.public_key_file, self.jwks_file))
        if n > 1:
            raise ValueError("configure one of hs256_secret, public_key_file, jwks_file")
        if self.required and n == 0:
            raise ValueError("auth.required is set but no key is configured")
        return self

    @property
    def enabled(self) -> bool:
        return any(x is not None for x in (self.hs256_secret, self.public_key_file,
                                           self.jwks_file))


class RetentionSettings(_Section):
    """One `[[retention]]` rule of the config file: what the log keeps of the groups whose
    names match `groups` (a glob: `chat:*`); what it leaves out takes `[limits]`
    `retain_messages`/`retain_bytes` and `[server]` `retain_age`. The first rule that matches
    a group applies. Applied at each prune by the SQLite log and by the JetStream log (whose
    stream keeps at most the largest `messages` of any rule per group, between prunes too);
    the memory log keeps `retain_messages` for every group."""

    groups: str = Field(min_length=1)
    messages: int | None = Field(default=None, ge=1)
    bytes: int | None = Field(default=None, ge=1)
    age: float | None = Field(default=None, gt=0)


Scope = Literal["publish", "read", "admin"]
_SCOPES: tuple[Scope, ...] = ("publish", "read", "admin")


class ApiKeySettings(_Section):
    """One `[[api.keys]]` entry: a key of the server API (docs/api.md). The secret is given as
    it is (`secret`) or as the hex of its SHA-256 (`sha256`: the file then holds nothing a
    caller could present); `scopes` are what it may do, `groups` (globs, `fnmatch`) where."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    secret: SecretStr | None = Field(default=None, min_length=1)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")
    scopes: list[Scope] = Field(default_factory=lambda: list(_SCOPES), min_length=1)
    groups: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=lambda: ["*"], min_length=1)

    @model_validator(mode="after")
    def _one_secret(self) -> ApiKeySettings:
        if (self.secret is None) == (self.sha256 is None):
            raise ValueError(f"API key {self.name!r}: give one of secret, sha256")
        return self


class ApiSettings(_Section):
    """`[api]`: the server API's listener (docs/api.md). It serves once it has a port and a
    key, and never with only one of them."""

    #: its own port (0: any free one), on `server.host`, with the server's TLS
    port: int | None = Field(default=None, ge=0, le=65535)
    keys: list[ApiKeySettings] = Field(default_factory=list)
    #: requests per second per key (a token bucket; 0: no limit), and the bucket's size: a
    #: backend that notifies its groups publishes one request per message
    rate: float = Field(default=1_000.0, ge=0)
    burst: int = Field(default=2_000, ge=1)

    @model_validator(mode="after")
    def _port_and_keys(self) -> ApiSettings:
        if self.port is not None and not self.keys:
            raise ValueError("the server API (api.port, --api-port) needs a key: --api-key "
                             "NAME=SECRET or [[api.keys]] in the config file (docs/api.md)")
        if self.keys and self.port is None:
            raise ValueError("API keys are configured but the server API has no port: give "
                             "--api-port PORT (or api.port)")
        names = [k.name for k in self.keys]
        if len(set(names)) != len(names):
            raise ValueError(f"API key names must be unique: {sorted(names)}")
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="NOTIFY_", env_nested_delimiter="__",
                                      extra="forbid", toml_file=None)

    server: ServerSettings = Field(default_factory=lambda: ServerSettings())
    timeouts: TimeoutSettings = Field(default_factory=lambda: TimeoutSettings())
    limits: LimitSettings = Field(default_factory=lambda: LimitSettings())
    auth: AuthSettings = Field(default_factory=lambda: AuthSettings())
    retention: list[RetentionSettings] = Field(default_factory=list)
    api: ApiSettings = Field(default_factory=lambda: ApiSettings())
    #: `[[webhooks]]`: the endpoints told of arrivals, departures, occupancy and messages
    #: (notify/webhooks, docs/api.md "Webhooks")
    webhooks: list[WebhookSettings] = Field(default_factory=list)

    @model_validator(mode="after")
    def _webhooks(self) -> Settings:
        check_unique(self.webhooks)
        return self

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings],
                                   init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        # init = the CLI flags; first source wins
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if settings_cls.model_config.get("toml_file") is not None:
            sources.append(TomlConfigSettingsSource(settings_cls))
        return tuple(sources)

    @classmethod
    def load(cls, *, config_file: str | Path | None = None,
             cli: dict[str, dict[str, Any]] | None = None) -> Settings:
        """Defaults < TOML `config_file` < NOTIFY_* environment < `cli` ({section: {field})."""
        path = Path(config_file) if config_file else None
        if path is not None and not path.is_file():
            raise FileNotFoundError(f"config file {path} not found")
        kw: dict[str, Any] = dict(cli or {})
        if path is None:
            return cls(**kw)
        # The TOML source reads the file named in model_config: a subclass per file.
        sub = type("Settings", (cls,), {"model_config": {**cls.model_config, "toml_file": path}})
        settings: Settings = sub(**kw)
        return settings

    def masked(self) -> dict[str, Any]:
        """The effective configuration for the start-up log, secrets shown as `**********`."""
        dumped: dict[str, Any] = self.model_dump(mode="json")
        return dumped  # SecretStr dumps as "**********" in json mode

    def core(self) -> CoreConfig:
        t, lim = self.timeouts, self.limits
        return CoreConfig(
            Timeouts(t.heartbeat_interval, t.heartbeat_timeout, t.suspect_timeout,
                     t.install_hold, t.flush_timeout, t.ack_timeout, t.hello_timeout,
                     t.recovery_window, t.write_timeout, t.idle_group,
                     quiet_group=t.quiet_group, clash_hold=t.clash_hold),
            Limits(max_frame_bytes=lim.max_frame_bytes,
                   max_payload_depth=lim.max_payload_depth,
                   max_outbound_frames=lim.max_outbound_frames,
                   max_outbound_bytes=lim.max_outbound_bytes,
                   retain_messages=lim.retain_messages, retain_bytes=lim.retain_bytes,
                   window_messages=lim.window_messages, window_bytes=lim.window_bytes,
                   max_groups_per_session=lim.max_groups_per_session,
                   max_group_members=lim.max_group_members,
                   max_instances_per_user=lim.max_instances_per_user,
                   publish_rate=lim.publish_rate, publish_burst=lim.publish_burst,
                   max_pending_atomic=lim.max_pending_atomic),
            event_log=self.server.event_log is not None,
            shared_log=bool(self.server.cluster),
            retention=tuple(Retention(
                r.groups, r.messages if r.messages is not None else lim.retain_messages,
                r.bytes if r.bytes is not None else lim.retain_bytes,
                r.age if r.age is not None else self.server.retain_age)
                for r in self.retention),
            retain_age=self.server.retain_age)

    def ssl_context(self) -> ssl.SSLContext | None:
        s = self.server
        if s.tls_cert is None or s.tls_key is None:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(s.tls_cert, s.tls_key)
        return ctx


__all__ = ["ApiKeySettings", "ApiSettings", "AuthSettings", "LimitSettings", "ServerSettings",
           "Settings", "TimeoutSettings"]
