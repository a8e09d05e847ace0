/**
 * The client's side of the protocol, sans I/O: fed server frames, it returns application events,
 * replies to requests, and the frames to send back. The same rules as the Python SDK's
 * `client_sdk/protocol.py` (DESIGN §3–§4, seed 003 §3.1), so both SDKs keep one promise:
 *
 * - On `view_change` a group stops sending (publishes wait), ACKs every atomic message it holds,
 *   then answers `flush_ok`. On `view_install` or `view_resume` it sends again.
 * - Atomic messages are ACKed on receipt and held back until `confirm`; every later message of
 *   the same stream waits behind them, so the application sees a stream in order and never sees
 *   an aborted message (G5).
 * - It remembers, per stream, the last `seq` received: that, with the log offset its knowledge
 *   starts after, is the resume point it presents when it comes back (G7, G8).
 * - A resume point the server refuses makes the caller join afresh (`joinAfresh`): the group
 *   forgets its old stream, and the install of the new membership is preceded by one `reset`.
 * - A frame it cannot make sense of throws `ProtocolViolation`, carrying what the frames before
 *   it produced (a `batch` may be cut short): nothing the state already counts is lost.
 * - A `catchup_log` (a resume point older than the server's in-memory window, G8) opens a gap
 *   that the protocol reads from the log with `history` requests, page by page, while it goes on
 *   acting on what comes behind the gap, whose events wait for the application until the gap is
 *   read (`catchup.ts`).
 * - The requests the application waits for (joins, leaves, publishes, checkpoints, token
 *   refreshes), the matching of replies to them, the refusal policy and the resend after
 *   `view_changing` are sans-I/O too: see `requests.ts`. The host says `hello()` and, at every
 *   welcome, `rejoinAll()` through the protocol, and `GroupPhase` changes only in here.
 *
 * The one difference: a snapshot's last chunk cannot be decoded synchronously in a browser
 * (`DecompressionStream` and `crypto.subtle` are asynchronous), so the protocol hands out a
 * `snapshot-ready` and keeps holding everything after the install until the caller reports the
 * decoded snapshot with `stateDecoded()`.
 */

import { Gap, PAGE_RETRIES, type Page } from "./catchup.js";
import type { EncodedChunk } from "./codec.js";
import { GapUnreadable, GroupLeftError, NotifyError, ProtocolViolation, PublishRejected, ServerRefused } from "./errors.js";
import { arrivals, usersOf } from "./presence.js";
import type {
  EphemeralEvent,
  ViewChangingEvent,
  GroupEvent,
  Message,
  Reply,
  StateReceivedEvent,
  StateRequest,
  ViewEvent,
  ViewResumedEvent,
} from "./events.js";
import {
  JOIN_RETRIES,
  LEFT_LEAVE_REFUSALS,
  REFRESH_REFUSALS,
  RESENT_PUBLISH_REFUSALS,
  RETRIED_JOIN_REFUSALS,
  Requests,
  type PendingPublish,
  type PublishFrame,
  type RequestOutput,
} from "./requests.js";

/** The wire protocol's version, said in `hello`. */
export const PROTOCOL_VERSION = 1;

export type Frame = Record<string, unknown> & { type: string };

export type GroupPhase = "joining" | "active" | "flushing" | "left";

/** A resume point: where a member's knowledge of a group log ends (docs/protocol.md). */
export interface ResumePoint {
  epoch: number;
  offset: number;
  view?: number;
  streams?: Record<string, number>;
}

/** The last chunk of a snapshot arrived: decode `chunks`, check `sha256`, then `stateDecoded`. */
export interface SnapshotReady {
  readonly type: "snapshot-ready";
  readonly group: string;
  readonly transfer: string;
  readonly chunks: readonly string[];
  readonly sha256: string | null;
}

export type ProtocolEvent = GroupEvent | StateRequest | SnapshotReady;

/** A join `rejoinAll()` queued; `resume`: it presents a resume point (false: it joins afresh). */
export interface Rejoin {
  readonly req: string;
  readonly group: string;
  readonly resume: boolean;
}

type ErrorReply = Extract<Reply, { type: "error" }>;

export { ProtocolViolation };

interface Refusal {
  readonly reason: string;
  readonly epoch: number;
  readonly offset: number;
  readonly lost: number | null;
}

interface Stream {
  received: number;
  held: Message[];
}

interface PendingSnapshot {
  transfer: string;
  chunks: string[];
  /** set at the last chunk */
  offset: number;
  streams: Record<string, number>;
  done: boolean;
}

/** One group's protocol state. */
export class GroupProtocol {
  phase: GroupPhase = "joining";
  view = 0;
  members: readonly string[] = [];
  epoch = 0;
  /** the log offset this member's knowledge starts after (install or catch-up point) */
  base = 0;
  /** the highest offset of a message received */
  top = 0;
  proposed: number | null = null;
  streams = new Map<string, Stream>();
  /** offset -> resolution (null = waiting) of atomic messages held back */
  atomic = new Map<number, boolean | null>();
  duplicates = 0;
  wantState: boolean;
  /** the `accept_from` of this member's joins of the group (a rejoin presents it again) */
  acceptFrom = "members";
  joinReq: string;
  resuming = false;
  /** between a resuming join and its `catchup_done`: what arrives is a replay */
  catchingUp = false;
  refusal: Refusal | null = null;
  /** while a joiner waits for its snapshot: the events that come after it (null: not waiting) */
  stateBuffer: ProtocolEvent[] | null = null;
  /** a checkpoint's completion: messages at or below `stateBoundary`, by `stream/seq` */
  stateReplay = new Map<string, Message>();
  stateBoundary = 0;
  snapshot: PendingSnapshot | null = null;
  /**
   * What a `catchup_log` left out, while it is read from the log (null: no gap). Meanwhile the
   * resume point is the gap's frontier, and `base` moves as usual with what comes behind the
   * gap: nothing reads it until the gap is read (`base` is then the higher of the two) or given
   * up (`base` goes back to the frontier).
   */
  gap: Gap | null = null;

  constructor(readonly name: string, wantState: boolean, joinReq: string) {
    this.wantState = wantState;
    this.joinReq = joinReq;
  }

  resumePoint(): ResumePoint {
    const gap = this.gap;
    // during a gap, what the application has been handed: the gap's frontier
    if (gap !== null) return { epoch: this.epoch, offset: gap.after, view: gap.view, streams: { ...gap.streams } };
    const streams: Record<string, number> = {};
    for (const [k, s] of this.streams) if (s.received) streams[k] = s.received;
    return { epoch: this.epoch, offset: this.base, view: this.view, streams };
  }

