/**
 * Listeners for named events. `on` returns the function that removes the listener, so a React
 * effect's cleanup is one line and StrictMode's double mount leaves one listener, not two.
 *
 * A listener that throws is reported (`onListenerError`, `console.error` by default) and does
 * not reach the SDK: one buggy handler must not stop the others or the connection. Emitting
 * walks a copy of the list, so a handler may add or remove listeners (its own included) while
 * it runs.
 */

export type Unsubscribe = () => void;

export class Emitter<Events extends { [K in keyof Events]: unknown }> {
  readonly #listeners = new Map<keyof Events, Set<(value: never) => void>>();

  readonly #onListenerError: (error: unknown, event: PropertyKey) => void;

  constructor(onListenerError: (error: unknown, event: PropertyKey) => void = defaultReport) {
    this.#onListenerError = onListenerError;
  }

  on<K extends keyof Events>(event: K, fn: (value: Events[K]) => void): Unsubscribe {
    let set = this.#listeners.get(event);
    if (set === undefined) {
      set = new Set();
      this.#listeners.set(event, set);
    }
    const entry = fn as (value: never) => void;
    // A function registered twice is called twice: wrap it so each `on` is its own entry.
    const wrapped = (v: never): void => entry(v);
    set.add(wrapped);
    return () => {
      set.delete(wrapped);
    };
  }

  emit<K extends keyof Events>(event: K, value: Events[K]): void {
    const set = this.#listeners.get(event);
    if (set === undefined || set.size === 0) return;
    for (const fn of [...set]) {
      if (!set.has(fn)) continue; // removed by an earlier listener of this same emit
      try {
        (fn as (v: Events[K]) => void)(value);
      } catch (e) {
        this.#onListenerError(e, event);
      }
    }
  }

  count(event: keyof Events): number {
    return this.#listeners.get(event)?.size ?? 0;
  }

  clear(): void {
    this.#listeners.clear();
  }
}

function defaultReport(error: unknown, event: PropertyKey): void {
  console.error(`notify: a "${String(event)}" listener threw`, error);
}
