/** When to refresh a JWT (token.ts), on real HS256 tokens made here with node:crypto. */

import { createHmac } from "node:crypto";
import { describe, expect, it } from "vitest";
import { refreshAt, tokenExpiry } from "../src/token.js";

function b64url(data: string | Buffer): string {
  return Buffer.from(data).toString("base64url");
}

function hs256(payload: Record<string, unknown>, secret = "s3cret"): string {
  const head = b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const body = b64url(JSON.stringify(payload));
  const sig = createHmac("sha256", secret).update(`${head}.${body}`).digest("base64url");
  return `${head}.${body}.${sig}`;
}

describe("tokenExpiry", () => {
  it("reads exp (seconds) as ms", () => {
    expect(tokenExpiry(hs256({ sub: "ana", exp: 1_900_000_000 }))).toBe(1_900_000_000_000);
  });

  it("reads a payload whose base64url uses - and _ and needs padding", () => {
    // "?>>" and "~~~" encode to base64 with '/' and '+': base64url turns them into '_' and '-'
    let sub = "a?>";
    let token = hs256({ sub, exp: 1_800_000_001 });
    for (let i = 0; !/[-_]/.test(token.split(".")[1]!) || token.split(".")[1]!.length % 4 === 0; i++) {
      sub += i % 2 ? "~" : "?>";
      token = hs256({ sub, exp: 1_800_000_001 });
      if (i > 50) throw new Error("could not make such a token");
    }
    expect(tokenExpiry(token)).toBe(1_800_000_001_000);
  });

  it("no exp, a non-numeric exp, or not a JWT: no known expiry", () => {
    expect(tokenExpiry(hs256({ sub: "ana" }))).toBeNull();
    expect(tokenExpiry(hs256({ sub: "ana", exp: "soon" }))).toBeNull();
    expect(tokenExpiry("opaque-token")).toBeNull();
    expect(tokenExpiry("a.%%%.c")).toBeNull();
  });
});

describe("refreshAt", () => {
  const now = 1_000_000;

  it("a fifth of the remaining life ahead of exp", () => {
    expect(refreshAt(now + 60_000, now)).toBe(now + 48_000);
  });

  it("at most 30 s ahead", () => {
    expect(refreshAt(now + 3_600_000, now)).toBe(now + 3_600_000 - 30_000);
  });

  it("an expired token: at exp (at once)", () => {
    expect(refreshAt(now - 5_000, now)).toBe(now - 5_000);
  });

  it("always before exp and not before now for a live token", () => {
    for (const left of [1, 10, 999, 10_000, 150_000, 1e7]) {
      const at = refreshAt(now + left, now);
      expect(at).toBeLessThan(now + left);
      expect(at).toBeGreaterThanOrEqual(now);
    }
  });

  it("with a real token", () => {
    const exp = 2_000_000_000;
    const t = tokenExpiry(hs256({ sub: "ana", exp }))!;
    expect(refreshAt(t, t - 100_000)).toBe(t - 20_000);
  });
});
