// Frames into messages (batching.ts), and the client packing what it writes at once into `batch`
// messages for a server that takes them (issue 34), within its max_frame_bytes.
import { describe, expect, it } from "vitest";

import { batchLimits, pack } from "../src/batching.js";
import type { Frame } from "../src/protocol.js";
import { fakeClient, install, welcome } from "./fake-socket.js";

function unpack(messages: string[]): string[] {
  return messages.flatMap((m) => {
    const f = JSON.parse(m) as Frame;
    return f.type === "batch" ? (f.frames as Frame[]).map((x) => JSON.stringify(x)) : [m];
  });
}

const utf8 = (s: string): number => new TextEncoder().encode(s).length;

describe("pack", () => {
  it("takes the server's limits, or none", () => {
    expect(batchLimits({})).toEqual([1, 0]);
    expect(batchLimits({ max_frame_bytes: 1 << 20 })).toEqual([1, 0]);
    expect(batchLimits({ max_frame_bytes: 1 << 20, max_batch_frames: 1 })).toEqual([1, 0]);
    expect(batchLimits({ max_frame_bytes: 4096, max_batch_frames: 1000 })).toEqual([1000, 4096]);
  });

  it("keeps the order and every limit, counting UTF-8 bytes", () => {
    for (let seed = 1; seed < 200; seed++) {
      let x = seed;
      const rnd = (n: number): number => ((x = (x * 1103515245 + 12345) % 2 ** 31), x % n);
      const frames = Array.from({ length: rnd(40) }, (_, i) =>
        JSON.stringify({ type: "ping", req: `${i}` + "é€😀x".repeat(rnd(40)) }));
      const most = 2 + rnd(6);
      const limit = 60 + rnd(1000);
      const messages = pack(frames, most, limit);
      expect(unpack(messages)).toEqual(frames);
      for (const m of messages) {
        const f = JSON.parse(m) as Frame;
        if (f.type === "batch") {
          expect((f.frames as Frame[]).length).toBeGreaterThanOrEqual(2);
          expect((f.frames as Frame[]).length).toBeLessThanOrEqual(most);
          expect(utf8(m)).toBeLessThanOrEqual(limit);
        } else {
          expect(frames).toContain(m);
        }
      }
    }
  });
});

describe("the client", () => {
  async function joinedWith(limits: Record<string, unknown>) {
    const h = fakeClient();
    const ws = h.last();
    ws.open();
    ws.push(welcome({ limits: { suspect_timeout_ms: 3_000, ...limits } }));
    const g = h.client.group("g");
    const joining = g.join();
    ws.push(install("g"));
    await joining;
    ws.messages.length = 0;
    return { ws, g };
  }

  it("sends publishes made together in one batch, once the caller's code has run", async () => {
    const { ws, g } = await joinedWith({ max_frame_bytes: 1 << 20, max_batch_frames: 1000 });
    for (let i = 0; i < 5; i++) void g.publish(i).catch(() => {});
    expect(ws.messages).toHaveLength(0);
    await Promise.resolve();
    expect(ws.messages).toHaveLength(1);
    expect(ws.ofType("publish").map((f) => f.payload)).toEqual([0, 1, 2, 3, 4]);
  });

  it("cuts batches at the server's max_frame_bytes", async () => {
    const { ws, g } = await joinedWith({ max_frame_bytes: 2048, max_batch_frames: 1000 });
    for (let i = 0; i < 10; i++) void g.publish("é".repeat(300) + i).catch(() => {});
    await Promise.resolve();
    expect(ws.messages.length).toBeGreaterThan(2);
    for (const m of ws.messages) expect(utf8(m)).toBeLessThanOrEqual(2048);
    expect(ws.ofType("publish")).toHaveLength(10);
  });

  it("sends each frame alone, at once, to a server that takes no batch", async () => {
    const { ws, g } = await joinedWith({ max_frame_bytes: 1 << 20 });
    for (let i = 0; i < 3; i++) void g.publish(i).catch(() => {});
    expect(ws.messages).toHaveLength(3);
  });
});