  /**
   * A resume point to keep beyond this page: it stops before any message still held back (an
   * unconfirmed atomic and what waits behind it), so a later page gets those again and learns
   * their outcome instead of skipping them.
   */
  savedPoint(): ResumePoint {
    const point = this.resumePoint();
    const streams = point.streams!;
    const gap = this.gap;
    let lowest = Infinity;
    for (const [k, s] of this.streams) {
      for (const m of s.held) {
        if (gap !== null && !gap.heldBefore.has(m.offset)) continue; // behind the gap: not in its frontier
        lowest = Math.min(lowest, m.offset);
        if (!(streams[k] = streams[k]! - 1)) delete streams[k];
      }
    }
    if (lowest !== Infinity) point.offset = Math.min(point.offset, lowest - 1);
    return point;
  }

  restorePoint(point: ResumePoint): void {
    this.epoch = point.epoch;
    this.base = point.offset;
    this.view = point.view ?? 0;
    this.streams = new Map(
      Object.entries(point.streams ?? {}).map(([k, v]) => [k, { received: v, held: [] }]),
    );
  }

  get canSend(): boolean {
    return this.phase === "active";
  }

  /** Atomic messages (and what waits behind them) not yet handed over. */
  get held(): number {
    let n = 0;
    for (const s of this.streams.values()) n += s.held.length;
    return n;
  }
}

function* unbatched(frame: Frame): Generator<Frame> {
  if (frame.type !== "batch") {
    yield frame;
    return;
  }
  const inner = frame.frames;
  if (!Array.isArray(inner)) throw new ProtocolViolation(`a batch without frames: ${clip(frame)}`);
  for (const f of inner) {
    if (typeof f !== "object" || f === null || Array.isArray(f)) {
      throw new ProtocolViolation(`a batch holding a non-object: ${clip(f)}`);
    }
    yield* unbatched(f as Frame);
  }
}

function clip(x: unknown): string {
  return JSON.stringify(x)?.slice(0, 200) ?? String(x);
}

function int(f: Frame, key: string): number {
  const v = f[key];
  if (typeof v !== "number" || !Number.isInteger(v)) throw new TypeError(`${key}: not an integer`);
  return v;
}

function str(f: Frame, key: string): string {
  const v = f[key];
  if (typeof v !== "string") throw new TypeError(`${key}: not a string`);
  return v;
}

function strings(f: Frame, key: string): readonly string[] {
  const v = f[key];
  if (!Array.isArray(v) || !v.every((x) => typeof x === "string")) {
    throw new TypeError(`${key}: not a list of strings`);
  }
  return Object.freeze([...(v as string[])]);
}

function reqOf(f: Frame): string | number | null {
  const v = f.req;
  return typeof v === "string" || typeof v === "number" ? v : null;
}

/** Whether a position (offset, streams) includes a message: `state_transfer/position.py`. */
export function includes(
  offset: number,
  streams: Record<string, number>,
  mOffset: number,
  mStream: string,
  mSeq: number,
): boolean {
  return mOffset <= offset || mSeq <= (streams[mStream] ?? 0);
}

/** All groups of one client: lives as long as the client, across connections. */
export class ClientProtocol {
  readonly groups = new Map<string, GroupProtocol>();
  /** the session of the last `welcome`: a `hello(true)` presents it */
  session: string | null = null;
  readonly requests = new Requests();
  #out: Frame[] = [];
  #acks = new Map<string, number[]>();

  /** this client's member id, `user#instance` or `user` (a `welcome` may name another) */
  me: string;

  /**
   * `user`: who this client is (with a token the server takes its `sub`, and the `welcome`
   * says so); `instance`: this client's instance of that user, or null for none (docs/protocol.md,
   * "Users and instances").
   */
  constructor(
    public user: string,
    public instance: string | null = null,
  ) {
    this.me = instance === null ? user : `${user}#${instance}`;
  }

  // -- the connection -------------------------------------------------------------------------

  /**
   * The `hello` that opens a connection (the host sends it before any frame of `dataToSend()`).
   * `resume` presents the session of the last `welcome`, if any (G7); then call `rejoinAll()`.
   */
  hello(resume = false, token?: string): Frame {
    const hello: Frame = { type: "hello", protocol: PROTOCOL_VERSION, member: this.user };
    if (this.instance !== null) hello.instance = this.instance;
    if (token !== undefined) hello.token = token;
    if (resume && this.session) hello.resume_session = this.session;
    return hello;
  }

  /**
   * Become another instance of the same user: after a clash (another connection claimed this
   * one, close 4002), so as never to reconnect into it. The session is the other connection's
   * now, so the next hello starts a new one, and `rejoinAll()` joins each group afresh from its
   * resume point (a new member, caught up from where this one was).
   */
  takeInstance(instance: string): void {
    this.instance = instance;
    this.me = `${this.user}#${instance}`;
    this.session = null;
    // An unanswered publish may be stored under the old instance; sent again under this one
    // (ids are per instance) it could be delivered twice: its outcome is unknown, say so.
    const q = this.requests;
    for (const [id] of q.publishes) q.answer("publish", id, null, new PublishRejected("replaced", "replaced"));
    q.publishes.clear();
  }

  /**
   * After a (re)connect: queue a join of every group not left nor abandoned, with its resume
   * point and its own `acceptFrom`, or afresh when it has none; a group with a leave still
   * waiting gets only its leave again (C6: a join could let it in again after a leave the server
   * has). What was queued before is dropped (`discardOutput`). `newReq` makes each
   * join's req. Returns the joins queued, in order.
   */
  rejoinAll(newReq: () => string = () => this.requests.newReq("r")): Rejoin[] {
    const q = this.requests;
    this.discardOutput();
    const kept = this.#out;
    this.#out = [];
    const rejoins: Rejoin[] = [];
    // (a resume join changes its group in place: the map is not changed while this walks it)
    for (const [name, g] of this.groups) {
      if (g.gap !== null) this.#abandonGap(g); // (a host that did not say `connectionLost`)
      if (g.phase === "left" || q.abandoned.has(name)) continue;
      q.joinRetries.delete(name);
      const leave = q.leaves.get(name); // asked while away, or lost with the link
      if (leave) this.leave(leave, name);
      else {
        const req = newReq();
        this.join(req, name, { resume: true }); // (with the group's own acceptFrom)
        rejoins.push({ req, group: name, resume: g.resuming });
      }
    }
    this.#out.push(...kept);
    return rejoins;
  }

