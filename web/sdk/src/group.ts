/**
 * A group as the application holds it: join, publish, listen, leave.
 *
 * One handle per group name and client (`client.group(name)` is idempotent), reference-counted:
 * every `join()` counts, every `leave()` uncounts, and the member really leaves only when the
 * count reaches zero and stays there past the current task. React StrictMode's
 * mount → cleanup → mount therefore costs one join, not a join, a leave and a join (three view
 * changes for everybody else).
 *
 * Events reach `on` listeners in order, synchronously as their frames are read; the SDK has
 * already answered what the protocol needs (`ack`, `flush_ok`) before the application sees
 * anything, so a slow or throwing handler cannot stall a view change. A handler may call
 * `leave`, `join`, `publish` or `client.close()`: the events after that point are handed over
 * (or not) as if the call had come between them.
 */

import type { EventOf, GroupEvent, GroupEventType } from "./events.js";
import { Emitter, type Unsubscribe } from "./emitter.js";
import type { ResumePoint } from "./protocol.js";
import type { PublishResult } from "./requests.js";

/** What the group's state is made of, for joiners (state transfer, G9) and reloads. */
export interface StateProvider {
  /** The application's state now, between the events handed over and the next. */
  snapshot(): Uint8Array;
  /** Replace the application's state (a joiner's, before any later event). */
  restore(snapshot: Uint8Array): void;
}

export interface GroupOptions {
  /** restore the state of a member on joining (needs `state`) */
  wantState?: boolean;
  state?: StateProvider;
  /** `"any"`: also receive FIFO messages of senders that are not members */
  acceptFrom?: "members" | "any";
}

export interface PublishOptions {
  order?: "fifo" | "total";
  /** delivered to all members or to none (G5): resolves with `committed` */
  atomic?: boolean;
  /** refused (`stale_view`) if the group's view changed since (G6) */
  sameView?: boolean;
  /** presence, cursors: at most once to the members connected now, never stored */
  ephemeral?: boolean;
  /** the idempotency key (default: a random UUID); a retried id is never delivered twice */
  id?: string;
}

export type { PublishResult } from "./requests.js";

export interface View {
  readonly version: number;
  readonly members: readonly string[];
  /** Each user present, with its instances (presence by user: `ViewEvent.users`). */
  readonly users: ReadonlyMap<string, readonly string[]>;
}

export type GroupStatus = "idle" | "joining" | "joined" | "changing" | "catching-up" | "left" | "removed";

/** What a group needs from its client; the client implements it. */
export interface GroupHost {
  readonly member: string;
  requestJoin(group: Group): Promise<void>;
  requestLeave(group: Group): Promise<void>;
  publish(group: Group, payload: unknown, opts: PublishOptions): Promise<PublishResult>;
  checkpoint(group: Group): Promise<{ offset: number; bytes: number }>;
  pendingOf(group: Group): number;
  resumePointOf(group: Group): ResumePoint | null;
}

interface Waiter {
  queue: GroupEvent[];
  wake: (() => void) | null;
  error: Error | null;
  done: boolean;
}

type Listeners = { [K in GroupEventType]: EventOf<K> } & { status: GroupStatus };

export class Group implements AsyncIterable<GroupEvent> {
  /** The last view installed that has this member, or null before the first. */
  view: View | null = null;
  status: GroupStatus = "idle";
  /** Last seq handed to the application per stream, and the offset at or below which it has
   * been handed every message: together, the position a snapshot taken now has. */
  readonly delivered = new Map<string, number>();
  base = 0;
  /** joined with `wantState`, and the state has not been handed over yet */
  awaitingState = false;
  #refs = 0;
  #joining: Promise<void> | null = null;
  #leaveTimer: ReturnType<typeof setTimeout> | null = null;
  /** settles the promise of the leave `#leaveTimer` would make */
  #leaveDone: (() => void) | null = null;
  readonly #emitter: Emitter<Listeners>;
  readonly #waiters = new Set<Waiter>();

  readonly #host: GroupHost;

  constructor(
    host: GroupHost,
    readonly name: string,
    readonly options: GroupOptions,
    readonly maxQueuedEvents: number,
    onListenerError?: (error: unknown, event: PropertyKey) => void,
  ) {
    if (options.wantState && options.state === undefined) {
      throw new TypeError(`${name}: wantState needs state`);
    }
    this.#host = host;
    this.#emitter = new Emitter<Listeners>(onListenerError);
  }

