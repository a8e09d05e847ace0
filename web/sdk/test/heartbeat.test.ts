/** The elapsed-time heartbeat, driven with explicit `now` values (no timers). */

import { describe, expect, it } from "vitest";
import { Heartbeat, type HeartbeatAction } from "../src/heartbeat.js";

const opts = { intervalMs: 5_000, timeoutMs: 15_000, hiddenTimeoutMs: 75_000, probeMs: 5_000 };

/** Tick every `step` ms from `from` (exclusive) to `to` (inclusive); the first non-null action and when. */
function run(hb: Heartbeat, from: number, to: number, step: number, hidden = false): { at: number; action: HeartbeatAction } | null {
  for (let t = from + step; t <= to; t += step) {
    const action = hb.tick(t, hidden);
    if (action !== null) return { at: t, action };
  }
  return null;
}

describe("heartbeat", () => {
  it("ticks at most every second", () => {
    expect(new Heartbeat(0, opts).tickMs).toBe(1_000);
    expect(new Heartbeat(0, { intervalMs: 300 }).tickMs).toBe(300);
  });

  it("pings after intervalMs without a frame", () => {
    const hb = new Heartbeat(0, opts);
    expect(run(hb, 0, 10_000, 1_000)).toEqual({ at: 5_000, action: "ping" });
  });

  it("any frame postpones the ping", () => {
    const hb = new Heartbeat(0, opts);
    expect(run(hb, 0, 3_000, 1_000)).toBeNull();
    hb.received(3_000);
    expect(run(hb, 3_000, 20_000, 1_000)).toEqual({ at: 8_000, action: "ping" });
  });

  it("declares the link dead timeoutMs after an unanswered ping, page visible", () => {
    const hb = new Heartbeat(0, opts);
    expect(run(hb, 0, 5_000, 1_000)).toEqual({ at: 5_000, action: "ping" });
    expect(run(hb, 5_000, 60_000, 1_000)).toEqual({ at: 20_000, action: "dead" });
  });

  it("is not dead while hidden until hiddenTimeoutMs", () => {
    const hb = new Heartbeat(0, opts);
    expect(run(hb, 0, 5_000, 1_000, true)).toEqual({ at: 5_000, action: "ping" });
    expect(run(hb, 5_000, 200_000, 1_000, true)).toEqual({ at: 80_000, action: "dead" });
  });

  it("a late tick (throttled timer, sleep) sends a fresh probe instead of declaring dead; dead after probeMs if silent", () => {
    const hb = new Heartbeat(0, opts);
    expect(run(hb, 0, 5_000, 1_000)).toEqual({ at: 5_000, action: "ping" });
    // The machine slept: the next tick comes an hour later, long past the 15 s timeout.
    expect(hb.tick(3_600_000, false)).toBe("ping");
    expect(run(hb, 3_600_000, 3_700_000, 1_000)).toEqual({ at: 3_605_000, action: "dead" });
  });

  it("a late tick with no ping outstanding probes too", () => {
    const hb = new Heartbeat(0, opts);
    expect(hb.tick(1_000, false)).toBeNull();
    expect(hb.tick(4_500, false)).toBe("ping"); // 3.5 s after the last tick: late
  });

  it("an answer to the fresh probe clears it", () => {
    const hb = new Heartbeat(0, opts);
    run(hb, 0, 5_000, 1_000);
    expect(hb.tick(100_000, false)).toBe("ping");
    hb.received(100_200);
    expect(run(hb, 100_000, 105_000, 1_000)).toBeNull();
    expect(run(hb, 105_000, 110_000, 1_000)).toEqual({ at: 106_000, action: "ping" }); // a new interval, not dead
  });

  it("any received frame clears an outstanding ping", () => {
    const hb = new Heartbeat(0, opts);
    expect(run(hb, 0, 5_000, 1_000)).toEqual({ at: 5_000, action: "ping" });
    expect(run(hb, 5_000, 19_000, 1_000)).toBeNull();
    hb.received(19_000);
    expect(run(hb, 19_000, 23_000, 1_000)).toBeNull();
    expect(run(hb, 23_000, 60_000, 1_000)).toEqual({ at: 24_000, action: "ping" });
  });

  it("probe() (the page came back) gives probeMs", () => {
    const hb = new Heartbeat(0, opts);
    expect(hb.probe(500)).toBe("ping");
    expect(run(hb, 0, 60_000, 1_000)).toEqual({ at: 6_000, action: "dead" });
  });

  it("a silent link in a tab throttled to one wake-up a minute is found dead", () => {
    // Chrome's intensive throttling: every tick is 'late'. A late tick grants a fresh probe
    // once; a probe left unanswered over a whole minute of unthrottled socket events is not
    // the timer's fault.
    const hb = new Heartbeat(0, opts);
    const actions: Array<[number, HeartbeatAction]> = [];
    for (let t = 60_000; t <= 30 * 60_000; t += 60_000) {
      const action = hb.tick(t, true);
      actions.push([t, action]);
      if (action === "dead") break;
    }
    const dead = actions.find(([, a]) => a === "dead");
    expect(dead, `actions: ${JSON.stringify(actions)}`).toBeDefined();
    // found out on the first tick after the fresh probe's grace: two minutes, not never
    expect(dead![0]).toBe(120_000);
  });

  it("a throttled tab whose link answers is never declared dead", () => {
    const hb = new Heartbeat(0, opts);
    for (let t = 60_000; t <= 30 * 60_000; t += 60_000) {
      const action = hb.tick(t, true);
      expect(action).not.toBe("dead");
      if (action === "ping") hb.received(t + 40); // the pong, read as soon as it comes
    }
  });
});