  /**
   * The connection is gone: every unanswered publish is sent again (same id) after the next
   * `rejoinAll()`; a checkpoint under way fails (part of it may be lost).
   */
  connectionLost(): void {
    const q = this.requests;
    for (const p of q.publishes.values()) p.sent = false;
    q.unsent = true;
    for (const g of this.groups.values()) if (g.gap !== null) this.#abandonGap(g); // read again after the resume
    for (const req of q.checkpoints) {
      q.answer("checkpoint", req, null, new NotifyError("connection lost during the checkpoint", "lost"));
    }
    q.checkpoints.clear();
  }

  /**
   * Frames queued for a connection that is gone (the rejoin replaces them; ACKs go again at the
   * install or resume): dropped, but for those of a checkpoint still waiting (`rejoinAll` puts
   * them after its joins).
   */
  discardOutput(): void {
    this.#acks.clear();
    this.#out = this.#out.filter((f) => f.type === "checkpoint" && this.requests.checkpoints.has(f.req as string));
  }

  newReq(prefix = "r"): string {
    return this.requests.newReq(prefix);
  }

  /**
   * What the requests opened through the protocol came to since the last call: one `answer`
   * per request that is over, and instructions for the host (`retry-join`, `joined-afresh`,
   * `stray-error`). Drain it after every call that may answer one.
   */
  answers(): RequestOutput[] {
    const out = this.requests.out;
    this.requests.out = [];
    return out;
  }

  /** Forget every request under way (the host fails what waits for them). */
  close(): void {
    this.requests.close();
  }

  // -- requests the application waits for ----------------------------------------------------

  /**
   * The application joins `group` and waits for the first install that has this member (an
   * `answer` of kind `join`, or a `ServerRefused`). From now on the refusal policy applies to
   * the group (`stateProvider`: a join afresh asks for state). Returns the join's req.
   */
  openJoin(
    group: string,
    o: { req?: string; acceptFrom?: string; wantState?: boolean; resumeFrom?: ResumePoint | null; stateProvider?: boolean } = {},
  ): string {
    const q = this.requests;
    q.inUse = true;
    q.abandoned.delete(group);
    q.held.set(group, o.stateProvider ?? false);
    q.joins.add(group);
    q.joinRetries.delete(group);
    const req = o.req ?? q.newReq("j");
    this.join(req, group, { acceptFrom: o.acceptFrom ?? "members", wantState: o.wantState ?? false, resumeFrom: o.resumeFrom ?? null });
    return req;
  }

  /**
   * The application stopped waiting for its join of `group` and dropped it. `timedOut`: the
   * join may still be installed; if it is, the protocol leaves at once.
   */
  giveUpJoin(group: string, o: { timedOut: boolean }): void {
    const q = this.requests;
    q.held.delete(group);
    q.joins.delete(group);
    if (o.timedOut) q.abandoned.add(group);
  }

  /** The application stopped waiting for its join (it leaves instead): no answer comes. */
  forgetJoin(group: string): void {
    this.requests.joins.delete(group);
  }

  /** The server refused a join of `group` that presented no resume point: the group is over. */
  joinRefused(group: string): void {
    const g = this.groups.get(group);
    if (g !== undefined) g.phase = "left";
  }

  /** The application left `group` with nothing to send (never joined, or closed): over. */
  forgetGroup(group: string): void {
    this.joinRefused(group);
  }

  /**
   * (After a `retry-join`'s delay.) Send the join `req` of `group` again, with its resume point,
   * unless the group was installed, left or joined again since; returns whether it did.
   */
  retryJoin(group: string, req: string): boolean {
    const g = this.groups.get(group);
    if (g === undefined || g.phase !== "joining" || g.joinReq !== req) return false;
    this.join(this.requests.newReq("r"), group, { resume: true, acceptFrom: g.acceptFrom });
    return true;
  }

  /** Leave `group`; answered by the install without this member, or refused. Returns the req. */
  openLeave(group: string, o: { req?: string } = {}): string {
    const q = this.requests;
    q.inUse = true;
    const req = o.req ?? q.newReq("l");
    q.leaves.set(group, req);
    this.leave(req, group);
    return req;
  }

  /**
   * The application stopped waiting for the leave `req` (its deadline passed): the group is given
   * up, as a join that timed out is: not rejoined after a reconnect, left again if installed.
   */
  forgetLeave(group: string, req: string): void {
    if (this.requests.leaves.get(group) !== req) return;
    this.requests.leaves.delete(group);
    this.giveUpJoin(group, { timedOut: true });
  }

  /**
   * Queue a publish: sent by `dataToSend()` once the group can send, and again (same id) after
   * a lost connection or a `view_changing` refusal, until answered.
   */
  openPublish(
    group: string,
    id: string,
    payload: unknown,
    o: { order?: string; atomic?: boolean; sameView?: boolean; req?: string } = {},
  ): PendingPublish {
    const q = this.requests;
    q.inUse = true;
    const frame = this.publishFrame(o.req ?? q.newReq("p"), group, id, payload, o);
    const p: PendingPublish = { group, frame, atomic: frame.atomic, sent: false, offset: 0 };
    q.publishes.set(id, p);
    q.unsent = true;
    return p;
  }

  /** The application stopped waiting: never sent again; a reply that still comes is ignored. */
  forgetPublish(id: string): void {
    this.requests.publishes.delete(id);
  }

  /** Fail the publishes of `group` not sent yet (`sentToo`: all), answered with `error`. */
  failPublishes(group: string, error: NotifyError, o: { sentToo?: boolean; sameViewOnly?: boolean } = {}): void {
    this.requests.failPublishes(group, error, o);
  }

  publishFrame(
    req: string,
    group: string,
    id: string,
    payload: unknown,
    o: { order?: string; atomic?: boolean; sameView?: boolean; view?: number } = {},
  ): PublishFrame {
    return {
      type: "publish",
      req,
      group,
      id,
      view: o.view ?? this.groups.get(group)?.view ?? 0,
      order: o.order ?? "fifo",
      atomic: o.atomic ?? false,
      same_view: o.sameView ?? false,
      payload,
    };
  }

