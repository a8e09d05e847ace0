/**
 * @notify/client: the browser (and Node) SDK of notify. See docs/web.md.
 *
 *     import { createClient } from "@notify/client";
 *     const client = createClient("wss://notify.example", { getToken });
 *     const doc = client.group("doc-1");
 *     doc.on("message", (m) => apply(m.payload));
 *     await doc.join();
 */

export { createClient, Client, serverUrls, checkPayload } from "./client.js";
export type {
  ClientOptions,
  ConnectionState,
  ReplacedEvent,
  StateChange,
  WebSocketConstructor,
  WebSocketLike,
} from "./client.js";
export { Group } from "./group.js";
export type { GroupOptions, GroupStatus, PublishOptions, PublishResult, StateProvider, View } from "./group.js";
export type {
  CaughtUpEvent,
  EphemeralEvent,
  EventOf,
  GroupEvent,
  GroupEventType,
  Message,
  RemovedEvent,
  ResetEvent,
  StateReceivedEvent,
  ViewChangingEvent,
  ViewEvent,
  ViewResumedEvent,
} from "./events.js";
export {
  ClientClosed,
  GroupLeftError,
  NotifyError,
  PublishQueueFull,
  PublishRejected,
  Replaced,
  RequestTimeout,
  ServerRefused,
} from "./errors.js";
export { userOf, usersOf } from "./presence.js";
export { Backoff } from "./backoff.js";
export type { BackoffOptions } from "./backoff.js";
export type { HeartbeatOptions } from "./heartbeat.js";
export type { ResumePoint } from "./protocol.js";
export type { StorageLike } from "./storage.js";
export type { Unsubscribe } from "./emitter.js";
