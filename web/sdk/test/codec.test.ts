/** Snapshot chunks (codec.ts): round trips, refusals, and the same format as state_transfer/codec.py. */

import { execFileSync, spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { fromBase64, toBase64 } from "../src/base64.js";
import { CHUNK_BYTES, decodeSnapshot, encodeSnapshot, SnapshotError } from "../src/codec.js";

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, "../../..");

function sha(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

async function roundTrip(snapshot: Uint8Array): Promise<Uint8Array> {
  const chunks = await encodeSnapshot(snapshot);
  const last = chunks[chunks.length - 1]!;
  return decodeSnapshot(
    chunks.map((c) => c.data),
    last.sha256,
  );
}

async function rejects(p: Promise<unknown>, pattern: RegExp): Promise<void> {
  const e = await p.then(
    () => null,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(SnapshotError);
  expect((e as Error).message).toMatch(pattern);
}

describe("encodeSnapshot / decodeSnapshot", () => {
  it("an empty snapshot is one chunk and comes back empty", async () => {
    const chunks = await encodeSnapshot(new Uint8Array(0));
    expect(chunks).toHaveLength(1);
    expect(chunks[0]).toMatchObject({ index: 0, last: true, sha256: sha(new Uint8Array(0)) });
    expect(await roundTrip(new Uint8Array(0))).toEqual(new Uint8Array(0));
  });

  it("a small snapshot round-trips, the last chunk carrying the sha256", async () => {
    const snap = new TextEncoder().encode(JSON.stringify({ notes: ["a", "b"], n: 42 }));
    const chunks = await encodeSnapshot(snap);
    expect(chunks).toHaveLength(1);
    expect(chunks[0]!.sha256).toBe(sha(snap));
    expect(await roundTrip(snap)).toEqual(snap);
  });

  it("random bytes over 256 KiB: several chunks of at most 256 KiB, in order, only the last with sha256", async () => {
    const snap = new Uint8Array(randomBytes(700 * 1024));
    const chunks = await encodeSnapshot(snap);
    expect(chunks.length).toBeGreaterThanOrEqual(3);
    chunks.forEach((c, i) => {
      expect(c.index).toBe(i);
      expect(c.last).toBe(i === chunks.length - 1);
      expect(c.sha256).toBe(c.last ? sha(snap) : null);
      expect(fromBase64(c.data).length).toBeLessThanOrEqual(CHUNK_BYTES);
    });
    expect(fromBase64(chunks[0]!.data).length).toBe(CHUNK_BYTES);
    const back = await decodeSnapshot(
      chunks.map((c) => c.data),
      chunks.at(-1)!.sha256,
    );
    expect(back.length).toBe(snap.length);
    expect(sha(back)).toBe(sha(snap));
  });

  it("honours a smaller chunk size", async () => {
    const snap = new Uint8Array(randomBytes(10_000));
    const chunks = await encodeSnapshot(snap, 1_000);
    expect(chunks.length).toBeGreaterThanOrEqual(10);
    expect(await decodeSnapshot(chunks.map((c) => c.data), chunks.at(-1)!.sha256)).toEqual(snap);
  });

  it("accepts an upper-case sha256", async () => {
    const snap = new Uint8Array([1, 2, 3]);
    const [c] = await encodeSnapshot(snap);
    expect(await decodeSnapshot([c!.data], c!.sha256!.toUpperCase())).toEqual(snap);
  });
});

describe("refusals: a bad transfer restores nothing", () => {
  it("a sha256 mismatch", async () => {
    const [c] = await encodeSnapshot(new Uint8Array([1, 2, 3]));
    await rejects(decodeSnapshot([c!.data], sha(new Uint8Array([1, 2, 4]))), /sha256 mismatch/);
  });

  it("no sha256 on the last chunk", async () => {
    const [c] = await encodeSnapshot(new Uint8Array([1, 2, 3]));
    await rejects(decodeSnapshot([c!.data], null), /no sha256/);
  });

  it("a chunk that is not base64", async () => {
    await rejects(decodeSnapshot(["not base64!!"], "00"), /not base64/);
  });

  it("bytes that are not deflate", async () => {
    await rejects(decodeSnapshot([toBase64(new TextEncoder().encode("hello, not zlib"))], "00"), /decompress/);
  });

  it("corrupted deflate data", async () => {
    const snap = new Uint8Array(randomBytes(4_000));
    const [c] = await encodeSnapshot(snap);
    const packed = fromBase64(c!.data);
    for (let i = 10; i < 60; i++) packed[i] = packed[i]! ^ 0xff;
    await rejects(decodeSnapshot([toBase64(packed)], c!.sha256), /decompress|sha256 mismatch/);
  });

  it("a truncated transfer (a chunk missing)", async () => {
    const snap = new Uint8Array(randomBytes(5_000));
    const chunks = await encodeSnapshot(snap, 1_000);
    await rejects(decodeSnapshot(chunks.slice(0, -2).map((c) => c.data), chunks.at(-1)!.sha256), /decompress|sha256/);
  });

  it("a snapshot over maxBytes", async () => {
    const snap = new Uint8Array(200_000); // zeros: tiny compressed, large decompressed
    const chunks = await encodeSnapshot(snap);
    expect(chunks).toHaveLength(1);
    await rejects(decodeSnapshot([chunks[0]!.data], chunks[0]!.sha256, 100_000), /over 100000 bytes/);
    expect((await decodeSnapshot([chunks[0]!.data], chunks[0]!.sha256, 200_000)).length).toBe(200_000);
  });
});

describe("the same format as state_transfer/codec.py", () => {
  it("decodes a snapshot encoded by the Python codec (fixture)", async () => {
    const fx = JSON.parse(readFileSync(resolve(here, "fixtures/python-snapshot.json"), "utf8")) as {
      snapshot_hex: string;
      sha256: string;
      chunks: Array<{ index: number; last: boolean; data: string; sha256: string | null }>;
    };
    expect(fx.chunks.length).toBeGreaterThan(1);
    const want = new Uint8Array(Buffer.from(fx.snapshot_hex, "hex"));
    const got = await decodeSnapshot(
      fx.chunks.map((c) => c.data),
      fx.chunks.at(-1)!.sha256,
    );
    expect(got).toEqual(want);
    expect(sha(got)).toBe(fx.sha256);
  });

  const python = spawnSync("python3", ["-c", "import state_transfer.codec"], { cwd: repoRoot }).status === 0;

  it.skipIf(!python)("the Python Assembler decodes a snapshot encoded here", async () => {
    const snap = new Uint8Array(randomBytes(300 * 1024)); // two chunks
    const chunks = await encodeSnapshot(snap);
    expect(chunks.length).toBe(2);
    const script = [
      "import json, sys, hashlib",
      "from state_transfer.codec import Assembler",
      "chunks = json.load(sys.stdin)",
      "a = Assembler()",
      "out = None",
      "for c in chunks: out = a.feed(c['index'], c['last'], c['data'], c['sha256'])",
      "print(json.dumps({'size': len(out), 'sha256': hashlib.sha256(out).hexdigest()}))",
    ].join("\n");
    const out = execFileSync("python3", ["-c", script], { cwd: repoRoot, input: JSON.stringify(chunks), timeout: 8_000 });
    expect(JSON.parse(out.toString())).toEqual({ size: snap.length, sha256: sha(snap) });
  });
});
