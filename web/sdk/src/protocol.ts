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
 *
 * The one difference: a snapshot's last chunk cannot be decoded synchronously in a browser
 * (`DecompressionStream` and `crypto.subtle` are asynchronous), so the protocol hands out a
 * `snapshot-ready` and keeps holding everything after the install until the caller reports the
 * decoded snapshot with `stateDecoded()`.
 */

import type {
  EphemeralEvent,
  ViewChangingEvent,
  GroupEvent,
  Message,
  Reply,
  StateReceivedEvent,
  StateRequest,
} from "./events.js";

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

export class ProtocolViolation extends Error {
  events: ProtocolEvent[] = [];
  replies: Reply[] = [];
  constructor(message: string) {
    super(message);
    this.name = "ProtocolViolation";
  }
}

interface Refusal {
  readonly reason: string;
  readonly epoch: number;
  readonly offset: number;
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

  constructor(readonly name: string, wantState: boolean, joinReq: string) {
    this.wantState = wantState;
    this.joinReq = joinReq;
  }

  resumePoint(): ResumePoint {
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
    let lowest = Infinity;
    for (const s of this.streams.values()) for (const m of s.held) lowest = Math.min(lowest, m.offset);
    if (lowest !== Infinity) {
      point.offset = Math.min(this.base, lowest - 1);
      const streams: Record<string, number> = {};
      for (const [k, s] of this.streams) {
        const n = s.received - s.held.length;
        if (n) streams[k] = n;
      }
      point.streams = streams;
    }
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
  #out: Frame[] = [];
  #acks = new Map<string, number[]>();

  constructor(readonly me: string) {}

  // -- requests from the application -------------------------------------------------------

  /**
   * Queue a join. `resume` presents this group's own resume point; `resumeFrom` presents one
   * saved earlier (`savedPoint()`, e.g. by the page before a reload).
   */
  join(
    req: string,
    group: string,
    opts: { wantState?: boolean; acceptFrom?: string; resume?: boolean; resumeFrom?: ResumePoint | null } = {},
  ): void {
    const wantState = opts.wantState ?? false;
    const frame: Frame = {
      type: "join",
      req,
      group,
      want_state: wantState,
      accept_from: opts.acceptFrom ?? "members",
    };
    let g = this.groups.get(group);
    if (opts.resumeFrom) {
      g = new GroupProtocol(group, wantState, req);
      this.groups.set(group, g);
      g.restorePoint(opts.resumeFrom);
      frame.resume = g.resumePoint();
      g.resuming = g.catchingUp = true;
      this.#out.push(frame);
      return;
    }
    if (opts.resume && g !== undefined && g.epoch) {
      frame.resume = g.resumePoint();
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
    g.resuming = g.catchingUp = "resume" in frame;
    this.#out.push(frame);
  }

  /**
   * The server refused this group's resume point (`reason`, its error code): join without
   * one. What is held back of the old stream is dropped (a log that no longer has it cannot
   * confirm it), and the next install is preceded by a `reset`.
   */
  joinAfresh(req: string, group: string, reason: string, opts: { wantState?: boolean; acceptFrom?: string } = {}): void {
    const g = this.groups.get(group);
    if (g === undefined) throw new Error(`joinAfresh: unknown group ${group}`);
    g.refusal ??= { reason, epoch: g.epoch, offset: Math.max(g.base, g.top) };
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
      accept_from: opts.acceptFrom ?? "members",
    });
  }

  leave(req: string, group: string): void {
    this.#out.push({ type: "leave", req, group });
  }

  send(frame: Frame): void {
    this.#out.push(frame);
  }

  /** Frames to write, ACKs first (they must precede any flush_ok queued after them). */
  dataToSend(): Frame[] {
    const frames: Frame[] = [];
    for (const [group, offsets] of this.#acks) frames.push({ type: "ack", group, offsets });
    this.#acks.clear();
    frames.push(...this.#out);
    this.#out = [];
    return frames;
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
        this.#receiveOne(next.value, raw, replies);
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
        violation.events = events;
        violation.replies = replies;
        throw violation;
      }
    }
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
        events.push({ type: "view-resumed", group: g.name, view: int(f, "view") });
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
        const g = this.groupOfJoin(reqOf(f));
        if (g !== undefined && g.stateBuffer !== null && (f.code === "state_unavailable" || f.code === "state_too_large")) {
          this.#stateDone(g, stateReceived(g.name, 0, null, f.code), events);
          return;
        }
        replies.push({ type: "error", code: str(f, "code"), message: String(f.message), req: reqOf(f) });
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
        return; // a late duplicate; the client reads the first one itself
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
    g.phase = "flushing";
    g.proposed = proposed;
    events.push({ ...f, type: "view-changing" } as unknown as ViewChangingEvent); // the frame is the event
    // Every atomic message held is already ACKed (acks queued in dataToSend go first).
    this.#out.push({ type: "flush_ok", group: g.name, view: proposed });
  }

  #viewInstall(f: Frame, events: ProtocolEvent[]): void {
    const g = this.groups.get(str(f, "group"));
    if (g === undefined) return;
    const view = int(f, "view");
    const members = strings(f, "members");
    const joined = strings(f, "joined");
    const left = strings(f, "left");
    const offset = int(f, "offset");
    const epoch = int(f, "epoch");
    g.view = view;
    g.proposed = null;
    if (left.includes(this.me) && !members.includes(this.me)) {
      g.phase = "left";
      g.stateBuffer = null;
      events.push({ type: "removed", group: g.name, view, reason: null });
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
      });
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
    events.push({ type: "view", group: g.name, view, members, joined, left, offset });
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
    const waiting = [...g.atomic].filter(([, outcome]) => outcome === null).map(([off]) => off);
    if (!waiting.length) return;
    const acks = this.#acks.get(g.name);
    if (acks) acks.push(...waiting);
    else this.#acks.set(g.name, waiting);
  }
}

function message(g: GroupProtocol, f: Frame): Message {
  int(f, "offset");
  int(f, "seq");
  str(f, "stream");
  return { ...f, type: "message", group: g.name, atomic: f.atomic === true, replayed: g.catchingUp } as unknown as Message;
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
