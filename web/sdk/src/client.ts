/**
 * The client: one WebSocket to a notify server (or to one node of a cluster at a time), with
 * reconnect, resume and safe publishing, so that the application sees every group as one
 * stream, in order, without gaps or duplicates, across drops, reloads and sleeping laptops.
 *
 *     const client = createClient("ws://127.0.0.1:8765", { member: "ana" });
 *     const board = client.group("board", { wantState: true, state });
 *     board.on("message", (m) => apply(m.payload));
 *     await board.join();
 *     const r = await board.publish({ op: "claim", card: 7 }, { order: "total", atomic: true });
 *
 * Theory of operation. One `ClientProtocol` (sans-I/O, `protocol.ts`) lives as long as the
 * client, across connections, so every group's resume point survives a drop. When the link is
 * lost the client waits a backoff delay (full jitter, reset only after a stable connection) and
 * says `hello` again with the old session, to the next of its URLs: back within the server's
 * `suspect_timeout` it resumes with no view change (G7); later it rejoins each group from its
 * resume point and gets what it missed (G8). Publishes wait in a bounded queue while the link is
 * down or a view change is under way and are sent again with their idempotency ids, so a retry
 * is never delivered twice. `ack` and `flush_ok` leave from the frame handler itself, before any
 * application code runs: a busy page cannot stall a view change.
 *
 * States: `connecting → connected ⇄ reconnecting → suspended → closed`. `suspended` means away
 * longer than the server keeps a session: the groups are being rejoined with catch-up, and a UI
 * may say so. `closed` is for good: `close()`, a refused `hello`, an instance the application
 * named taken over by another connection (4002, `Replaced`), a disconnect by the server API
 * without `getToken` (4007, code `disconnected`), or `maxAttempts`.
 *
 * Identity is (user, instance) (docs/protocol.md, "Users and instances"): by default the SDK
 * picks a random instance and keeps it in `storage` with the session, so a reload resumes the
 * same instance; a duplicated tab (a copy of `sessionStorage`) asks the live tabs first
 * (tabs.ts) and takes a new instance if its own is held. After a clash (close 4002) the SDK
 * never reconnects into it: it takes a new instance and rejoins from its resume points (the
 * `replaced` event), or, for an instance the application named, closes with `Replaced`.
 *
 * Every wait has a deadline (`connectTimeoutMs`, `requestTimeoutMs`, the heartbeat), every table
 * an owner that empties it (a reply, a deadline, `close()`), and an exception in application code
 * (a listener) is reported and isolated (`onListenerError`).
 */

import { Backoff, type BackoffOptions } from "./backoff.js";
import { fromBase64, toBase64 } from "./base64.js";
import { batchLimits, pack } from "./batching.js";
import { Emitter, type Unsubscribe } from "./emitter.js";
import {
  ClientClosed,
  GroupLeftError,
  NotifyError,
  PublishQueueFull,
  Replaced,
  RequestTimeout,
  ServerRefused,
} from "./errors.js";
import type { GroupEvent, Reply, StateRequest } from "./events.js";
import { Group, type GroupHost, type GroupOptions, type PublishOptions, type PublishResult } from "./group.js";
import { Heartbeat, type HeartbeatOptions } from "./heartbeat.js";
import { pageHidden, watchLifecycle } from "./lifecycle.js";
import { ClientProtocol, type Frame, type ProtocolEvent, ProtocolViolation, type ResumePoint, type SnapshotReady } from "./protocol.js";
import type { AnswerValue, RequestKind, RequestOutput } from "./requests.js";
import { defaultStorage, type SavedGroup, SessionStore, type StorageLike } from "./storage.js";
import { type TabGuard, tabGuard } from "./tabs.js";
import { refreshAt, tokenExpiry } from "./token.js";

export type ConnectionState = "connecting" | "connected" | "reconnecting" | "suspended" | "closed";

export interface StateChange {
  readonly from: ConnectionState;
  readonly to: ConnectionState;
  readonly reason: string;
}

/** The part of the WebSocket API the SDK uses: the browser's, or `ws` in Node 20. */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
}

export type WebSocketConstructor = new (url: string) => WebSocketLike;

export interface ClientOptions {
  /** The user (with a token, its `sub`). Without authentication: default one made up and kept in `storage`. */
  member?: string;
  /**
   * This client's instance of its user: by default (or `"auto"`) the SDK picks one, kept in
   * `storage` so a reload resumes it, and takes another after a clash; a string names it (a
   * clash then closes the client with `Replaced`); null names none (the member id is the user).
   */
  instance?: string | null;
  /** How long a tab with a saved instance waits for a live tab holding it to say so. Default 100 ms. */
  tabCheckMs?: number;
  /** A JWT for the `hello` (its `sub` is the member). */
  token?: string;
  /** Called before every `hello` and ahead of the token's `exp` (then sent as `refresh`). */
  getToken?: () => string | Promise<string>;
  /** The WebSocket class: in Node 20 pass `WebSocket` from the `ws` package. */
  WebSocket?: WebSocketConstructor;
  backoff?: BackoffOptions;
  /** Publishes waiting to be sent or answered; one more rejects with `PublishQueueFull`. Default 1000. */
  maxPendingPublishes?: number;
  /** Where the session and resume points survive a reload (default `sessionStorage`; null: nowhere). */
  storage?: StorageLike | null;
  /** The storage key's scope (default: the URLs and member). */
  storageKey?: string;
  /** Every request (join, leave, publish, checkpoint, refresh) waits at most this long. Default 30 s. */
  requestTimeoutMs?: number;
  /** An attempt with no `welcome` after this long has failed. Default 10 s. */
  connectTimeoutMs?: number;
  heartbeat?: HeartbeatOptions;
  /** Handle online/offline, visibility, pagehide/pageshow and freeze/resume (default true in a browser). */
  lifecycle?: boolean;
  /** Give up (`closed`) after this many failed attempts in a row. Default: never. */
  maxAttempts?: number;
  /** Events an `for await` iterator may fall behind before it ends with an error. Default 10,000. */
  maxQueuedEvents?: number;
  /** Where an exception thrown by a listener goes (default `console.error`). */
  onListenerError?: (error: unknown, event: PropertyKey) => void;
  /** For tests: the randomness of the backoff. */
  random?: () => number;
}