  /**
   * A checkpoint: an encoded snapshot that includes exactly the messages `position` covers;
   * answered by `checkpoint_stored`. Returns the req.
   */
  openCheckpoint(group: string, chunks: readonly EncodedChunk[], position: ResumePoint, o: { req?: string } = {}): string {
    const q = this.requests;
    q.inUse = true;
    const req = o.req ?? q.newReq("c");
    q.checkpoints.add(req);
    for (const c of chunks) {
      const frame: Frame = { type: "checkpoint", req, group, index: c.index, last: c.last, data: c.data };
      if (c.last) {
        frame.sha256 = c.sha256;
        frame.position = position;
      }
      this.#out.push(frame);
    }
    return req;
  }

  forgetCheckpoint(req: string): void {
    this.requests.checkpoints.delete(req);
  }

  /**
   * Present a new token; answered by `refreshed`, by a refusal, or by the next `welcome` (a
   * reconnect's hello carries the new token). Returns its key.
   */
  openRefresh(token: string): string {
    const q = this.requests;
    q.inUse = true;
    const key = q.newReq("t");
    q.refreshes.push(key);
    this.#out.push({ type: "refresh", token });
    return key;
  }

  forgetRefresh(key: string): void {
    const q = this.requests;
    q.refreshes = q.refreshes.filter((k) => k !== key);
  }

  // -- frames for the application's requests (no answer awaited) ------------------------------

  /**
   * Queue a join. `resume` presents this group's own resume point; `resumeFrom` presents one
   * saved earlier (`savedPoint()`, e.g. by the page before a reload). `acceptFrom` defaults to
   * the group's own with `resume`, "members" otherwise.
   */
  join(
    req: string,
    group: string,
    opts: { wantState?: boolean; acceptFrom?: string; resume?: boolean; resumeFrom?: ResumePoint | null } = {},
  ): void {
    const wantState = opts.wantState ?? false;
    let g = this.groups.get(group);
    const acceptFrom = opts.acceptFrom ?? (opts.resume && g !== undefined ? g.acceptFrom : "members");
    const frame: Frame = {
      type: "join",
      req,
      group,
      want_state: wantState,
      accept_from: acceptFrom,
    };
    if (opts.resumeFrom) {
      g = new GroupProtocol(group, wantState, req);
      g.acceptFrom = acceptFrom;
      this.groups.set(group, g);
      g.restorePoint(opts.resumeFrom);
      frame.resume = g.resumePoint();
      g.resuming = g.catchingUp = true;
      this.#out.push(frame);
      return;
    }
    if (opts.resume && g !== undefined && g.epoch) {
      const point = g.resumePoint();
      const held = undecided(g).sort((a, b) => a - b);
      // their outcomes come first (those that left the server's window too)
      frame.resume = held.length ? { ...point, held } : point;
    } else if (opts.resume && g !== undefined) {
      frame.want_state = g.wantState; // nothing to resume (never installed, or refused)
    }
    if (g === undefined || !opts.resume) {
      g = new GroupProtocol(group, wantState, req);
      this.groups.set(group, g);
    } else {
      g.phase = "joining";
      g.joinReq = req;
    }
    g.acceptFrom = acceptFrom;
    g.resuming = g.catchingUp = "resume" in frame;
    this.#out.push(frame);
  }

