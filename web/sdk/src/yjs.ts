/**
 * A Yjs binding on a notify group: the group is the document's network, with no sync handshake.
 *
 *     import { yjsBinding } from "@notify/client/yjs";
 *     const doc = new Y.Doc();
 *     const y = yjsBinding(doc);
 *     const group = client.group("doc-1", { wantState: true, state: y.state });
 *     y.attach(group, { member: client.member });
 *     await group.join();
 *     y.awareness.setLocal({ name: "ana", field: "title", cursor: 3 });
 *
 * Theory of operation. y-websocket opens with SyncStep1/SyncStep2 because its server relays and
 * forgets; notify delivers every message of a sender once, in order, across drops (G1, G7, G8)
 * and hands a joiner the state of a member (G9). So: a joiner's state is
 * `Y.encodeStateAsUpdate(doc)` of a member (state transfer, and the reload snapshot), and every
 * local update after it is a FIFO message `{y: base64(update)}`. Updates are commutative and
 * idempotent, so neither total order nor atomic is needed, and sending one again (a publish
 * that timed out, then resent with a new id) is harmless.
 *
 * Local updates are merged (`Y.mergeUpdates`) for one tick; while many publishes of the group
 * are still waiting (offline, a view change) they keep being merged instead of queued, so an
 * hour offline costs one message, not thousands. Awareness (cursors, who is typing) is ephemeral:
 * at most once to the members connected now, repeated every `awarenessRefreshMs`, forgotten
 * after `awarenessTimeoutMs` of silence or when its member leaves the view.
 *
 * Payloads of other shapes are not the binding's: the application may share the group.
 */

import * as Y from "yjs";
import { fromBase64, toBase64 } from "./base64.js";
import { Emitter, type Unsubscribe } from "./emitter.js";
import { NotifyError } from "./errors.js";
import type { Group, StateProvider } from "./group.js";

export interface YjsBindingOptions {
  /** Merge local updates while the group has this many publishes waiting. Default 4. */
  highWater?: number;
  /** How long to wait before publishing merged updates (ms). Default 0 (the next tick). */
  delayMs?: number;
  /** An awareness entry not refreshed for this long is dropped. Default 30 s. */
  awarenessTimeoutMs?: number;
  /** The local awareness state is published again this often. Default 10 s. */
  awarenessRefreshMs?: number;
  /** Where publish failures the binding cannot mend go (default `console.error`). */
  onError?: (error: unknown) => void;
}

export interface AttachOptions {
  /** This client's member id (`client.member`): its own updates, echoed back, are skipped. */
  member?: string;
}

/** Awareness of one member: what it last said, and when (local `Date.now()`). */
export interface AwarenessEntry {
  readonly state: Readonly<Record<string, unknown>>;
  readonly at: number;
}

export interface AwarenessChange {
  readonly added: readonly string[];
  readonly updated: readonly string[];
  readonly removed: readonly string[];
}

/** Cursors and "who is typing": a plain map member → state, never stored. */
export class Awareness {
  /** Other members' states (this member's own is `local`). */
  readonly states = new Map<string, AwarenessEntry>();
  local: Readonly<Record<string, unknown>> | null = null;
  private readonly emitter = new Emitter<{ change: AwarenessChange }>();
  /** set by the binding: publish the local state now */
  announce: () => void = () => undefined;

  /** Set (or clear, with null) this member's state and tell the others at once. */
  setLocal(state: Readonly<Record<string, unknown>> | null): void {
    this.local = state;
    this.announce();
  }

  on(event: "change", fn: (change: AwarenessChange) => void): Unsubscribe {
    return this.emitter.on(event, fn);
  }

  /** @internal */
  put(member: string, state: Readonly<Record<string, unknown>> | null, now: number): void {
    const had = this.states.has(member);
    if (state === null) {
      if (had) this.drop([member]);
      return;
    }
    this.states.set(member, { state, at: now });
    this.emitter.emit("change", { added: had ? [] : [member], updated: had ? [member] : [], removed: [] });
  }

  /** @internal */
  drop(members: readonly string[]): void {
    const removed = members.filter((m) => this.states.delete(m));
    if (removed.length) this.emitter.emit("change", { added: [], updated: [], removed });
  }
}

export interface YjsBinding {
  /** Give it to `client.group(name, { wantState: true, state })`. */
  readonly state: StateProvider;
  readonly awareness: Awareness;
  /** Start syncing `doc` over `group`; returns the function that stops it. */
  attach(group: Group, opts?: AttachOptions): Unsubscribe;
  /** Local updates not published yet (merged into one). */
  readonly buffered: number;
}

