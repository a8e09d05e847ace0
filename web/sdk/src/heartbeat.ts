/**
 * The application-level heartbeat (browsers cannot see WebSocket pings, DESIGN §3), judged by
 * elapsed time rather than by counting timer ticks, because a background tab's timers are
 * throttled (Chrome: about one wake-up a minute) and a sleeping laptop's stop altogether.
 *
 * Fed `tick(now, hidden)` from a periodic timer and `received(now)` on every frame; answers what
 * to do. The rules:
 * - a quiet link is probed with a `ping` after `intervalMs` without a frame;
 * - an unanswered ping past the deadline (`timeoutMs`, or `hiddenTimeoutMs` while the page is
 *   hidden) means the link is dead;
 * - a tick that comes much later than asked (the timer was throttled, or the machine slept) is
 *   not evidence against the link: the frames that arrived meanwhile may not have been read
 *   yet. It sends a fresh probe and gives it `probeMs` from now instead.
 */

export interface HeartbeatOptions {
  /** probe a link quiet for this long (ms) */
  intervalMs?: number;
  /** a probe unanswered this long kills the link, page visible (ms) */
  timeoutMs?: number;
  /** ... page hidden: background timers are throttled (ms) */
  hiddenTimeoutMs?: number;
  /** after a late tick (throttling, sleep): the grace given to a fresh probe (ms) */
  probeMs?: number;
}

export type HeartbeatAction = "ping" | "dead" | null;

export class Heartbeat {
  readonly intervalMs: number;
  readonly timeoutMs: number;
  readonly hiddenTimeoutMs: number;
  readonly probeMs: number;
  #lastRx: number;
  #pingAt: number | null = null;
  #deadline = Infinity;
  #lastTick: number;

  constructor(now: number, opts: HeartbeatOptions = {}) {
    this.intervalMs = opts.intervalMs ?? 5_000;
    this.timeoutMs = opts.timeoutMs ?? 15_000;
    this.hiddenTimeoutMs = opts.hiddenTimeoutMs ?? 75_000;
    this.probeMs = opts.probeMs ?? 5_000;
    this.#lastRx = now;
    this.#lastTick = now;
  }

  /** How often to call `tick` (ms). */
  get tickMs(): number {
    return Math.min(1_000, this.intervalMs);
  }

  /** Any frame proves the link alive. */
  received(now: number): void {
    this.#lastRx = now;
    this.#pingAt = null;
    this.#deadline = Infinity;
  }

  /** Probe now (the page became visible, the network came back): a ping with `probeMs`. */
  probe(now: number): HeartbeatAction {
    this.#pingAt = now;
    this.#deadline = now + this.probeMs;
    return "ping";
  }

  tick(now: number, hidden: boolean): HeartbeatAction {
    const late = now - this.#lastTick > this.tickMs + 2_000;
    this.#lastTick = now;
    if (this.#pingAt !== null) {
      // Not the link's fault: ask again, briefly. Once: a fresh probe (finite deadline) still
      // unanswered at a later tick is judged, late or not, since socket events are not
      // throttled; re-probing at every late tick would never find a dead link in a tab whose
      // every tick is late (one wake-up a minute).
      if (late && this.#deadline === Infinity) return this.probe(now);
      const limit = Math.min(this.#deadline, this.#pingAt + (hidden ? this.hiddenTimeoutMs : this.timeoutMs));
      return now >= limit ? "dead" : null;
    }
    if (late) return this.probe(now);
    if (now - this.#lastRx >= this.intervalMs) {
      this.#pingAt = now;
      this.#deadline = Infinity;
      return "ping";
    }
    return null;
  }
}
