/**
 * Reconnect delays: exponential with full jitter (attempt n waits uniform(0, min(cap, base·2ⁿ))),
 * so a server restart does not see every client come back in the same millisecond.
 *
 * The attempt count is credited back only after a connection has stayed up for `stableMs`: a
 * server that accepts and then drops a session at once (a dying node, a refused resume loop)
 * must not reset the delay on every welcome and turn a fleet of clients into a reconnect storm.
 * The first retry is short (at most `baseMs`), so that a brief drop comes back well inside the
 * server's resume window (`suspect_timeout`, 3 s by default) and costs no view change.
 */

export interface BackoffOptions {
  /** first delay's upper bound (ms) */
  baseMs?: number;
  /** no delay is longer (ms) */
  capMs?: number;
  /** a connection up this long resets the attempt count (ms) */
  stableMs?: number;
}

export class Backoff {
  readonly baseMs: number;
  readonly capMs: number;
  readonly stableMs: number;
  #attempt = 0;
  #upSince: number | null = null;

  readonly #random: () => number;

  constructor(opts: BackoffOptions = {}, random: () => number = Math.random) {
    this.#random = random;
    this.baseMs = opts.baseMs ?? 100;
    this.capMs = opts.capMs ?? 10_000;
    this.stableMs = opts.stableMs ?? 30_000;
    if (!(this.baseMs > 0) || !(this.capMs >= this.baseMs) || !(this.stableMs >= 0)) {
      throw new RangeError("backoff: 0 < baseMs <= capMs");
    }
  }

  /** The delay before the next attempt (ms); counts the attempt. */
  next(): number {
    const bound = Math.min(this.capMs, this.baseMs * 2 ** Math.min(this.#attempt, 30));
    this.#attempt += 1;
    return this.#random() * bound;
  }

  /** How many attempts since the last stable connection. */
  get attempts(): number {
    return this.#attempt;
  }

  /** A connection is up at `now` (ms, monotonic). */
  connected(now: number): void {
    this.#upSince = now;
  }

  /** The connection went down at `now`: if it had been up long enough, start over. */
  disconnected(now: number): void {
    if (this.#upSince !== null && now - this.#upSince >= this.stableMs) this.#attempt = 0;
    this.#upSince = null;
  }
}