/** Bind `doc` to a notify group: see the module's comment. */
export function yjsBinding(doc: Y.Doc, opts: YjsBindingOptions = {}): YjsBinding {
  const highWater = opts.highWater ?? 4;
  const delayMs = opts.delayMs ?? 0;
  const timeoutMs = opts.awarenessTimeoutMs ?? 30_000;
  const refreshMs = opts.awarenessRefreshMs ?? 10_000;
  const report = opts.onError ?? ((e: unknown) => console.error("notify/yjs:", e));
  const awareness = new Awareness();
  const origin = {}; // the origin of the updates the binding applies: never sent back
  let buffer: Uint8Array[] = [];

  const state: StateProvider = {
    snapshot: () => Y.encodeStateAsUpdate(doc),
    // A CRDT merges rather than replaces: local edits not yet published survive the restore.
    restore: (bytes) => {
      if (bytes.length) Y.applyUpdate(doc, bytes, origin);
    },
  };

  function attach(group: Group, a: AttachOptions = {}): Unsubscribe {
    let timer: ReturnType<typeof setTimeout> | null = null;
    let detached = false;

    const schedule = (ms: number): void => {
      if (timer === null && !detached) timer = setTimeout(flush, ms);
    };

    const send = (update: Uint8Array): void => {
      group.publish({ y: toBase64(update) }).catch((e: unknown) => {
        if (detached || !group.wanted) return; // left: a rejoin gets the state anew
        if (e instanceof NotifyError && e.code === "too_large") {
          report(e); // an update larger than a frame: nothing to merge it with will help
          return;
        }
        buffer.push(update); // a timeout or a full queue: send it again (idempotent)
        schedule(1000);
      });
    };

    function flush(): void {
      timer = null;
      if (detached || !buffer.length) return;
      if (!group.wanted || group.pending >= highWater) {
        schedule(100); // keep merging while the group cannot take more
        return;
      }
      const updates = buffer;
      buffer = [];
      const merged = updates.length === 1 ? updates[0]! : Y.mergeUpdates(updates);
      send(merged);
    }

    const onUpdate = (update: Uint8Array, from: unknown): void => {
      if (from === origin) return;
      buffer.push(update);
      schedule(delayMs);
    };

    const announce = (): void => {
      if (detached || !group.wanted) return;
      group.publish({ aw: awareness.local }, { ephemeral: true }).catch(() => undefined);
    };
    awareness.announce = announce;

    doc.on("update", onUpdate);
    const offs: Unsubscribe[] = [
      () => doc.off("update", onUpdate),
      group.on("message", (m) => {
        const p = m.payload as { y?: unknown } | null;
        if (p === null || typeof p !== "object" || typeof p.y !== "string") return;
        if (a.member !== undefined && m.sender === a.member && !m.replayed) return; // our own echo
        try {
          Y.applyUpdate(doc, fromBase64(p.y), origin);
        } catch (e) {
          report(e);
        }
      }),
      group.on("ephemeral", (ev) => {
        const p = ev.payload as { aw?: unknown } | null;
        if (p === null || typeof p !== "object" || !("aw" in p)) return;
        const aw = p.aw;
        awareness.put(ev.sender, aw !== null && typeof aw === "object" ? (aw as Record<string, unknown>) : null, Date.now());
      }),
      group.on("view", (v) => {
        awareness.drop([...awareness.states.keys()].filter((m) => !v.members.includes(m)));
        if (awareness.local !== null && v.joined.some((m) => m !== a.member)) announce(); // newcomers
      }),
      group.on("reset", () => {
        // The log was reset: what the others had from us may be gone with it; send it all again.
        buffer.push(Y.encodeStateAsUpdate(doc));
        schedule(0);
      }),
    ];
    const tick = setInterval(() => {
      const now = Date.now();
      awareness.drop([...awareness.states].filter(([, e]) => now - e.at > timeoutMs).map(([m]) => m));
      if (awareness.local !== null) announce();
    }, Math.min(refreshMs, timeoutMs / 3));
    if (buffer.length) schedule(delayMs);

    return () => {
      if (detached) return;
      detached = true;
      if (timer !== null) clearTimeout(timer);
      clearInterval(tick);
      for (const off of offs) off();
      awareness.announce = () => undefined;
    };
  }

  return {
    state,
    awareness,
    attach,
    get buffered() {
      return buffer.length;
    },
  };
}