  /**
   * Join (or count one more user of the joined group). Resolves at the first view with this
   * member (or when its resume is accepted); rejects with `ServerRefused` or `RequestTimeout`.
   */
  join(): Promise<void> {
    this.#refs += 1;
    if (this.#leaveTimer !== null) {
      clearTimeout(this.#leaveTimer); // a StrictMode remount: the leave never happens
      this.#leaveTimer = null;
      this.#leaveDone?.(); // and its promise resolves: nothing is left to wait for
      this.#leaveDone = null;
    }
    if (this.#joining === null || this.status === "left" || this.status === "removed") {
      const joining = this.#host.requestJoin(this);
      this.#joining = joining;
      joining.catch(() => {
        if (this.#joining === joining) this.#joining = null;
        this.#refs = Math.max(0, this.#refs - 1);
      });
    }
    return this.#joining;
  }

  /**
   * Uncount one user; the last one leaves (after the current task, so that a join right after
   * cancels it). Resolves once the group installed a view without this member.
   */
  leave(): Promise<void> {
    if (this.#refs === 0) return Promise.resolve();
    this.#refs -= 1;
    if (this.#refs > 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.#leaveDone = resolve;
      this.#leaveTimer = setTimeout(() => {
        this.#leaveTimer = null;
        this.#leaveDone = null;
        if (this.#refs > 0) {
          resolve();
          return;
        }
        this.#joining = null;
        this.#host.requestLeave(this).then(resolve, reject);
      }, 0);
    });
  }

  /** Send `payload` (any JSON value) to the group; this member receives it too. */
  publish(payload: unknown, opts: PublishOptions = {}): Promise<PublishResult> {
    return this.#host.publish(this, payload, opts);
  }

  /** Store the state (`state.snapshot()`, now) as the group's checkpoint (docs/protocol.md). */
  checkpoint(): Promise<{ offset: number; bytes: number }> {
    return this.#host.checkpoint(this);
  }

  /** This client's member id. */
  get member(): string {
    return this.#host.member;
  }

    /** Publishes waiting to be sent or answered. */
  get pending(): number {
    return this.#host.pendingOf(this);
  }

  /** Where this member's knowledge of the group ends (held-back messages excluded). */
  resumePoint(): ResumePoint | null {
    return this.#host.resumePointOf(this);
  }

  /** Whether the application wants this group's events (it joined and did not leave). */
  get wanted(): boolean {
    return this.#refs > 0;
  }

  on<K extends GroupEventType | "status">(event: K, fn: (value: Listeners[K]) => void): Unsubscribe {
    return this.#emitter.on(event, fn);
  }

  [Symbol.asyncIterator](): AsyncIterator<GroupEvent> {
    const w: Waiter = { queue: [], wake: null, error: null, done: false };
    this.#waiters.add(w);
    const finish = (): IteratorReturnResult<undefined> => {
      this.#waiters.delete(w);
      w.done = true;
      return { done: true, value: undefined };
    };
    return {
      next: async () => {
        for (;;) {
          const ev = w.queue.shift();
          if (ev !== undefined) return { done: false, value: ev };
          if (w.error !== null) {
            const error = w.error;
            finish();
            throw error;
          }
          if (w.done) return finish();
          await new Promise<void>((resolve) => {
            w.wake = resolve;
          });
          w.wake = null;
        }
      },
      return: async () => finish(),
    };
  }

  // -- for the client -------------------------------------------------------------------------

  /** @internal Hand an event to the application. */
  dispatch(ev: GroupEvent): void {
    switch (ev.type) {
      case "message":
        this.delivered.set(ev.stream, ev.seq);
        break;
      case "view":
        if (ev.joined.includes(this.#host.member)) {
          this.delivered.clear(); // (re)joined: its knowledge starts here
          this.base = ev.offset;
        } else {
          this.base = Math.max(this.base, ev.offset);
        }
        this.view = { version: ev.view, members: ev.members, users: ev.users };
        this.setStatus(this.awaitingState ? "joining" : "joined");
        break;
      case "view-changing":
        this.setStatus("changing");
        break;
      case "view-resumed":
        if (this.status !== "catching-up") this.setStatus("joined");
        break;
      case "caught-up":
        this.base = Math.max(this.base, ev.offset);
        this.setStatus("joined");
        break;
      case "state-received":
        if (ev.snapshot !== null && this.options.state !== undefined) this.options.state.restore(ev.snapshot);
        for (const [stream, seq] of Object.entries(ev.streams)) {
          this.delivered.set(stream, Math.max(seq, this.delivered.get(stream) ?? 0));
        }
        this.awaitingState = false;
        this.setStatus("joined");
        break;
      case "reset":
        this.delivered.clear();
        break;
      case "removed":
        this.setStatus(this.#refs > 0 ? "removed" : "left");
        this.#refs = 0;
        this.#joining = null;
        break;
      default:
        break;
    }
    // After the application left, its handlers hear nothing more but the end.
    if (!this.wanted && ev.type !== "removed") return;
    this.#emitter.emit(ev.type, ev as never);
    for (const w of this.#waiters) {
      if (w.done || w.error !== null) continue;
      if (w.queue.length >= this.maxQueuedEvents) {
        w.error = new Error(`${this.name}: iterator fell behind`);
      } else {
        w.queue.push(ev);
      }
      if (ev.type === "removed") w.done = true;
      w.wake?.();
    }
  }

  /** @internal */
  setStatus(status: GroupStatus): void {
    if (status === this.status) return;
    this.status = status;
    this.#emitter.emit("status", status);
  }

  /** @internal The client closed: iterators end (with `error`, if it failed). */
  end(error: Error | null): void {
    for (const w of this.#waiters) {
      if (error !== null) w.error = error;
      else w.done = true;
      w.wake?.();
    }
  }
}