/** A request's promise and deadline (the protocol's request table matches the replies). */
interface Request<T> {
  resolve: (value: T) => void;
  reject: (e: Error) => void;
  timer: ReturnType<typeof setTimeout>;
}

/** Another connection claimed this client's instance (close 4002): `new` is the instance it took
 * instead and rejoined its groups as, or null if it closed (`Replaced`: the application named it). */
export interface ReplacedEvent {
  readonly old: string;
  readonly new: string | null;
}

interface ClientEvents {
  state: StateChange;
  replaced: ReplacedEvent;
  /** `error` frames that answered no request (e.g. a refused token refresh) */
  error: NotifyError;
}

type TimerName = "reconnect" | "connect" | "tick" | "suspend" | "refresh";

/** A frame's bytes beyond its payload and group name (the `publish` envelope), for the size check:
 * at most 208 (20-digit counters, `ephemeral`). The same value as client_sdk/client.py. */
const PUBLISH_OVERHEAD = 256;
/** `hello` refusals a fresh token from `getToken` may mend. */
const TOKEN_REFUSALS = new Set(["token_expired", "token_invalid", "token_required", "token_revoked"]);

export class Client implements GroupHost {
  state: ConnectionState = "connecting";
  /** The member id views list: `user#instance`, or `user` (from the `welcome`, once connected). */
  member: string;
  /** The server's limits (`welcome.limits`). */
  limits: Readonly<Record<string, unknown>> = {};
  /** The URL connected to, or tried last. */
  url: string;
  /** The last ping's round trip (ms), or null. */
  rtt: number | null = null;
  /** Why the client is closed, if it is. */
  failure: NotifyError | null = null;
  readonly urls: readonly string[];
  readonly protocol: ClientProtocol;
  readonly #opts: ClientOptions;
  readonly #WS: WebSocketConstructor;
  readonly #emitter: Emitter<ClientEvents>;
  readonly #backoff: Backoff;
  readonly #store: SessionStore;
  readonly #groups = new Map<string, Group>();
  /** The promises of the requests under way, by kind, keyed as the protocol's answers are:
   * joins and leaves by group, publishes by id, checkpoints by req, refreshes by key. */
  readonly #waiting: { [K in RequestKind]: Map<string, Request<AnswerValue[K] | void>> } = {
    join: new Map(),
    leave: new Map(),
    publish: new Map(),
    checkpoint: new Map(),
    refresh: new Map(),
  };
  #savedGroups: Record<string, SavedGroup>;
  #token: string | undefined;
  #ws: WebSocketLike | null = null;
  /** bumped for every socket: callbacks of an older one are ignored */
  #generation = 0;
  #welcomed = false;
  /** [most frames, most bytes] of a `batch` this server takes (batching.ts): [1, 0] none */
  #batching: [number, number] = [1, 0];
  #at = 0;
  #nextUrl = 0;
  #failedAttempts = 0;
  #tokenRefusals = 0;
  #refusal: { code: string; message: string } | null = null;
  #lostAt: number | null = null;
  #heartbeat: Heartbeat | null = null;
  #pingSent = new Map<string, number>();
  #pingAt = -Infinity;
  #frozen: unknown[] | null = null;
  #timers: Record<TimerName, ReturnType<typeof setTimeout> | null> = {
    reconnect: null,
    connect: null,
    tick: null,
    suspend: null,
    refresh: null,
  };
  #unwatch: () => void = () => undefined;
  /** the SDK picked the instance (and so takes another after a clash) */
  readonly #ownInstance: boolean;
  readonly #tabs: TabGuard | null = null;
  /** the instance the storage holds (null: none saved yet) */
  #savedInstance: string | null = null;

  constructor(url: string | readonly string[], opts: ClientOptions = {}) {
    this.urls = serverUrls(url);
    this.url = this.urls[0]!;
    this.#opts = opts;
    const WS = opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (WS === undefined) {
      throw new TypeError(
        "WebSocket is not defined: in Node 20 pass one, e.g. createClient(url, { WebSocket }) with `import { WebSocket } from \"ws\"`",
      );
    }
    this.#WS = WS;
    this.#emitter = new Emitter<ClientEvents>(opts.onListenerError);
    this.#backoff = new Backoff(opts.backoff, opts.random);
    const storage = opts.storage === undefined ? defaultStorage() : opts.storage;
    const own = (this.#ownInstance = opts.instance === undefined || opts.instance === "auto");
    const key = `notify:${opts.storageKey ?? this.urls.join(",")}:${opts.member ?? "*"}${own ? "" : `#${opts.instance}`}`;
    this.#store = new SessionStore(storage, key);
    const saved = this.#store.load();
    const usable =
      saved !== null &&
      (opts.member === undefined || opts.member === saved.member) &&
      (own ? typeof saved.instance === "string" : (saved.instance ?? null) === opts.instance);
    this.protocol = new ClientProtocol(
      opts.member ?? (usable ? saved.member : `web-${randomId().slice(0, 12)}`),
      own ? (usable ? saved.instance! : newInstance()) : (opts.instance as string | null),
    );
    this.member = this.protocol.me;
    this.protocol.session = usable ? saved.session : null;
    this.protocol.requests.inUse = true; // it drains answers() from the start: stray errors too
    this.#savedGroups = usable ? { ...saved.groups } : {};
    this.#token = opts.token;
    if (opts.lifecycle ?? true) {
      this.#unwatch = watchLifecycle({
        wake: (why) => this.#wake(why),
        suspect: (why) => this.#probe(why),
        save: () => this.#persist(),
        sleep: (why) => this.dropLink(`page ${why}`),
      });
    }
    if (own && storage !== null) {
      this.#tabs = tabGuard(key, () => (this.state === "closed" ? null : this.protocol.instance));
    }
    if (usable && own && this.#tabs !== null) {
      // A saved instance: this tab was reloaded, or is a duplicate of a live one.
      void this.#tabs.held(this.protocol.instance!, opts.tabCheckMs ?? 100).then((held) => {
        if (held) this.#takeInstance(); // the copied session is the original's; the points are safe
        this.#attempt();
      });
    } else this.#attempt();
  }

  /** Who this client is (with a token, its `sub`; from the `welcome` once connected). */
  get user(): string {
    return this.protocol.user;
  }

  /** This client's instance of its user (null: it names none). */
  get instance(): string | null {
    return this.protocol.instance;
  }

  /** The server's session of this client (from the last `welcome`, or a saved one). */
  get session(): string | null {
    return this.protocol.session;
  }

  set session(session: string | null) {
    this.protocol.session = session;
  }

  // -- the application's API ------------------------------------------------------------------

  /** Listen to `state` changes (`{from, to, reason}`), unsolicited server `error`s, or `replaced` ({old, new}). */
  on<K extends keyof ClientEvents>(event: K, fn: (value: ClientEvents[K]) => void): Unsubscribe {
    return this.#emitter.on(event, fn);
  }

  /** The handle of group `name` (the same one every call: options of the first call count). */
  group(name: string, options: GroupOptions = {}): Group {
    let g = this.#groups.get(name);
    if (g === undefined) {
      g = new Group(this, name, options, this.#opts.maxQueuedEvents ?? 10_000, this.#opts.onListenerError);
      this.#groups.set(name, g);
    }
    return g;
  }

  /** Resolves when connected (now, or at the next connection); rejects if the client closes. */
  ready(): Promise<void> {
    if (this.state === "connected") return Promise.resolve();
    if (this.state === "closed") return Promise.reject(this.#closedError());
    return new Promise((resolve, reject) => {
      const off = this.on("state", ({ to }) => {
        if (to === "connected") resolve();
        else if (to === "closed") reject(this.#closedError());
        else return;
        off();
      });
    });
  }

  /**
   * Close for good: pending requests reject with `ClientClosed`, iterators end, and the saved
   * session is forgotten. Groups are not left: the server removes this member after its
   * `suspect_timeout` (leave them first for a clean exit).
   */
  close(): void {
    if (this.state === "closed") return;
    this.#store.clear();
    this.#finish(new ClientClosed("client closed", "closed"), true);
  }

  /** A new token for this connection (and the later ones); resolves when it is in force. */
  setToken(token: string): Promise<void> {
    this.#token = token;
    if (this.state !== "connected") return Promise.resolve(); // the next hello carries it
    const key = this.protocol.openRefresh(token);
    const done = this.#request("refresh", key, "refresh", () => this.protocol.forgetRefresh(key));
    this.#flush();
    return done as Promise<void>;
  }

  /** Debugging and tests: drop the link as a network would (the client reconnects). */
  dropLink(reason = "dropped by the application"): void {
    const ws = this.#ws;
    if (ws === null || this.state === "closed") return;
    this.#lost(reason);
    try {
      ws.close(3000, reason.slice(0, 100));
    } catch {
      /* already closing */
    }
  }

  /**
   * Debugging and tests: stop reading for `ms` (frames wait, unanswered: no `ack`, no
   * `flush_ok`, no `pong`), as a frozen tab would; then handle them in order.
   */
  freeze(ms: number): void {
    if (this.#frozen !== null) return;
    this.#frozen = [];
    setTimeout(() => {
      const held = this.#frozen ?? [];
      this.#frozen = null;
      for (const data of held) this.#receive(data);
    }, ms);
  }

  // -- the connection -------------------------------------------------------------------------

  get #requestTimeout(): number {
    return this.#opts.requestTimeoutMs ?? 30_000;
  }

  #attempt(): void {
    this.#clearTimer("reconnect");
    if (this.state === "closed" || this.#ws !== null) return;
    const i = this.#nextUrl;
    const url = this.urls[i]!;
    const generation = ++this.#generation;
    this.#refusal = null;
    this.#welcomed = false;
    const open = (token: string | undefined): void => {
      if (generation !== this.#generation || this.state === "closed") return;
      let ws: WebSocketLike;
      try {
        ws = new this.#WS(url);
      } catch (e) {
        this.#attemptFailed(`cannot open ${url}: ${String(e)}`);
        return;
      }
      this.#ws = ws;
      this.#at = i;
      this.url = url;
      ws.onopen = () => {
        if (generation !== this.#generation) return;
        ws.send(JSON.stringify(this.protocol.hello(true, token)));
      };
      ws.onmessage = (ev) => {
        if (generation === this.#generation) this.#receive(ev.data);
      };
      ws.onclose = (ev) => {
        if (generation === this.#generation) this.#closed(ev.code, ev.reason);
      };
      ws.onerror = () => undefined; // a close follows
    };
    this.#timers.connect = setTimeout(() => {
      if (generation !== this.#generation || this.#welcomed) return;
      const ws = this.#ws;
      this.#ws = null;
      this.#generation++;
      try {
        ws?.close();
      } catch {
        /* never opened */
      }
      this.#attemptFailed(`no welcome from ${url}`);
    }, this.#opts.connectTimeoutMs ?? 10_000);
    if (this.#opts.getToken === undefined) {
      open(this.#token);
      return;
    }
    Promise.resolve()
      .then(() => this.#opts.getToken!())
      .then(
        (token) => {
          this.#token = token;
          open(token);
        },
        (e: unknown) => {
          if (generation !== this.#generation) return;
          this.#clearTimer("connect");
          this.#attemptFailed(`getToken failed: ${String(e)}`);
        },
      );
  }

  /** An attempt failed before a `welcome`: try the next URL after a backoff delay. */
  #attemptFailed(reason: string): void {
    this.#clearTimer("connect");
    this.#ws = null;
    this.#generation++;
    if (this.state === "closed") return;
    this.#nextUrl = (this.#at + 1) % this.urls.length;
    this.#failedAttempts += 1;
    const max = this.#opts.maxAttempts;
    if (max !== undefined && this.#failedAttempts >= max) {
      this.#finish(new ClientClosed(`gave up: ${reason}`, "unreachable"), false);
      return;
    }
    this.#scheduleReconnect(reason);
  }

  #scheduleReconnect(reason: string): void {
    this.#clearTimer("reconnect");
    const delay = this.#backoff.next();
    this.#timers.reconnect = setTimeout(() => this.#attempt(), delay);
    if (this.state === "connected") this.#setState("reconnecting", reason);
  }

  #closed(code: number, reason: string): void {
    if (!this.#welcomed) {
      const refusal = this.#refusal;
      if (refusal !== null && code === 4004) {
        const mendable = this.#opts.getToken !== undefined && TOKEN_REFUSALS.has(refusal.code);
        if (!mendable || ++this.#tokenRefusals > 3) {
          this.#finish(new ClientClosed(`hello refused: ${refusal.code}: ${refusal.message}`, refusal.code), false);
          return;
        }
      }
      this.#attemptFailed(`closed ${code} before welcome${reason ? `: ${reason}` : ""}`);
      return;
    }
    if (code === 4007 && !this.#opts.getToken) {
      // The backend disconnected this user (server API): its session is over and, with auth,
      // its token revoked. Never reconnect with that token: without `getToken`, stop (and a
      // reload must not resume the ended session); with it, the next hello asks for a new one
      // (a new session; a revoked token closes the client, TOKEN_REFUSALS).
      this.#store.clear();
      return this.#finish(new ClientClosed("disconnected (4007)", "disconnected"), false);
    }
    if (code === 4002) {
      // A clash: another connection claimed this instance (a copied session, two clients given
      // one instance). Never reconnect into it (each would replace the other, a view change
      // each time): take a new instance and rejoin from the resume points, or stop.
      const old = this.member;
      const own = this.#ownInstance;
      if (own) this.#takeInstance();
      else this.#store.clear();
      this.#emitter.emit("replaced", { old, new: own ? this.member : null });
      if (!own) this.#finish(new Replaced(old), false);
      if (this.state === "closed") return;
    }
    this.#lost(`closed ${code}${reason ? ` ${reason}` : ""}`);
  }

  #takeInstance(): void {
    this.protocol.takeInstance(newInstance());
    this.member = this.protocol.me;
  }

  #lost(reason: string): void {
    if (this.#ws === null) return;
    this.#ws = null;
    this.#generation++;
    this.#welcomed = false;
    this.#frozen = null;
    this.#heartbeat = null;
    this.#pingSent.clear();
    this.#clearTimer("tick");
    this.#clearTimer("refresh");
    this.#nextUrl = (this.#at + 1) % this.urls.length;
    this.#backoff.disconnected(now());
    this.#lostAt = now();
    this.protocol.discardOutput(); // frames for the old connection: the rejoin replaces them
    // Unanswered publishes: sent again, same id, after the rejoin; a checkpoint under way fails.
    this.protocol.connectionLost();
    this.#answer(this.protocol.answers());
    for (const key of [...this.#waiting.checkpoint.keys()]) {
      // (still being encoded: not opened in the protocol yet)
      this.#fail("checkpoint", key, new NotifyError("connection lost during the checkpoint", "lost"));
    }
    const suspect = typeof this.limits.suspect_timeout_ms === "number" ? this.limits.suspect_timeout_ms : 3_000;
    this.#clearTimer("suspend");
    this.#timers.suspend = setTimeout(() => {
      if (this.state === "reconnecting") this.#setState("suspended", `away longer than ${suspect} ms`);
    }, suspect);
    this.#setState("reconnecting", reason);
    this.#scheduleReconnect(reason);
  }

  #welcome(f: Frame): void {
    this.#clearTimer("connect");
    this.#clearTimer("suspend");
    this.#welcomed = true;
    this.#failedAttempts = 0;
    this.#tokenRefusals = 0;
    this.member = typeof f.member === "string" ? f.member : this.member;
    this.protocol.receive(f); // the session, the member; refreshes asked meanwhile are in force
    this.limits = (f.limits as Record<string, unknown>) ?? {};
    this.#batching = batchLimits(this.limits);
    const t = now();
    this.#backoff.connected(t);
    this.#pingAt = t;
    const hbMs = typeof f.heartbeat_ms === "number" ? f.heartbeat_ms : undefined;
    this.#heartbeat = new Heartbeat(t, { intervalMs: hbMs, ...this.#opts.heartbeat });
    this.#timers.tick = setInterval(() => this.#tick(), this.#heartbeat.tickMs);
    this.#scheduleRefresh();
    this.protocol.discardOutput(); // joins asked before this connection: the rejoin sends them
    // Rejoin every group not left: with its resume point, or afresh (and leaves asked meanwhile).
    this.protocol.rejoinAll();
    this.#answer(this.protocol.answers());
    const lostFor = this.#lostAt === null ? 0 : t - this.#lostAt;
    this.#lostAt = null;
    this.#setState("connected", `welcome from ${this.url}${lostFor ? ` after ${Math.round(lostFor)} ms` : ""}`);
    this.#flush();
    // A new instance is saved at once, so that a tab duplicated now knows it must not take it.
    if (this.#savedInstance !== this.protocol.instance) this.#persist();
  }

  #tick(): void {
    const hb = this.#heartbeat;
    if (hb === null) return;
    const t = now();
    const action = hb.tick(t, pageHidden());
    if (action === "ping") this.#ping();
    else if (action === "dead") this.dropLink("heartbeat: no answer");
    else if (t - this.#pingAt > 30_000) this.#ping(); // a busy link is never quiet: measure rtt anyway
  }

  #ping(): void {
    const ws = this.#ws;
    if (ws === null || !this.#welcomed) return;
    const req = this.protocol.newReq("h");
    this.#pingAt = now();
    this.#pingSent.set(req, this.#pingAt);
    if (this.#pingSent.size > 8) this.#pingSent.delete(this.#pingSent.keys().next().value!);
    ws.send(JSON.stringify({ type: "ping", req }));
  }

  /** The page came back, or the network did: reconnect now, or check the link. */
  #wake(reason: string): void {
    if (this.state === "closed") return;
    if (this.#ws === null) {
      if (this.#timers.reconnect !== null) this.#attempt(); // skip the rest of the backoff
      return;
    }
    this.#probe(reason);
  }

  #probe(_reason: string): void {
    const hb = this.#heartbeat;
    if (hb !== null && hb.probe(now()) === "ping") this.#ping();
  }

  #persist(): void {
    if (this.state === "closed") return;
    const groups: Record<string, SavedGroup> = { ...this.#savedGroups };
    for (const [name, handle] of this.#groups) {
      const g = this.protocol.groups.get(name);
      if (!handle.wanted || g === undefined || g.phase === "left" || !g.epoch || handle.awaitingState) continue;
      const entry: SavedGroup = { point: g.savedPoint() };
      if (handle.options.state !== undefined) {
        try {
          entry.snapshot = toBase64(handle.options.state.snapshot());
        } catch (e) {
          this.#opts.onListenerError?.(e, "snapshot");
          continue;
        }
      }
      groups[name] = entry;
    }
    this.#savedInstance = this.protocol.instance;
    this.#store.save({ member: this.protocol.user, instance: this.#savedInstance, session: this.session, at: Date.now(), groups });
  }

  #scheduleRefresh(): void {
    this.#clearTimer("refresh");
    const token = this.#token;
    if (this.#opts.getToken === undefined || token === undefined) return;
    const exp = tokenExpiry(token);
    if (exp === null) return;
    const delay = Math.max(0, refreshAt(exp, Date.now()) - Date.now());
    this.#timers.refresh = setTimeout(() => {
      Promise.resolve()
        .then(() => this.#opts.getToken!())
        .then((fresh) => this.setToken(fresh))
        .then(
          () => this.#scheduleRefresh(),
          (e: unknown) => {
            // Try again shortly while the old token lasts; past `exp` the server closes 4005
            // and the next hello asks getToken again.
            this.#emitter.emit("error", new NotifyError(`token refresh failed: ${String(e)}`, "refresh_failed"));
            if (this.state === "connected" && Date.now() < exp) this.#timers.refresh = setTimeout(() => this.#scheduleRefresh(), 5_000);
          },
        );
    }, delay);
  }

  // -- receiving ------------------------------------------------------------------------------

  #receive(data: unknown): void {
    if (this.#frozen !== null) {
      this.#frozen.push(data);
      return;
    }
    this.#heartbeat?.received(now());
    let frame: Frame;
    try {
      const parsed: unknown = JSON.parse(typeof data === "string" ? data : String(data));
      if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error("not an object");
      frame = parsed as Frame;
    } catch (e) {
      this.#violation(new ProtocolViolation(`not a JSON object: ${String(e)}`));
      return;
    }
    if (!this.#welcomed) {
      if (frame.type === "welcome") this.#welcome(frame);
      else if (frame.type === "error") this.#refusal = { code: String(frame.code), message: String(frame.message) };
      return;
    }
    let events: ProtocolEvent[];
    let replies: Reply[];
    try {
      ({ events, replies } = this.protocol.receive(frame));
    } catch (e) {
      if (!(e instanceof ProtocolViolation)) throw e;
      this.#dispatch(e.events, e.replies);
      this.#violation(e);
      return;
    }
    this.#dispatch(events, replies);
  }

  #violation(e: ProtocolViolation): void {
    // The resume point is exact: a new connection resumes without a gap or a duplicate.
    console.warn(`notify: ${e.message}; reconnecting`);
    this.dropLink(`protocol violation: ${e.message}`);
  }

  #dispatch(events: ProtocolEvent[], replies: Reply[]): void {
    this.#flush(); // ACKs and flush_ok first, before any application code
    for (const ev of events) {
      if (this.state === "closed") return;
      this.#onEvent(ev);
    }
    for (const r of replies) {
      if (r.type !== "pong") continue; // the others are matched by the protocol
      const sent = this.#pingSent.get(String(r.req));
      if (sent !== undefined) {
        this.rtt = now() - sent;
        this.#pingSent.delete(String(r.req));
      }
    }
    if (this.state === "closed") return;
    this.#answer(this.protocol.answers());
    this.#flush(); // publishes a view change was holding, joins and leaves asked by handlers
  }

  #onEvent(ev: ProtocolEvent): void {
    if (ev.type === "state-request") {
      this.#serveState(ev);
      return;
    }
    if (ev.type === "snapshot-ready") {
      this.#restoreState(ev);
      return;
    }
    const handle = this.#groups.get(ev.group);
    if (ev.type === "removed") {
      // Removed by the group while the application still wanted it (no leave of its own).
      if (ev.reason === null && !this.#waiting.leave.has(ev.group) && handle?.wanted) ev = { ...ev, reason: "removed" };
      delete this.#savedGroups[ev.group];
    }
    handle?.dispatch(ev as GroupEvent);
  }

  /** Settle the promises of the requests the protocol says are over, and do what it asks of the
   * host (a timer for a join to retry, the state a join afresh waits for). */
  #answer(outputs: RequestOutput[]): void {
    for (const a of outputs) {
      if (this.state === "closed") return;
      switch (a.type) {
        case "answer":
          this.#settle(a.kind, a.key, a.value, a.error);
          if (a.kind === "join" && a.error instanceof ServerRefused) {
            // The application's join() fails, and the handle says so.
            const g = this.protocol.groups.get(a.key);
            this.#groups.get(a.key)?.dispatch({ type: "removed", group: a.key, view: g?.view ?? 0, reason: a.error.code });
          }
          break;
        case "retry-join": {
          const { group, req, attempt } = a;
          setTimeout(() => {
            if (this.#welcomed && this.protocol.retryJoin(group, req)) this.#flush();
          }, 50 * 2 ** Math.min(attempt - 1, 6) * (0.5 + Math.random()));
          break;
        }
        case "joined-afresh": {
          const handle = this.#groups.get(a.group);
          if (handle !== undefined) handle.awaitingState = a.wantState;
          break;
        }
        case "stray-error":
          this.#emitter.emit("error", new ServerRefused(`${a.error.code}: ${a.error.message}`, a.error.code));
          break;
      }
    }
  }

  // -- state transfer -------------------------------------------------------------------------

  /** Be the donor: snapshot now (every earlier event has been handed over), then send it. */
  #serveState(req: StateRequest): void {
    const handle = this.#groups.get(req.group);
    let snapshot: Uint8Array = new Uint8Array(0);
    if (handle?.options.state !== undefined) {
      try {
        snapshot = handle.options.state.snapshot();
      } catch (e) {
        this.#opts.onListenerError?.(e, "snapshot");
        return; // the server asks the next member after flush_timeout
      }
    }
    const covered = Object.fromEntries(handle?.delivered ?? []);
    const generation = this.#generation;
    void loadCodec().then(({ encodeSnapshot }) => encodeSnapshot(snapshot)).then((chunks) => {
      if (generation !== this.#generation || !this.#welcomed) return; // the joiner is served by another donor
      for (const c of chunks) {
        const frame: Frame = {
          type: "state_chunk",
          group: req.group,
          transfer: req.transfer,
          index: c.index,
          last: c.last,
          data: c.data,
        };
        if (c.last) {
          frame.sha256 = c.sha256;
          frame.streams = covered;
        }
        this.protocol.send(frame);
      }
      this.#flush();
    });
  }

  #restoreState(ready: SnapshotReady): void {
    loadCodec()
      .then(({ decodeSnapshot }) => decodeSnapshot(ready.chunks, ready.sha256))
      .then(
        (data) => this.#stateDecoded(ready, data, null),
        (e: unknown) => this.#stateDecoded(ready, null, `bad_transfer: ${(e as Error).message}`),
      );
  }

  #stateDecoded(ready: SnapshotReady, data: Uint8Array | null, reason: string | null): void {
    if (this.state === "closed") return;
    this.#dispatch(this.protocol.stateDecoded(ready.group, ready.transfer, data, reason), []);
  }

  // -- requests (GroupHost) -------------------------------------------------------------------

  /** @internal */
  requestJoin(handle: Group): Promise<void> {
    if (this.state === "closed") return Promise.reject(this.#closedError());
    const name = handle.name;
    const o = handle.options;
    this.#fail("join", name, new GroupLeftError(`${name}: joined again`));
    const saved = this.#savedGroups[name];
    delete this.#savedGroups[name];
    handle.setStatus("joining");
    handle.awaitingState = false;
    const join = { acceptFrom: o.acceptFrom, stateProvider: o.state !== undefined };
    if (saved !== undefined && (o.state === undefined || saved.snapshot !== undefined)) {
      // A reload: the state as it was at the saved point, then only what was missed.
      if (o.state !== undefined && saved.snapshot !== undefined) o.state.restore(fromBase64(saved.snapshot));
      handle.delivered.clear();
      for (const [k, v] of Object.entries(saved.point.streams ?? {})) handle.delivered.set(k, v);
      handle.base = saved.point.offset;
      this.protocol.openJoin(name, { ...join, resumeFrom: saved.point });
      handle.setStatus("catching-up");
    } else {
      handle.awaitingState = o.wantState ?? false;
      this.protocol.openJoin(name, { ...join, wantState: o.wantState ?? false });
    }
    // (timed out: the protocol leaves if the server installs it after all)
    const done = this.#request("join", name, `join ${name}`, () => this.protocol.giveUpJoin(name, { timedOut: true }));
    this.#flush();
    return done.then(() => undefined);
  }

  /** @internal */
  requestLeave(handle: Group): Promise<void> {
    const name = handle.name;
    const g = this.protocol.groups.get(name);
    this.#fail("join", name, new GroupLeftError(`${name}: left`));
    this.protocol.forgetJoin(name);
    this.protocol.failPublishes(name, new GroupLeftError(`left ${name}`));
    delete this.#savedGroups[name];
    if (g === undefined || g.phase === "left" || this.state === "closed") {
      this.protocol.forgetGroup(name);
      this.#answer(this.protocol.answers());
      return Promise.resolve();
    }
    const existing = this.#waiting.leave.get(name);
    if (existing !== undefined) {
      this.#answer(this.protocol.answers());
      return new Promise((resolve) => this.#chain(existing, resolve));
    }
    const req = this.protocol.openLeave(name);
    // (timed out: not rejoined after a reconnect; left again if the server installs it)
    const done = this.#request("leave", name, `leave ${name}`, () => this.protocol.forgetLeave(name, req));
    this.#answer(this.protocol.answers());
    this.#flush();
    return done.then(() => undefined);
  }

  /** @internal */
  publish(handle: Group, payload: unknown, opts: PublishOptions): Promise<PublishResult> {
    try {
      return this.#startPublish(handle, payload, opts);
    } catch (e) {
      return Promise.reject(e as Error);
    }
  }

  #startPublish(handle: Group, payload: unknown, opts: PublishOptions): Promise<PublishResult> {
    if (this.state === "closed") throw this.#closedError();
    if (!handle.wanted) throw new GroupLeftError(`${handle.name}: not joined`);
    const order = opts.order ?? "fifo";
    if (order !== "fifo" && order !== "total") throw new TypeError(`order: "fifo" or "total"`);
    if (opts.ephemeral && (opts.atomic || order !== "fifo")) {
      throw new TypeError("ephemeral: not atomic, not total");
    }
    const size = checkPayload(payload, handle.name);
    const limit = this.limits.max_frame_bytes;
    if (typeof limit === "number" && size + handle.name.length + PUBLISH_OVERHEAD > limit) {
      throw new NotifyError(`${handle.name}: payload over max_frame_bytes (${size})`, "too_large");
    }
    const id = opts.id ?? randomId();
    const o = { order, atomic: opts.atomic ?? false, sameView: opts.sameView ?? false };
    if (opts.ephemeral) {
      // At most once: sent now, or not at all (a cursor position is stale by the reconnect).
      const g = this.protocol.groups.get(handle.name);
      if (!this.#welcomed || g === undefined || !g.canSend || this.#ws === null) {
        return Promise.resolve({ id, offset: 0, dropped: true });
      }
      const frame = this.protocol.publishFrame(this.protocol.newReq("p"), handle.name, id, payload, o);
      frame.ephemeral = true;
      this.protocol.send(frame);
      this.#flush();
      return Promise.resolve({ id, offset: 0 });
    }
    const max = this.#opts.maxPendingPublishes ?? 1_000;
    const publishes = this.protocol.requests.publishes;
    if (publishes.size >= max) {
      throw new PublishQueueFull(`maxPendingPublishes (${max}) reached`);
    }
    if (publishes.has(id)) throw new TypeError(`publish id ${id} is already waiting`);
    this.protocol.openPublish(handle.name, id, payload, o);
    // (timed out: never sent again)
    const done = this.#request("publish", id, `publish to ${handle.name}`, () => this.protocol.forgetPublish(id));
    // To a server that takes batches, at the end of the caller's turn: the publishes made
    // together leave together (the first of these microtasks writes them all).
    if (this.#batching[0] > 1) queueMicrotask(() => this.#flush());
    else this.#flush(); // (nothing to wait for: each frame is a message of its own anyway)
    return done as Promise<PublishResult>;
  }

  /** @internal */
  checkpoint(handle: Group): Promise<{ offset: number; bytes: number }> {
    const state = handle.options.state;
    if (state === undefined) return Promise.reject(new TypeError("checkpoint: no state provider"));
    if (!handle.wanted) return Promise.reject(new GroupLeftError(`${handle.name}: not joined`));
    if (handle.awaitingState) return Promise.reject(new NotifyError(`${handle.name}: no state yet`, "not_ready"));
    if (this.state !== "connected") return Promise.reject(new NotifyError(`not connected (${this.state})`, "not_connected"));
    const g = this.protocol.groups.get(handle.name)!;
    // The snapshot and the position it claims are taken at the same point of the events.
    const snapshot = state.snapshot();
    // `handle.base` may already be past messages still held back (an atomic message replayed
    // before a `catchup_done`, its outcome not in yet): the snapshot lacks them, so the position
    // must stop before them, as `savedPoint` does, or a restorer would never get them.
    let offset = handle.base;
    for (const s of g.streams.values()) for (const m of s.held) offset = Math.min(offset, m.offset - 1);
    const position = {
      epoch: g.epoch,
      offset,
      view: handle.view?.version ?? 0,
      streams: Object.fromEntries(handle.delivered),
    };
    const req = this.protocol.newReq("c");
    const generation = this.#generation;
    const done = this.#request("checkpoint", req, `checkpoint of ${handle.name}`, () => this.protocol.forgetCheckpoint(req));
    void loadCodec().then(({ encodeSnapshot }) => encodeSnapshot(snapshot)).then((chunks) => {
      // lost meanwhile (`#lost` rejected it), or timed out
      if (generation !== this.#generation || !this.#waiting.checkpoint.has(req)) return;
      this.protocol.openCheckpoint(handle.name, chunks, position, { req });
      this.#flush();
    });
    return done as Promise<{ offset: number; bytes: number }>;
  }

  /** @internal */
  pendingOf(handle: Group): number {
    let n = 0;
    for (const p of this.protocol.requests.publishes.values()) if (p.group === handle.name) n += 1;
    return n;
  }

  /** @internal */
  resumePointOf(handle: Group): ResumePoint | null {
    const g = this.protocol.groups.get(handle.name);
    return g === undefined || !g.epoch ? null : g.savedPoint();
  }

  // -- sending --------------------------------------------------------------------------------

  /** Write what the protocol has to say, waiting publishes its group accepts included. */
  #flush(): void {
    const ws = this.#ws;
    if (ws === null || !this.#welcomed || this.#frozen !== null) return;
    const [most, size] = this.#batching;
    for (const m of pack(this.protocol.dataToSend().map((f) => JSON.stringify(f)), most, size)) ws.send(m);
  }

  // -- bookkeeping ----------------------------------------------------------------------------

  /** A promise for the request `kind`/`key`, rejected with `RequestTimeout` after
   * `requestTimeoutMs` (then `forget` tells the protocol to stop waiting too). */
  #request<K extends RequestKind>(kind: K, key: string, what: string, forget: () => void): Promise<AnswerValue[K] | void> {
    const table = this.#waiting[kind] as Map<string, Request<AnswerValue[K] | void>>;
    return new Promise((resolve, reject) => {
      const r: Request<AnswerValue[K] | void> = {
        resolve,
        reject,
        timer: setTimeout(() => {
          if (table.get(key) === r) {
            table.delete(key);
            forget();
          }
          reject(new RequestTimeout(`${what}: timeout (${this.state})`));
        }, this.#requestTimeout),
      };
      table.set(key, r);
    });
  }

  /** The request `kind`/`key` is over: resolved with `value`, or rejected with `error`. */
  #settle(kind: RequestKind, key: string, value: unknown, error: Error | null = null): void {
    const table = this.#waiting[kind] as Map<string, Request<unknown>>;
    const r = table.get(key);
    if (r === undefined) return;
    table.delete(key);
    clearTimeout(r.timer);
    if (error === null) r.resolve(value);
    else r.reject(error);
  }

  #fail(kind: RequestKind, key: string, error: Error): void {
    this.#settle(kind, key, null, error);
  }

  #chain(r: Request<null | void>, resolve: () => void): void {
    const first = r.resolve;
    r.resolve = (v) => {
      first(v);
      resolve();
    };
  }

  #finish(error: NotifyError, byApp: boolean): void {
    if (this.state === "closed") return;
    if (!byApp) this.failure = error;
    const ws = this.#ws;
    this.#ws = null;
    this.#generation++;
    this.#welcomed = false;
    for (const name of Object.keys(this.#timers) as TimerName[]) this.#clearTimer(name);
    this.#unwatch();
    this.#tabs?.close();
    try {
      ws?.close(1000, "client closed");
    } catch {
      /* never opened */
    }
    this.#setState("closed", error.message);
    this.protocol.close();
    for (const table of Object.values(this.#waiting) as Array<Map<string, Request<unknown>>>) {
      for (const r of table.values()) {
        clearTimeout(r.timer);
        r.reject(error);
      }
      table.clear();
    }
    for (const g of this.#groups.values()) g.end(byApp ? null : error);
  }

  #closedError(): NotifyError {
    return this.failure ?? new ClientClosed("client closed", "closed");
  }

  #setState(to: ConnectionState, reason: string): void {
    const from = this.state;
    if (from === to) return;
    this.state = to;
    this.#emitter.emit("state", { from, to, reason });
  }

  #clearTimer(name: TimerName): void {
    const t = this.#timers[name];
    if (t === null) return;
    clearTimeout(t);
    clearInterval(t);
    this.#timers[name] = null;
  }
}

