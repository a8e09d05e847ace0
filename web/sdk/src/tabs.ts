/**
 * Duplicated tabs. A browser's "duplicate tab" (and `window.open` in Chromium) copies the tab's
 * `sessionStorage`, so the copy would start as the same instance, with the same session: it
 * would take the original's place (close 4002) as soon as it connects. Before connecting as a
 * saved instance a client therefore asks the other tabs of its origin, over a BroadcastChannel
 * named after its storage key, whether one of them holds that instance; a live client answers
 * for its own. An answer within the deadline means the instance is taken: pick another.
 *
 * Where there is no BroadcastChannel nobody asks (the server's clash rule still holds: the SDK
 * takes a new instance after a 4002). A tab that is asking answers too, so two copies started
 * at once both move away rather than clash.
 */

export interface TabGuard {
  /** Whether another live tab holds `instance`: asks, and waits at most `ms` for the answer. */
  held(instance: string, ms: number): Promise<boolean>;
  close(): void;
}

/** The guard on channel `name`; `mine()` is the instance this client holds (null: none). */
export function tabGuard(name: string, mine: () => string | null): TabGuard | null {
  const BC = (globalThis as { BroadcastChannel?: typeof BroadcastChannel }).BroadcastChannel;
  if (BC === undefined) return null;
  let ch: BroadcastChannel;
  try {
    ch = new BC(name);
  } catch {
    return null;
  }
  (ch as { unref?: () => void }).unref?.(); // Node: an idle channel must not keep the process up
  let heard: ((instance: unknown) => void) | null = null;
  ch.onmessage = (e: MessageEvent) => {
    const d = e.data as { q?: unknown; h?: unknown } | null;
    if (d?.q !== undefined && d.q === mine()) ch.postMessage({ h: d.q });
    else if (d?.h !== undefined) heard?.(d.h);
  };
  return {
    held: (instance, ms) =>
      new Promise((resolve) => {
        const done = (v: boolean): void => {
          clearTimeout(timer);
          heard = null;
          resolve(v);
        };
        const timer = setTimeout(() => done(false), ms);
        heard = (i) => i === instance && done(true);
        ch.postMessage({ q: instance });
      }),
    close: () => ch.close(),
  };
}
