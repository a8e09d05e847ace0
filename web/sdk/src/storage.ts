/**
 * What survives a page reload: the user and instance, the session to resume, and per group the resume
 * point with, for groups that keep a state (`state: {snapshot, restore}`), the snapshot taken at
 * exactly that point. A reloaded page restores the snapshot and joins from the point: the
 * server sends only what was missed (G7 if the session is still alive, else G8), never what the
 * snapshot already holds.
 *
 * `sessionStorage` by default: it lives as long as the tab, survives reloads and the
 * back/forward cache, and is not shared with other tabs (each tab is its own instance; a
 * duplicated tab gets a copy, which tabs.ts detects).
 */

import type { ResumePoint } from "./protocol.js";

/** The part of the Web Storage API the SDK uses (`sessionStorage`, `localStorage`, a Map wrapper). */
export interface StorageLike {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

export interface SavedGroup {
  point: ResumePoint;
  /** base64 of the application's snapshot at `point` */
  snapshot?: string;
}

export interface SavedSession {
  /** the user */
  member: string;
  /** the instance the session is of (absent: saved before instances, none) */
  instance?: string | null;
  session: string | null;
  /** wall-clock ms when saved */
  at: number;
  groups: Record<string, SavedGroup>;
}

export class SessionStore {
  readonly #storage: StorageLike | null;
  readonly #key: string;

  constructor(storage: StorageLike | null, key: string) {
    this.#storage = storage;
    this.#key = key;
  }

  load(): SavedSession | null {
    if (this.#storage === null) return null;
    try {
      const text = this.#storage.getItem(this.#key);
      if (text === null) return null;
      const saved = JSON.parse(text) as SavedSession;
      if (typeof saved.member !== "string" || typeof saved.groups !== "object" || saved.groups === null) return null;
      return saved;
    } catch {
      return null; // unreadable: start afresh rather than fail
    }
  }

  save(session: SavedSession): boolean {
    if (this.#storage === null) return false;
    try {
      this.#storage.setItem(this.#key, JSON.stringify(session));
      return true;
    } catch {
      // Over quota (a large snapshot): keep the session and points, drop the snapshots.
      try {
        const lean: SavedSession = { ...session, groups: {} };
        for (const [name, g] of Object.entries(session.groups)) if (g.snapshot === undefined) lean.groups[name] = g;
        this.#storage.setItem(this.#key, JSON.stringify(lean));
      } catch {
        /* storage unusable: a reload joins afresh */
      }
      return false;
    }
  }

  clear(): void {
    try {
      this.#storage?.removeItem(this.#key);
    } catch {
      /* nothing to clear */
    }
  }
}

/** The storage to use when the application says nothing: `sessionStorage` where there is one. */
export function defaultStorage(): StorageLike | null {
  try {
    const s = (globalThis as { sessionStorage?: StorageLike }).sessionStorage;
    return s ?? null;
  } catch {
    return null; // e.g. a sandboxed iframe throws on access
  }
}