/** `createClient(url | urls, options)`: starts connecting at once; see `Client`. */
export function createClient(url: string | readonly string[], options: ClientOptions = {}): Client {
  return new Client(url, options);
}

/** `url` as a non-empty list of ws:// or wss:// URLs; a `TypeError` at once otherwise. */
export function serverUrls(url: string | readonly string[]): readonly string[] {
  const urls = typeof url === "string" ? [url] : [...url];
  if (!urls.length) throw new TypeError("no server URL");
  for (const u of urls) {
    let ok = false;
    try {
      const parsed = new URL(u);
      ok = (parsed.protocol === "ws:" || parsed.protocol === "wss:") && parsed.hostname !== "";
    } catch {
      ok = false;
    }
    if (!ok) throw new TypeError(`not a ws:// or wss:// URL: ${u}`);
  }
  return Object.freeze(urls);
}

/**
 * Refuse at once, with the reason, what JSON cannot carry faithfully or the server would refuse
 * (`bad_payload`): `JSON.stringify` would silently write `null` for `NaN` or drop `undefined`.
 * Returns the payload's serialised length.
 */
export function checkPayload(payload: unknown, group: string): number {
  let text: string | undefined;
  try {
    text = JSON.stringify(payload, (_key, value: unknown) => {
      if (typeof value === "number" && !Number.isFinite(value)) {
        throw new TypeError(`${String(value)} is not a JSON number`);
      }
      return value;
    });
  } catch (e) {
    throw new TypeError(`${group}: payload not JSON: ${(e as Error).message}`);
  }
  if (text === undefined) throw new TypeError(`${group}: payload not JSON (${typeof payload})`);
  return text.length;
}

/** Snapshots are compressed by a module loaded on first use: most pages never transfer state. */
function loadCodec(): Promise<typeof import("./codec.js")> {
  return import("./codec.js");
}

function now(): number {
  return typeof performance !== "undefined" ? performance.now() : Date.now();
}

/** A random instance id (10 hex digits). */
function newInstance(): string {
  return randomId().slice(0, 10);
}

function randomId(): string {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  if (c?.randomUUID !== undefined) return c.randomUUID().replace(/-/g, "");
  const bytes = new Uint8Array(16);
  c?.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
