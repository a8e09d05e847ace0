/** Errors the SDK's promises reject with. Each has a `code` to switch on. */

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