  /**
   * The server refused this group's resume point (`reason`, its error code): join without
   * one (`acceptFrom`: the group's own by default). What is held back of the old stream is
   * dropped (a log that no longer has it cannot confirm it), and the next install is preceded
   * by a `reset`; a second refusal before that install keeps the first reason.
   */
  joinAfresh(
    req: string,
    group: string,
    reason: string,
    opts: { wantState?: boolean; acceptFrom?: string; lost?: number | null } = {},
  ): void {
    const g = this.groups.get(group);
    if (g === undefined) throw new Error(`joinAfresh: unknown group ${group}`);
    // `lost` counts the offsets after the point presented (`base`); those up to `top` had
    // reached this member already (their streams said so)
    const end = Math.max(g.base, g.top);
    const lost = opts.lost ?? null;
    g.refusal ??= { reason, epoch: g.epoch, offset: end, lost: lost === null ? null : Math.max(0, g.base + lost - end) };
    g.acceptFrom = opts.acceptFrom ?? g.acceptFrom;
    g.phase = "joining";
    g.joinReq = req;
    g.resuming = g.catchingUp = false;
    g.wantState = opts.wantState ?? false;
    g.epoch = g.base = g.top = 0;
    g.proposed = null;
    g.streams.clear();
    g.atomic.clear();
    g.stateBuffer = null;
    g.snapshot = null;
    g.stateReplay = new Map();
    this.#acks.delete(group);
    this.#out.push({
      type: "join",
      req,
      group,
      want_state: g.wantState,
      accept_from: g.acceptFrom,
    });
  }

  leave(req: string, group: string): void {
    this.#out.push({ type: "leave", req, group });
  }

  send(frame: Frame): void {
    this.#out.push(frame);
  }

  /** Whether `dataToSend()` would return anything (waiting publishes aside: `requests.unsent`). */
  hasOutput(): boolean {
    return this.#acks.size > 0 || this.#out.length > 0;
  }

  /**
   * Frames to write, ACKs first (they must precede any flush_ok queued after them), then the
   * queued frames, then the waiting publishes whose group can send, in the order opened.
   */
  dataToSend(): Frame[] {
    if (this.requests.unsent) this.#queuePublishes();
    const frames: Frame[] = [];
    for (const [group, offsets] of this.#acks) frames.push({ type: "ack", group, offsets });
    this.#acks.clear();
    frames.push(...this.#out);
    this.#out = [];
    return frames;
  }

  #queuePublishes(): void {
    const q = this.requests;
    let held = false;
    for (const p of q.publishes.values()) {
      if (p.sent) continue;
      const g = this.groups.get(p.group);
      if (g === undefined || !g.canSend) {
        held = true;
        continue;
      }
      if (!p.frame.same_view && p.frame.view > g.view) p.frame.view = g.view; // a reset log
      this.#out.push(p.frame);
      p.sent = true;
    }
    q.unsent = held;
  }

  /** The group a join request (its `req`) was for. */
  groupOfJoin(req: string | number | null): GroupProtocol | undefined {
    if (req === null || req === "") return undefined;
    for (const g of this.groups.values()) if (g.joinReq === req) return g;
    return undefined;
  }

  // -- frames from the server ---------------------------------------------------------------

  /**
   * Events for the application and replies to requests, from one server frame. Throws
   * `ProtocolViolation` (with what the frames before the bad one produced) when the frame
   * breaks the protocol or is malformed.
   */
  receive(frame: Frame): { events: ProtocolEvent[]; replies: Reply[] } {
    const events: ProtocolEvent[] = [];
    const replies: Reply[] = [];
    const frames = unbatched(frame);
    for (;;) {
      let violation: ProtocolViolation | null = null;
      const raw: ProtocolEvent[] = [];
      try {
        const next = frames.next();
        if (next.done) break;
        // a history page is for the application now, ahead of what its gap keeps
        if (next.value.type === "history_page") this.#historyPage(next.value, events);
        else this.#receiveOne(next.value, raw, replies);
      } catch (e) {
        violation =
          e instanceof ProtocolViolation
            ? e
            : new ProtocolViolation(`malformed frame (${String(e)})`);
      }
      // Routed frame by frame: within one batch the install, later messages and the
      // snapshot's last chunk may all come, and what follows the install must wait.
      this.#route(raw, events);
      if (violation !== null) {
        if (replies.length && this.requests.inUse) this.#matchReplies(replies, events);
        violation.events = events;
        violation.replies = replies;
        throw violation;
      }
    }
    if (replies.length && this.requests.inUse) this.#matchReplies(replies, events);
    return { events, replies };
  }

  /**
   * The snapshot announced by `snapshot-ready` is decoded (`data`), or could not be
   * (`reason`): the events that waited for it, with it first.
   */
  stateDecoded(group: string, transfer: string, data: Uint8Array | null, reason: string | null): ProtocolEvent[] {
    const g = this.groups.get(group);
    const snap = g?.snapshot;
    if (g === undefined || snap == null || snap.transfer !== transfer || !snap.done || g.stateBuffer === null) {
      return []; // overtaken: another transfer, a reset, or the group was left
    }
    const events: ProtocolEvent[] = [];
    if (data === null) {
      // Never a wrong state: nothing is restored, and what was buffered is dropped with it.
      g.stateBuffer = [];
      this.#stateDone(g, stateReceived(g.name, snap.offset, null, reason ?? "bad_transfer"), events);
      return events;
    }
    const covered = { ...snap.streams };
    // The replayed messages a checkpoint lacks, in log order.
    const completion = [...g.stateReplay.values()]
      .filter((m) => !includes(0, covered, m.offset, m.stream, m.seq))
      .sort((a, b) => a.offset - b.offset);
    // What the donor had applied when it took the snapshot is in it already.
    const later = g.stateBuffer.filter(
      (e) => !(e.type === "message" && includes(0, covered, e.offset, e.stream, e.seq)),
    );
    g.stateBuffer = [...completion, ...later];
    this.#stateDone(g, stateReceived(g.name, snap.offset, data, null, covered), events);
    return events;
  }

  #route(raw: ProtocolEvent[], events: ProtocolEvent[]): void {
    for (const ev of raw) {
      const g = this.groups.get(ev.group);
      const gap = g?.gap;
      if (gap) {
        // behind a gap being read: kept until the gap is, but for a message received before the
        // gap (released now) and the ephemeral ones (never in the log)
        if (ev.type === "ephemeral" || (ev.type === "message" && gap.heldBefore.delete(ev.offset))) events.push(ev);
        else gap.events.push(ev);
        continue;
      }
      const passes =
        ev.type === "state-received" ||
        ev.type === "state-request" ||
        ev.type === "snapshot-ready" ||
        ev.type === "view" ||
        ev.type === "removed" ||
        ev.type === "reset" ||
        ev.type === "ephemeral";
      if (g !== undefined && g.stateBuffer !== null && !passes) g.stateBuffer.push(ev);
      else events.push(ev);
    }
  }

  #receiveOne(f: Frame, events: ProtocolEvent[], replies: Reply[]): void {
    switch (f.type) {
      case "deliver":
        this.#deliver(f, events);
        return;
      case "confirm":
      case "abort": {
        const g = this.groups.get(str(f, "group"));
        if (g === undefined) return;
        const offsets = f.offsets;
        if (!Array.isArray(offsets)) throw new TypeError("offsets");
        for (const off of offsets) if (g.atomic.has(off as number)) g.atomic.set(off as number, f.type === "confirm");
        this.#release(g, events);
        return;
      }
      case "view_change":
        this.#viewChange(f, events);
        return;
      case "view_install":
        this.#viewInstall(f, events);
        return;
      case "view_resume": {
        const g = this.groups.get(str(f, "group"));
        if (g === undefined) return;
        if (g.phase === "joining") this.#reack(g); // our own resume: re-ACK what we hold
        g.phase = "active";
        g.proposed = null;
        const resumed: ViewResumedEvent = { type: "view-resumed", group: g.name, view: int(f, "view") };
        events.push(resumed);
        // A join is answered by the resume of its session too (a reload within suspect_timeout).
        this.#answerJoin(resumed);
        return;
      }
      case "catchup_done": {
        const g = this.groups.get(str(f, "group"));
        if (g === undefined) return;
        const offset = int(f, "offset");
        g.base = Math.max(g.base, offset); // everything up to here has been received
        g.catchingUp = false;
        events.push({ type: "caught-up", group: g.name, offset, count: int(f, "count") });
        return;
      }
      case "catchup_log":
        this.#catchupLog(f);
        return;
      case "ephemeral":
        str(f, "group");
        events.push(f as unknown as EphemeralEvent); // the frame is the event
        return;
      case "state_request":
        str(f, "group");
        events.push({ ...f, type: "state-request" } as unknown as StateRequest);
        return;
      case "state_chunk":
        this.#stateChunk(f, events);
        return;
      case "error": {
        const reading = this.#gapOf(f.req);
        if (reading !== undefined) {
          this.#ask(reading); // a `history` refused: asked again (#ask says how often)
          return;
        }
        const g = this.groupOfJoin(reqOf(f));
        if (g !== undefined && g.stateBuffer !== null && (f.code === "state_unavailable" || f.code === "state_too_large")) {
          this.#stateDone(g, stateReceived(g.name, 0, null, f.code), events);
          return;
        }
        replies.push({
          type: "error",
          code: str(f, "code"),
          message: String(f.message),
          req: reqOf(f),
          lost: typeof f.lost === "number" ? f.lost : null,
        });
        return;
      }
      case "published":
      case "rejected":
      case "outcome":
      case "refreshed":
      case "checkpoint_stored":
      case "pong":
        replies.push(f as unknown as Reply); // the frame is the reply (docs/protocol.md)
        return;
      case "welcome":
        this.#welcome(f);
        return;
      default:
        throw new ProtocolViolation(`unknown frame ${clip(f.type)}`);
    }
  }

  #deliver(f: Frame, events: ProtocolEvent[]): void {
    const g = this.groups.get(str(f, "group"));
    if (g === undefined || g.phase === "left") return;
    const m = message(g, f); // a malformed frame throws here, before anything is counted
    if (g.stateBuffer !== null && m.offset <= g.stateBoundary) {
      // Part of the state (a checkpoint's completion): ordered and handed over with the
      // snapshot, outside the stream bookkeeping.
      g.stateReplay.set(`${m.stream}\u0000${m.seq}`, m);
      return;
    }
    let s = g.streams.get(m.stream);
    if (s === undefined) {
      s = { received: 0, held: [] };
      g.streams.set(m.stream, s);
    }
    if (m.seq <= s.received) {
      g.duplicates += 1;
      return;
    }
    if (s.received && m.seq !== s.received + 1) {
      throw new ProtocolViolation(`${g.name}/${m.stream}: seq ${m.seq} after ${s.received}`);
    }
    const gap = g.gap;
    if (gap !== null && !gap.ahead.has(m.stream)) gap.ahead.set(m.stream, m.seq); // behind the gap
    s.received = m.seq;
    g.top = Math.max(g.top, m.offset);
    if (m.atomic) {
      g.atomic.set(m.offset, null);
      const acks = this.#acks.get(g.name);
      if (acks) acks.push(m.offset);
      else this.#acks.set(g.name, [m.offset]);
    }
    if (s.held.length || m.atomic) {
      s.held.push(m);
      if (m.atomic) this.#releaseStream(g, s, events);
    } else {
      events.push(m);
    }
  }

  #release(g: GroupProtocol, events: ProtocolEvent[]): void {
    for (const s of g.streams.values()) if (s.held.length) this.#releaseStream(g, s, events);
  }

  #releaseStream(g: GroupProtocol, s: Stream, events: ProtocolEvent[]): void {
    while (s.held.length) {
      const m = s.held[0]!;
      if (m.atomic) {
        const outcome = g.atomic.get(m.offset);
        if (outcome === null || outcome === undefined) return;
        g.atomic.delete(m.offset);
        s.held.shift();
        if (outcome) events.push(m);
      } else {
        events.push(s.held.shift()!);
      }
    }
  }

  #viewChange(f: Frame, events: ProtocolEvent[]): void {
    const g = this.groups.get(str(f, "group"));
    if (g === undefined || g.phase === "left") return;
    const proposed = int(f, "proposed");
    const transitional = movedTogether(strings(f, "members"), strings(f, "joining"));
    g.phase = "flushing";
    g.proposed = proposed;
    events.push({ ...f, type: "view-changing", transitional } as unknown as ViewChangingEvent); // the frame is the event
    // Every atomic message held is already ACKed (acks queued in dataToSend go first).
    this.#out.push({ type: "flush_ok", group: g.name, view: proposed });
  }

  #viewInstall(f: Frame, events: ProtocolEvent[]): void {
    const g = this.groups.get(str(f, "group"));
    if (g === undefined) return;
    const installed = viewEvent(g.name, f);
    const { view, members, left, offset } = installed;
    const epoch = int(f, "epoch");
    g.view = view;
    g.proposed = null;
    if (left.includes(this.me) && !members.includes(this.me)) {
      g.phase = "left";
      g.stateBuffer = null;
      // why, when it did not ask to go (`removed` by the server API, `flush_timeout`...)
      const reason = typeof f.reason === "string" ? f.reason : null;
      events.push({ type: "removed", group: g.name, view, reason });
      this.#removed(g.name);
      return;
    }
    if (g.phase === "joining" && g.wantState) {
      g.stateBuffer = []; // everything after this install waits for the snapshot
      g.stateReplay = new Map();
      g.stateBoundary = offset;
      g.snapshot = null;
    }
    if (g.phase === "joining" && g.refusal !== null) {
      const r = g.refusal;
      g.refusal = null;
      events.push({
        type: "reset",
        group: g.name,
        reason: r.reason,
        oldEpoch: r.epoch,
        oldOffset: r.offset,
        newEpoch: epoch,
        newOffset: offset,
        lost: r.lost,
      });
      if (r.epoch !== epoch) {
        // The views their stamps name are gone with the old log: refused, never misapplied.
        this.requests.failPublishes(g.name, new PublishRejected("log reset", "stale_view"), { sameViewOnly: true });
      }
    }
    if (g.phase === "joining") {
      if (!g.epoch || g.epoch !== epoch || g.wantState) {
        // A fresh start: knowledge begins here
        g.streams.clear();
        g.atomic.clear();
        g.base = offset;
      }
      g.epoch = epoch;
      this.#reack(g);
    } else if (g.stateBuffer === null) {
      // A member of the view before: every message up to the install has reached it.
      g.base = Math.max(g.base, offset);
    }
    g.phase = "active";
    g.members = members;
    events.push(installed);
    if (this.requests.inUse) this.#installed(installed);
  }

  #stateChunk(f: Frame, events: ProtocolEvent[]): void {
    const g = this.groups.get(str(f, "group"));
    if (g === undefined || g.stateBuffer === null) return;
    const transfer = str(f, "transfer");
    const index = int(f, "index");
    if (g.snapshot === null || g.snapshot.transfer !== transfer) {
      // a replacement donor restarts
      g.snapshot = { transfer, chunks: [], offset: 0, streams: {}, done: false };
    }
    const snap = g.snapshot;
    if (snap.done) return;
    if (index !== snap.chunks.length) {
      g.stateBuffer = [];
      this.#stateDone(
        g,
        stateReceived(g.name, 0, null, `bad_transfer: chunk ${index}`),
        events,
      );
      return;
    }
    snap.chunks.push(str(f, "data"));
    if (f.last !== true) return;
    snap.done = true;
    snap.offset = int(f, "offset");
    snap.streams = { ...((f.streams as Record<string, number> | null) ?? {}) };
    events.push({
      type: "snapshot-ready",
      group: g.name,
      transfer,
      chunks: snap.chunks,
      sha256: typeof f.sha256 === "string" ? f.sha256 : null,
    });
  }

  #stateDone(g: GroupProtocol, received: StateReceivedEvent, events: ProtocolEvent[]): void {
    const buffered = g.stateBuffer ?? [];
    g.stateBuffer = null;
    g.snapshot = null;
    g.wantState = false;
    g.stateReplay = new Map();
    events.push(received, ...buffered);
  }

  /**
   * After a resume or rejoin, ACK again what is held: the first ACK may have been lost; the
   * server answers with the outcome if it is already known.
   */
  #reack(g: GroupProtocol): void {
    const waiting = undecided(g);
    if (!waiting.length) return;
    const acks = this.#acks.get(g.name);
    if (acks) acks.push(...waiting);
    else this.#acks.set(g.name, waiting);
  }
  // -- catch-up from the log (catchup.ts) ----------------------------------------------------

  /**
   * `catchup_log`: the messages after `after` and before `before` are read from the log, a page
   * at a time; what comes meanwhile waits for the application behind them. Every stream starts
   * afresh behind the gap (what is held back stays: it is older), and the gap's end checks that
   * the two meet.
   */
  #catchupLog(f: Frame): void {
    const g = this.groups.get(str(f, "group"));
    if (g === undefined || g.phase === "left") return;
    // one per resume or rejoin, and a reconnect ends it
    if (g.gap !== null) throw new ProtocolViolation(`${g.name}: catchup_log during a gap`);
    const after = int(f, "after");
    const before = int(f, "before");
    if (after >= before - 1) return;
    const gap = (g.gap = new Gap(g.name, g.epoch, after, before, g.resumePoint().streams!, Math.max(g.view, int(f, "view"))));
    for (const s of g.streams.values()) {
      s.received = 0;
      for (const m of s.held) gap.heldBefore.add(m.offset);
    }
    this.#ask(g);
  }

  /**
   * Ask for the gap's next page (or the same again): a `history` request, `h1`, `h2`... A page
   * refused (the log could not be read now; in a cluster, a node whose copy is behind answered)
   * or one that does not move on counts as a try: after `PAGE_RETRIES`, `GapUnreadable`, a
   * protocol violation: the host reconnects and resumes from the gap's frontier (nothing
   * skipped; a member that was removed learns it there).
   */
  #ask(g: GroupProtocol): void {
    const gap = g.gap!;
    if (gap.tries >= PAGE_RETRIES) throw new GapUnreadable(`${g.name}: history refused`);
    this.#out.push(gap.request(this.requests.newReq("h"), g.acceptFrom));
  }

  #gapOf(req: unknown): GroupProtocol | undefined {
    for (const g of this.groups.values()) if (g.gap !== null && g.gap.req === req) return g;
    return undefined;
  }

  #historyPage(f: Frame, events: ProtocolEvent[]): void {
    const g = this.#gapOf(f.req);
    if (g === undefined) return; // for a gap given up (a lost connection, a removal): read again later
    const gap = g.gap!;
    for (const k of ["epoch", "first", "end", "head"]) int(f, k);
    // (not lists: they throw, a malformed frame)
    const messages = (f.messages as Frame[]).map((m) => message(g, m, true));
    const installs = (f.installs as Frame[]).map((i) => viewEvent(g.name, i));
    gap.page({ ...(f as unknown as Page), aborted: [...(f.aborted as number[])], messages, installs }, events);
    if (gap.members !== null && gap.view > g.view) {
      // the log knew a later view
      g.view = gap.view;
      g.members = gap.members;
    }
    if (gap.done) this.#closeGap(g, events);
    else this.#ask(g);
  }

  /**
   * The gap is read: streams go on from where what came behind it left them, and its events
   * follow the history's; its `caught-up` (the replay's `catchup_done` comes before any page:
   * the server sends it with the replay) counts the pages' messages too.
   */
  #closeGap(g: GroupProtocol, events: ProtocolEvent[]): void {
    const gap = g.gap!;
    g.gap = null;
    for (const [k, seq] of Object.entries(gap.streams)) {
      const s = g.streams.get(k) ?? { received: 0, held: [] };
      s.received = Math.max(s.received, seq);
      g.streams.set(k, s);
    }
    g.base = Math.max(g.base, gap.after);
    // (one by one: `push(...gap.events)` could overflow the stack)
    for (const ev of gap.events) events.push(ev.type === "caught-up" ? { ...ev, count: ev.count + gap.count } : ev);
  }

  /**
   * Stop reading the gap (the connection is lost, or the member was removed): the group's
   * knowledge goes back to the gap's frontier, so its next resume point starts there, and what
   * came behind the gap (kept, never handed over) comes again.
   */
  #abandonGap(g: GroupProtocol): void {
    const { gap, streams } = g;
    g.restorePoint(g.resumePoint()); // the gap's frontier
    g.gap = null;
    // what was held back before the gap stays held (with its atomic bookkeeping); the rest goes
    const before = gap!.heldBefore;
    for (const [k, s] of g.streams) s.held = streams.get(k)?.held.filter((m) => before.has(m.offset)) ?? [];
    for (const off of g.atomic.keys()) if (!before.has(off)) g.atomic.delete(off);
  }

  // -- requests: what the server's frames answer ---------------------------------------------

  /** A connection is open: its session is the one to resume, its member is `me`; the token its
   * hello carried is in force, so every refresh waiting is answered. */
  #welcome(f: Frame): void {
    this.session = typeof f.session === "string" ? f.session : null;
    if (typeof f.member === "string") this.me = f.member;
    // (a server before instances says only `member`)
    if (typeof f.user === "string") this.user = f.user;
    else if (this.instance === null) this.user = this.me;
    const q = this.requests;
    for (const key of q.refreshes) q.answer("refresh", key, null);
    q.refreshes = [];
  }

  #answerJoin(e: ViewEvent | ViewResumedEvent): void {
    if (this.requests.joins.delete(e.group)) this.requests.answer("join", e.group, e);
  }

  #installed(e: ViewEvent): void {
    const q = this.requests;
    const name = e.group;
    q.joinRetries.delete(name);
    if (!e.members.includes(this.me)) return;
    if (q.joins.has(name)) this.#answerJoin(e);
    else if (q.abandoned.has(name) && !q.held.has(name)) {
      // a join given up on (timed out) came through after all: undo it
      this.leave(q.newReq("l"), name);
    }
  }

  #removed(group: string): void {
    const g = this.groups.get(group);
    if (g?.gap) this.#abandonGap(g); // moot: a rejoin reads it again
    const q = this.requests;
    q.abandoned.delete(group);
    q.joinRetries.delete(group);
    const leave = q.leaves.get(group);
    if (leave !== undefined) {
      q.leaves.delete(group);
      q.answer("leave", group, null);
    }
    q.failPublishes(group, new GroupLeftError(`no longer a member of ${group}`));
  }

  #matchReplies(replies: readonly Reply[], events: ProtocolEvent[]): void {
    const q = this.requests;
    for (const r of replies) {
      switch (r.type) {
        case "published": {
          const p = q.publishes.get(r.id);
          if (p === undefined) break;
          p.offset = r.offset;
          if (!p.atomic) {
            q.publishes.delete(r.id);
            q.answer("publish", r.id, { id: r.id, offset: r.offset });
          }
          break;
        }
        case "outcome": {
          const p = q.publishes.get(r.id);
          if (p === undefined) break;
          q.publishes.delete(r.id);
          q.answer("publish", r.id, { id: r.id, offset: p.offset || r.offset, committed: r.committed, reason: r.reason ?? null });
          break;
        }
        case "rejected": {
          const p = q.publishes.get(r.id);
          if (p === undefined) break;
          if (RESENT_PUBLISH_REFUSALS.has(r.code)) {
            p.sent = false; // it crossed a view change: send it after the install
            q.unsent = true;
            break;
          }
          q.publishes.delete(r.id);
          q.answer("publish", r.id, null, new PublishRejected(`${p.group}: rejected ${r.code}`, r.code));
          break;
        }
        case "checkpoint_stored": {
          const req = String(r.req);
          if (q.checkpoints.delete(req)) q.answer("checkpoint", req, { offset: r.offset, bytes: r.bytes });
          break;
        }
        case "refreshed": {
          const key = q.refreshes.shift();
          if (key !== undefined) q.answer("refresh", key, null);
          break;
        }
        case "error":
          this.#refused(r, events);
          break;
        default:
          break;
      }
    }
  }

  /** An `error` frame: the refusal of a join, a checkpoint, a leave or a refresh, or of nothing
   * this client waits for (`stray-error`). */
  #refused(r: ErrorReply, events: ProtocolEvent[]): void {
    const q = this.requests;
    const g = this.groupOfJoin(r.req);
    const error = new ServerRefused(`${r.code}: ${r.message}`, r.code);
    if (g !== undefined && g.phase === "joining" && q.held.has(g.name)) {
      this.#joinRefused(g, r, error, events);
      return;
    }
    const req = r.req === null ? null : String(r.req);
    if (req !== null && q.checkpoints.delete(req)) {
      q.answer("checkpoint", req, null, error);
      return;
    }
    if (g !== undefined && q.joins.delete(g.name)) {
      q.answer("join", g.name, null, error);
      return;
    }
    for (const [group, leave] of q.leaves) {
      if (leave !== req) continue;
      if (LEFT_LEAVE_REFUSALS.has(r.code)) {
        // Already out (removed while away): the leave is done.
        const pg = this.groups.get(group);
        if (pg !== undefined) pg.phase = "left";
        events.push({ type: "removed", group, view: pg?.view ?? 0, reason: r.code });
        this.#removed(group);
      } else {
        q.leaves.delete(group);
        q.answer("leave", group, null, error);
      }
      return;
    }
    const refresh = req === null && REFRESH_REFUSALS.has(r.code) ? q.refreshes.shift() : undefined;
    if (refresh !== undefined) q.answer("refresh", refresh, null, error);
    else q.out.push({ type: "stray-error", error: r });
  }

  /**
   * The server refused the join under way of a group the application holds (never leave a
   * group that looks joined but is not): "not now" → the same join again after a backoff delay
   * (`retry-join`), a few times; a refused resume point → join afresh, with state transfer when
   * the group has a state provider (`reset`, then the new view); a join without one → the
   * waiting `join()` fails, or a joined group is over (`removed` with the code as its reason).
   */
  #joinRefused(g: GroupProtocol, r: ErrorReply, error: ServerRefused, events: ProtocolEvent[]): void {
    const q = this.requests;
    const name = g.name;
    const retries = q.joinRetries.get(name) ?? 0;
    if (RETRIED_JOIN_REFUSALS.has(r.code) && retries < JOIN_RETRIES) {
      q.joinRetries.set(name, retries + 1);
      q.out.push({ type: "retry-join", group: name, req: g.joinReq, attempt: retries + 1 });
      return;
    }
    if (g.resuming && r.code !== "removed") {
      // (`removed`: the server API removed this member, perhaps while it was away: over)
      const wantState = q.held.get(name) ?? false;
      this.joinAfresh(q.newReq("r"), name, r.code, { wantState, lost: r.lost });
      q.out.push({ type: "joined-afresh", group: name, code: r.code, message: r.message, wantState });
      return;
    }
    this.joinRefused(name);
    if (q.joins.delete(name)) {
      q.answer("join", name, null, error); // the application's join() fails
      return;
    }
    q.failPublishes(name, new GroupLeftError(`${name}: rejoin refused (${r.code})`, r.code), { sentToo: true });
    events.push({ type: "removed", group: name, view: g.view, reason: r.code });
    this.#removed(name);
  }

}

