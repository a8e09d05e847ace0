/** Full-jitter reconnect delays, and the attempt count that only a stable connection resets. */

import { describe, expect, it } from "vitest";
import { Backoff } from "../src/backoff.js";

/** A seeded generator (mulberry32): the same sequence on every run. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe("full jitter", () => {
  it("attempt n waits within [0, min(cap, base·2^n)]", () => {
    const base = 100;
    const cap = 10_000;
    for (let seed = 1; seed <= 50; seed++) {
      const b = new Backoff({ baseMs: base, capMs: cap }, seeded(seed));
      for (let n = 0; n < 20; n++) {
        const d = b.next();
        expect(d).toBeGreaterThanOrEqual(0);
        expect(d).toBeLessThanOrEqual(Math.min(cap, base * 2 ** n));
      }
      expect(b.attempts).toBe(20);
    }
  });

  it("reaches the bound of each attempt (the jitter is the whole range, not a fraction)", () => {
    const b = new Backoff({ baseMs: 100, capMs: 1_000 }, () => 0.999_999);
    const delays = Array.from({ length: 6 }, () => b.next());
    const bounds = [100, 200, 400, 800, 1_000, 1_000];
    delays.forEach((d, i) => expect(d).toBeCloseTo(bounds[i]! * 0.999_999, 6));
    const zero = new Backoff({ baseMs: 100, capMs: 1_000 }, () => 0);
    expect(zero.next()).toBe(0);
  });

  it("spreads a fleet: with Math.random the mean first delay is about base/2", () => {
    const base = 100;
    let sum = 0;
    let max = 0;
    const n = 10_000;
    const buckets = new Array<number>(10).fill(0);
    for (let i = 0; i < n; i++) {
      const d = new Backoff({ baseMs: base }).next();
      sum += d;
      max = Math.max(max, d);
      buckets[Math.min(9, Math.floor(d / 10))]! += 1;
    }
    // uniform(0, 100): mean 50, standard error of the mean ≈ 0.29
    expect(sum / n).toBeGreaterThan(47);
    expect(sum / n).toBeLessThan(53);
    expect(max).toBeLessThanOrEqual(base);
    // every tenth of the range gets its share (about 1000 each), so clients do not come back together
    for (const b of buckets) expect(b).toBeGreaterThan(800);
  });

  it("refuses nonsense bounds", () => {
    expect(() => new Backoff({ baseMs: 0 })).toThrow(RangeError);
    expect(() => new Backoff({ baseMs: 100, capMs: 50 })).toThrow(RangeError);
  });
});

describe("reset only after a stable connection (the reconnect-storm fix)", () => {
  it("a connection shorter than stableMs does not reset the attempt count", () => {
    const b = new Backoff({ baseMs: 100, capMs: 10_000, stableMs: 30_000 }, () => 0.999);
    let t = 0;
    const delays: number[] = [];
    for (let i = 0; i < 6; i++) {
      delays.push(b.next());
      t += 1_000;
      b.connected(t); // a welcome...
      t += 500;
      b.disconnected(t); // ...and dropped at once (a dying node)
    }
    expect(b.attempts).toBe(6);
    // the delays keep growing instead of starting over at every welcome
    for (let i = 1; i < delays.length; i++) expect(delays[i]!).toBeGreaterThan(delays[i - 1]!);
    expect(b.next()).toBeGreaterThan(6_000);
  });

  it("a connection up for stableMs resets it", () => {
    const b = new Backoff({ baseMs: 100, capMs: 10_000, stableMs: 30_000 }, () => 0.999);
    for (let i = 0; i < 5; i++) b.next();
    b.connected(1_000);
    b.disconnected(31_000);
    expect(b.attempts).toBe(0);
    expect(b.next()).toBeLessThan(100);
  });

  it("a drop without a connection (a failed attempt) resets nothing", () => {
    const b = new Backoff({ stableMs: 0 });
    b.next();
    b.next();
    b.disconnected(1e9);
    expect(b.attempts).toBe(2);
  });
});
