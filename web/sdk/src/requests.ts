/**
 * The client's requests, sans I/O: which request waits for which answer, and what a refusal
 * means. The same tables and rules as the Python SDK's `client_sdk/requests.py`. `ClientProtocol`
 * owns one `Requests` (`protocol.requests`); the I/O layer (`client.ts`) keeps only its promises
 * and deadlines, keyed as the protocol's answers are (`Answer.kind`, `Answer.key`).
 *
 * - A request the application waits for is *opened* through the protocol (`openJoin`,
 *   `openLeave`, `openPublish`, `openCheckpoint`, `openRefresh`). The protocol matches the
 *   server's replies, and the installs that answer joins and leaves, to them and queues one
 *   `Answer` per request that is over; the host drains them with `answers()` after every call.
 * - Publishes wait in `publishes` (by idempotency id) until answered: unsent while the link is
 *   down or the group flushes; `rejected{view_changing}` or a lost connection makes one unsent
 *   again, and it is sent again, same id, as soon as its group can send (never delivered twice).
 * - The refusal policy of a join the application holds: "not now" (`RETRIED_JOIN_REFUSALS`) →
 *   the same join again after a backoff delay (`retry-join`, a timer for the host), at most
 *   `JOIN_RETRIES` times; a refused resume point → join afresh (`joined-afresh`); a join without
 *   one → the waiting `join()` fails with `ServerRefused`, or a joined group is over (`removed`).
 * - A join the application gave up on (its deadline passed) is *abandoned*: if the server
 *   installs it after all, the protocol leaves at once.
 * - Every table is emptied by what answers it, by `forget*` (the host's deadline) or `close()`.
 */

import type { NotifyError } from "./errors.js";
import type { Reply, ViewEvent, ViewResumedEvent } from "./events.js";

/** Refusals of a join that say "not now": the same join again after a backoff delay... */
export const RETRIED_JOIN_REFUSALS = new Set(["join_pending", "unavailable"]);
/** ... at most this many times in a row (an install, or a reconnect, starts the count again). */
export const JOIN_RETRIES = 10;
/** A publish refused with one of these is sent again (same id) once its group can send. */
export const RESENT_PUBLISH_REFUSALS = new Set(["view_changing"]);
/** `error` codes without `req` that answer a `refresh` (the oldest waiting). */
export const REFRESH_REFUSALS = new Set(["token_invalid", "token_expired", "member_mismatch"]);
/** Refusals of a leave that mean "already out" (removed while away): the leave is done. */
export const LEFT_LEAVE_REFUSALS = new Set(["not_member", "no_group"]);

export interface PublishResult {
  id: string;
  /** the message's log offset (0 for an ephemeral publish) */
  offset: number;
  /** atomic publishes: delivered everywhere (true) or nowhere (false) */
  committed?: boolean;
  reason?: string | null;
  /** an ephemeral publish that was not sent (not connected, or a view change under way) */
  dropped?: boolean;
}

export type RequestKind = "join" | "leave" | "publish" | "checkpoint" | "refresh";

/** What each kind of request comes to. */
export interface AnswerValue {
  /** the first install with this member, or the resume of its session (a reload) */
  join: ViewEvent | ViewResumedEvent;
  leave: null;
  publish: PublishResult;
  checkpoint: { offset: number; bytes: number };
  refresh: null;
}

/** A request is over: `value` is its result, unless `error` says why it failed. */
export type Answer = {
  [K in RequestKind]: {
    readonly type: "answer";
    readonly kind: K;
    /** the group (join, leave), the publish id, the checkpoint's req, the refresh's key */
    readonly key: string;
    readonly value: AnswerValue[K] | null;
    readonly error: NotifyError | null;
  };
}[RequestKind];

/** For the host: after the backoff delay of `attempt`, call `retryJoin(group, req)`. */
export interface RetryJoin {
  readonly type: "retry-join";
  readonly group: string;
  readonly req: string;
  readonly attempt: number;
}