function message(g: GroupProtocol, f: Frame, replayed = g.catchingUp): Message {
  int(f, "offset");
  int(f, "seq");
  str(f, "stream");
  return { ...f, type: "message", group: g.name, atomic: f.atomic === true, replayed } as unknown as Message;
}

function viewEvent(group: string, f: Frame): ViewEvent {
  const members = strings(f, "members");
  const joined = strings(f, "joined");
  const left = strings(f, "left");
  const users = usersOf(members);
  const [usersJoined, usersLeft] = arrivals(users, joined, left);
  const transitional = movedTogether(members, joined);
  return { type: "view", group, view: int(f, "view"), members, joined, left, offset: int(f, "offset"), transitional, users, usersJoined, usersLeft };
}

/**
 * The members of a view (proposed or installed) that come from the view before it: all but its
 * joiners. The server builds view v+1 as v's members less the leavers, then the joiners
 * (notify/core/view.py `View.successor`), so this is v less the leavers, computed from what the
 * frame carries (EVS's transitional configuration, docs/semantics.md).
 */
function movedTogether(members: readonly string[], joined: readonly string[]): string[] {
  const fresh = new Set(joined);
  return members.filter((m) => !fresh.has(m));
}

/** The atomic messages held with no outcome yet. */
function undecided(g: GroupProtocol): number[] {
  return [...g.atomic].filter(([, outcome]) => outcome === null).map(([off]) => off);
}

function stateReceived(
  group: string,
  offset: number,
  snapshot: Uint8Array | null,
  reason: string | null,
  streams: Record<string, number> = {},
): StateReceivedEvent {
  return { type: "state-received", group, offset, snapshot, reason, streams };
}
