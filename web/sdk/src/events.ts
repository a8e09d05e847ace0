/**
 * What a group hands the application. Every event is a plain object with a `type`, so one
 * `switch` handles them all (`for await (const ev of group)`), and `group.on(type, fn)` gets
 * exactly the events of that type.
 */

/** A message of the group, handed over in its stream's order, once (G1–G5, G7, G8). */
export interface Message {
  readonly type: "message";
  readonly group: string;
  /** Position in the group log (one counter per group, from 1). */
  readonly offset: number;
  /** `fifo:<sender>`, `total`, or `ext:<sender>` (a non-member's FIFO messages). */
  readonly stream: string;
  /** Increases by one within `stream`, except over an aborted atomic message (G5), whose seq is
   * never handed over: any other gap would be visible. */
  readonly seq: number;
  readonly sender: string;
  /** The view the sender stamped it with. */
  readonly view: number;
  /** Atomic messages are handed over only once committed everywhere (G5). */
  readonly atomic: boolean;
  readonly payload: unknown;
  /** The server's accept time, Unix seconds. */
  readonly ts: number;
  /** It arrived in a replay (a resume or a catch-up), not live. */
  readonly replayed: boolean;
}

/**
 * A new view installed: `members` (instances, `user#instance`) in seniority order. `users`,
 * `usersJoined` and `usersLeft` say the same by user (presence.ts): a user joins with its first
 * instance and leaves with its last, so a second tab of a user is no arrival.
 */
export interface ViewEvent {
  readonly type: "view";
  readonly group: string;
  readonly view: number;
  readonly members: readonly string[];
  readonly joined: readonly string[];
  readonly left: readonly string[];
  /** The log head at the install. */
  readonly offset: number;
  /**
   * The members that moved together from the view before into this one (in view order): those
   * of `members` not in `joined`, i.e. the previous view less `left`. They installed this view
   * from the previous one, so they delivered exactly the same previous-view messages (G2):
   * extended virtual synchrony's transitional configuration (docs/semantics.md). A member that
   * left and joined again in the same change (a new incarnation, a rejoin without a resume
   * point) is in `joined` and `left`, and is not in it; a joiner finds itself outside it.
   */
  readonly transitional: readonly string[];
  /** Each user present, with its instances in the view (in view order). */
  readonly users: ReadonlyMap<string, readonly string[]>;
  /** Users with no instance in the view before and one in this one (sorted). */
  readonly usersJoined: readonly string[];
  /** Users with an instance in the view before and none in this one (sorted). */
  readonly usersLeft: readonly string[];
}

/**
 * A view change is under way: publishes wait (the SDK queues them) until it installs. `members`
 * is the proposed view; it may come again for the same `proposed` when the proposal changes (a
 * member failed or came back during the flush).
 */
export interface ViewChangingEvent {
  readonly type: "view-changing";
  readonly group: string;
  readonly proposed: number;
  readonly members: readonly string[];
  readonly joining: readonly string[];
  readonly leaving: readonly string[];
  readonly reason: string;
  /**
   * The members expected to move together into the proposed view (in view order): the current
   * view less `leaving`, as far as this proposal says; the flush set, which every receiver of
   * this event is in. A later `view-changing` for the same view may shrink it; the `view` event
   * says who did move together.
   */
  readonly transitional: readonly string[];
}

/** The proposed change was cancelled, or this member's resume was accepted: `view` goes on. */
export interface ViewResumedEvent {
  readonly type: "view-resumed";
  readonly group: string;
  readonly view: number;
}

/**
 * The replay of a resume or a rejoin is complete up to `offset`: `count` messages were handed
 * over in it, those read from the log (after a `catchup_log`) included.
 */
export interface CaughtUpEvent {
  readonly type: "caught-up";
  readonly group: string;
  readonly offset: number;
  readonly count: number;
}

/**
 * A joiner's state arrived and was restored (`snapshot`), or could not be had (`reason`:
 * `state_unavailable`, `state_too_large`, `bad_transfer: ...`): every later event follows it.
 */
export interface StateReceivedEvent {
  readonly type: "state-received";
  readonly group: string;
  readonly offset: number;
  readonly snapshot: Uint8Array | null;
  readonly reason: string | null;
  /** Per stream, the last `seq` the snapshot includes (later messages follow this event). */
  readonly streams: Readonly<Record<string, number>>;
}

/**
 * This member is no longer in the group: it left (`reason` null), or the group removed it while
 * the application still wanted it (`reason`: why the install removed it — `removed` by the
 * application's backend through the server API, `flush_timeout`, `ack_timeout`... — or the code
 * that refused its rejoin). The SDK does not join again by itself; the application decides
 * whether to `join()` again.
 */
export interface RemovedEvent {
  readonly type: "removed";
  readonly group: string;
  readonly view: number;
  readonly reason: string | null;
}

/**
 * The server could not serve this member's resume point (its log was reset, or retention
 * dropped what was missed): the group was joined afresh, and what the application derived
 * from earlier events must be rebuilt. The next event is the new view.
 */
export interface ResetEvent {
  readonly type: "reset";
  readonly group: string;
  readonly reason: string;
  readonly oldEpoch: number;
  readonly oldOffset: number;
  readonly newEpoch: number;
  readonly newOffset: number;
  /** how many messages the log's retention dropped after `oldOffset` (null: not said) */
  readonly lost: number | null;
}

/** An ephemeral publish (presence, cursors) of another member: at most once, never replayed. */
export interface EphemeralEvent {
  readonly type: "ephemeral";
  readonly group: string;
  readonly sender: string;
  readonly view: number;
  readonly payload: unknown;
  readonly ts: number;
}

export type GroupEvent =
  | Message
  | ViewEvent
  | ViewChangingEvent
  | ViewResumedEvent
  | CaughtUpEvent
  | StateReceivedEvent
  | RemovedEvent
  | ResetEvent
  | EphemeralEvent;

export type GroupEventType = GroupEvent["type"];

/** The event of type `T`. */
export type EventOf<T extends GroupEventType> = Extract<GroupEvent, { type: T }>;

/** Replies to this client's requests, matched by the client, never seen by the app as such. */
export type Reply =
  | { readonly type: "published"; readonly req: string | number; readonly id: string; readonly offset: number }
  | { readonly type: "rejected"; readonly req: string | number; readonly id: string; readonly code: string }
  | {
      readonly type: "outcome";
      readonly id: string;
      readonly group: string;
      readonly offset: number;
      readonly committed: boolean;
      readonly reason?: string | null;
    }
  | { readonly type: "refreshed"; readonly expires: number | null }
  | {
      readonly type: "checkpoint_stored";
      readonly req: string | number;
      readonly group: string;
      readonly offset: number;
      readonly bytes: number;
    }
  | {
      readonly type: "error";
      readonly code: string;
      readonly message: string;
      readonly req: string | number | null;
      /** `offset_unavailable` past retention: how many messages it dropped */
      readonly lost: number | null;
    }
  | { readonly type: "pong"; readonly req?: string | number | null };

/** A donor's duty: snapshot now and send it (handled inside the SDK, never seen by the app). */
export interface StateRequest {
  readonly type: "state-request";
  readonly group: string;
  readonly transfer: string;
  readonly joiner: string;
  readonly offset: number;
}
