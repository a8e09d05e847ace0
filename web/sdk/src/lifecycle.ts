/**
 * The page lifecycle, wired to the client (research/browser-sdk.md §2: what browsers break):
 * - `offline`: the link is probably gone (iOS Safari may never fire `close`): probe it now;
 * - `online`, and the page becoming visible: if reconnecting, try now instead of waiting out
 *   the backoff; if connected, probe (a phone may have slept with the socket half-open);
 * - `pagehide` and `freeze`: save the session and resume points (a reload or a discarded tab
 *   comes back from them); a page going into the back/forward cache (`persisted`) closes its
 *   socket, since an open WebSocket keeps a page out of the cache and nobody would read it;
 * - `pageshow` from the cache (`persisted`) and `resume`: reconnect and resume.
 * Outside a browser (Node) there is nothing to wire and nothing happens.
 */

export interface LifecycleHooks {
  /** the network or the page came back: reconnect now, or probe the link */
  wake(reason: string): void;
  /** the network went away: probe the link */
  suspect(reason: string): void;
  /** the page may be going away: persist what a reload needs */
  save(): void;
  /** the page entered the back/forward cache (or was frozen): drop the link */
  sleep(reason: string): void;
}

/** Whether the page is hidden (false outside a browser). */
export function pageHidden(): boolean {
  const doc = (globalThis as { document?: { visibilityState?: string } }).document;
  return doc?.visibilityState === "hidden";
}

/** Listen; returns the function that stops listening. */
export function watchLifecycle(hooks: LifecycleHooks): () => void {
  const win = (globalThis as { window?: EventTarget }).window;
  const doc = (globalThis as { document?: EventTarget & { visibilityState?: string } }).document;
  if (win === undefined || doc === undefined || typeof win.addEventListener !== "function") return () => undefined;
  const on: Array<[EventTarget, string, EventListener]> = [
    [win, "online", () => hooks.wake("online")],
    [win, "offline", () => hooks.suspect("offline")],
    [
      doc,
      "visibilitychange",
      () => {
        if (doc.visibilityState === "visible") hooks.wake("visible");
        else hooks.save();
      },
    ],
    [
      win,
      "pagehide",
      (e) => {
        hooks.save();
        if ((e as PageTransitionEvent).persisted) hooks.sleep("pagehide");
      },
    ],
    [
      win,
      "pageshow",
      (e) => {
        if ((e as PageTransitionEvent).persisted) hooks.wake("pageshow");
      },
    ],
    [
      doc,
      "freeze",
      () => {
        hooks.save();
        hooks.sleep("freeze");
      },
    ],
    [doc, "resume", () => hooks.wake("resume")],
  ];
  for (const [target, type, fn] of on) target.addEventListener(type, fn);
  return () => {
    for (const [target, type, fn] of on) target.removeEventListener(type, fn);
  };
}
