/** Errors the SDK's promises reject with. Each has a `code` to switch on. */

import type { Reply } from "./events.js";
import type { ProtocolEvent } from "./protocol.js";

export class NotifyError extends Error {
  constructor(
    message: string,
    readonly code: string = "notify_error",
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** The server refused a request (`code` is the server's error code, docs/protocol.md). */
export class ServerRefused extends NotifyError {}

/** The server refused a publish (`code`: `stale_view`, `forbidden`, `bad_payload`...): delivered to no one. */
export class PublishRejected extends NotifyError {}

/** `maxPendingPublishes` publishes already wait: slow down (nothing was queued). */
export class PublishQueueFull extends NotifyError {
  constructor(message: string) {
    super(message, "queue_full");
  }
}

/** No answer within `requestTimeoutMs` (for a publish: it will not be sent again). */
export class RequestTimeout extends NotifyError {
  constructor(message: string) {
    super(message, "timeout");
  }
}

/** The group was left, or this member was removed from it. */
export class GroupLeftError extends NotifyError {
  constructor(message: string, code = "left") {
    super(message, code);
  }
}

/** The client is closed: by `close()`, or for good (`code` says why). */
export class ClientClosed extends NotifyError {}

/**
 * Another connection claimed this client's instance and the server kept the newer one (close
 * 4002): the application gave two clients one `instance`, or a saved session was copied. The
 * client is closed rather than reconnecting into the same clash; `old` is the member id it had.
 * (A client whose instance the SDK picked takes a new one instead: the `replaced` event.)
 */
export class Replaced extends ClientClosed {
  constructor(readonly old: string) {
    super(`instance ${old} was claimed by a newer connection (4002)`, "replaced");
  }
}

/**
 * (Inside the SDK, never seen by the application.) The server sent something the protocol does
 * not allow, or a frame that does not parse: `events` and `replies` are what the frames before
 * it produced (the protocol state already counts them: hand them over). The client reconnects.
 */
export class ProtocolViolation extends Error {
  events: ProtocolEvent[] = [];
  replies: Reply[] = [];
  constructor(message: string) {
    super(message);
    this.name = "ProtocolViolation";
  }
}

/** A gap's history refused again and again: the host reconnects and resumes from its frontier. */
export class GapUnreadable extends ProtocolViolation {}