/** The server refused the resume point of `group` (`code`): the protocol joined it afresh. */
export interface JoinedAfresh {
  readonly type: "joined-afresh";
  readonly group: string;
  readonly code: string;
  readonly message: string;
  readonly wantState: boolean;
}

/** An `error` frame that answered no request opened through the protocol. */
export interface StrayError {
  readonly type: "stray-error";
  readonly error: Extract<Reply, { type: "error" }>;
}

export type RequestOutput = Answer | RetryJoin | JoinedAfresh | StrayError;

/** The `publish` frame (DESIGN §3). */
export interface PublishFrame {
  [key: string]: unknown;
  type: "publish";
  req: string;
  group: string;
  id: string;
  view: number;
  order: string;
  atomic: boolean;
  same_view: boolean;
  payload: unknown;
}

/** A publish waiting to be sent or answered; an atomic one is answered twice (`published`, then
 * `outcome`): `offset` keeps the first answer's. */
export interface PendingPublish {
  readonly group: string;
  readonly frame: PublishFrame;
  readonly atomic: boolean;
  sent: boolean;
  offset: number;
}

/** The tables of the requests under way. `ClientProtocol` changes them; a host only reads them. */
export class Requests {
  /** publishes by idempotency id, in the order they were opened */
  readonly publishes = new Map<string, PendingPublish>();
  /** some publish may not be sent yet (false: none is) */
  unsent = false;
  /** the groups the application holds: name → it has a state provider (a join afresh then asks
   * for state). The refusal policy applies to these. */
  readonly held = new Map<string, boolean>();
  /** groups whose `openJoin` waits for the first install that has this member */
  readonly joins = new Set<string>();
  /** leaves waiting for the install without this member: group → req */
  readonly leaves = new Map<string, string>();
  /** checkpoint uploads waiting for `checkpoint_stored`, by req */
  readonly checkpoints = new Set<string>();
  /** refreshes waiting for `refreshed`, oldest first (the frame has no req) */
  refreshes: string[] = [];
  /** joins given up on: left as soon as the server installs them */
  readonly abandoned = new Set<string>();
  /** "not now" refusals in a row, per group */
  readonly joinRetries = new Map<string, number>();
  /** a host opened requests (and drains `answers()`): only then are stray errors queued */
  inUse = false;
  out: RequestOutput[] = [];
  #reqs = 0;

  /** A request id of this client: `prefix` and a number counted over every id it makes. */
  newReq(prefix = "r"): string {
    return `${prefix}${++this.#reqs}`;
  }

  /** How many requests of each kind wait for an answer (for tests and metrics). */
  waiting(): Record<RequestKind, number> {
    return {
      join: this.joins.size,
      leave: this.leaves.size,
      publish: this.publishes.size,
      checkpoint: this.checkpoints.size,
      refresh: this.refreshes.length,
    };
  }

  answer<K extends RequestKind>(kind: K, key: string, value: AnswerValue[K] | null, error: NotifyError | null = null): void {
    this.out.push({ type: "answer", kind, key, value, error } as Answer);
  }

  /** Fail the publishes of `group` not sent yet (`sentToo`: all of them). */
  failPublishes(group: string, error: NotifyError, o: { sentToo?: boolean; sameViewOnly?: boolean } = {}): void {
    for (const [id, p] of this.publishes) {
      if (p.group !== group || (p.sent && !o.sentToo) || (o.sameViewOnly && !p.frame.same_view)) continue;
      this.publishes.delete(id);
      this.answer("publish", id, null, error);
    }
  }

  /** Forget every request (the host fails its waiters itself). */
  close(): void {
    this.publishes.clear();
    this.unsent = false;
    this.joins.clear();
    this.leaves.clear();
    this.checkpoints.clear();
    this.refreshes = [];
    this.out = [];
  }
}
