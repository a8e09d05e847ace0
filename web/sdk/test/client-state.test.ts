/**
 * The client's state transfer and resume refusals, against the fake WebSocket: a joiner restores
 * a donor's snapshot before any later message, a donor snapshots at the request (not later), and
 * a refused resume point becomes a fresh join announced by `reset`.
 */

import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Client } from "../src/client.js";
import { decodeSnapshot, encodeSnapshot } from "../src/codec.js";
import type { Frame } from "../src/protocol.js";
import { deliver, type FakeSocket, fakeClient, type Harness, install, welcome } from "./fake-socket.js";

let clients: Client[] = [];

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "Date", "performance"] });
});

afterEach(() => {
  for (const c of clients) c.close();
  clients = [];
  vi.useRealTimers();
});

function connected(): { h: Harness; ws: FakeSocket } {
  const h = fakeClient();
  clients.push(h.client);
  const ws = h.last();
  ws.open();
  ws.push(welcome());
  return { h, ws };
}

const text = (b: Uint8Array): string => new TextDecoder().decode(b);
const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);

describe("state transfer", () => {
  it("a joiner restores the snapshot, then only the messages it does not cover", async () => {
    const { h, ws } = connected();
    const log: string[] = [];
    const g = h.client.group("g", {
      wantState: true,
      state: { snapshot: () => bytes("joiner"), restore: (b) => log.push(`restore ${text(b)}`) },
    });
    g.on("message", (m) => log.push(`message ${m.offset}`));
    g.on("state-received", (e) => log.push(`state-received ${e.reason ?? "ok"}`));
    const joining = g.join();
    expect(ws.ofType("join")[0]).toMatchObject({ group: "g", want_state: true });
    ws.push(install("g", { members: ["a", "me"], joined: ["me"], offset: 10 }));
    await joining;
    expect(g.status).toBe("joining"); // joined, but the state has not arrived
    await expect(g.checkpoint()).rejects.toMatchObject({ code: "not_ready" });

    ws.push({ type: "batch", frames: [deliver("g", 11, "fifo:a", 1), deliver("g", 12, "fifo:a", 2)] });
    expect(log).toEqual([]);
    const chunks = await encodeSnapshot(bytes("donor state"), 8); // several chunks
    expect(chunks.length).toBeGreaterThan(1);
    for (const c of chunks) {
      const f: Frame = { type: "state_chunk", group: "g", transfer: "t1", index: c.index, last: c.last, data: c.data };
      if (c.last) Object.assign(f, { sha256: c.sha256, streams: { "fifo:a": 1 }, offset: 10 });
      ws.push(f);
    }
    ws.push(deliver("g", 13, "fifo:a", 3)); // arrives while the snapshot is being decoded
    await vi.waitFor(() => expect(log).toContain("state-received ok"));
    expect(log).toEqual(["restore donor state", "state-received ok", "message 12", "message 13"]);
    expect(g.status).toBe("joined");
    expect(g.delivered.get("fifo:a")).toBe(3);
  });

  it("a snapshot that does not check out restores nothing and says why", async () => {
    const { h, ws } = connected();
    const restore = vi.fn();
    const g = h.client.group("g", { wantState: true, state: { snapshot: () => new Uint8Array(), restore } });
    const reasons: Array<string | null> = [];
    g.on("state-received", (e) => reasons.push(e.reason));
    const joining = g.join();
    ws.push(install("g", { members: ["a", "me"], offset: 10 }));
    await joining;
    const [c] = await encodeSnapshot(bytes("x"));
    ws.push({ type: "state_chunk", group: "g", transfer: "t1", index: 0, last: true, data: c!.data, sha256: "00".repeat(32), streams: {}, offset: 10 });
    await vi.waitFor(() => expect(reasons).toHaveLength(1));
    expect(reasons[0]).toMatch(/^bad_transfer: sha256 mismatch/);
    expect(restore).not.toHaveBeenCalled();
  });

  it("a donor snapshots at the request, before the later events of the same batch", async () => {
    const { h, ws } = connected();
    let applied = 0;
    const g = h.client.group("g", {
      state: { snapshot: () => bytes(`applied=${applied}`), restore: () => undefined },
    });
    g.on("message", () => {
      applied += 1;
    });
    const joining = g.join();
    ws.push(install("g"));
    await joining;
    ws.push(deliver("g", 1, "fifo:a", 1));
    ws.push({
      type: "batch",
      frames: [
        install("g", { view: 2, members: ["me", "b"], joined: ["b"], offset: 1 }),
        { type: "state_request", group: "g", transfer: "t7", joiner: "b", offset: 1 },
        deliver("g", 2, "fifo:a", 2),
      ],
    });
    expect(applied).toBe(2);
    await vi.waitFor(() => expect(ws.ofType("state_chunk").some((f) => f.last === true)).toBe(true));
    const chunks = ws.ofType("state_chunk");
    expect(chunks.map((f) => f.index)).toEqual(chunks.map((_, i) => i));
    const last = chunks.at(-1)!;
    expect(last).toMatchObject({ group: "g", transfer: "t7", last: true, streams: { "fifo:a": 1 } });
    const snap = await decodeSnapshot(
      chunks.map((f) => f.data as string),
      last.sha256 as string,
    );
    expect(text(snap)).toBe("applied=1");
  });
});

describe("checkpoints", () => {
  it("the position a checkpoint claims leaves out messages still held back (an atomic caught up before its outcome)", async () => {
    const { h, ws } = connected();
    let applied: number[] = [];
    const g = h.client.group("g", {
      state: { snapshot: () => bytes(JSON.stringify(applied)), restore: () => undefined },
    });
    g.on("message", (m) => applied.push(m.offset));
    const joining = g.join();
    ws.push(install("g", { epoch: 1, offset: 0 }));
    await joining;
    ws.push({ type: "batch", frames: [deliver("g", 1, "fifo:a", 1), deliver("g", 2, "fifo:a", 2)] });
    ws.serverClose(1006);
    vi.advanceTimersByTime(100);
    const ws2 = h.last();
    ws2.open();
    ws2.push(welcome({ resumed: true }));
    ws2.push({ type: "view_resume", group: "g", view: 1 });
    // the replay: an atomic message whose outcome comes after catchup_done, and one behind it
    ws2.push({
      type: "batch",
      frames: [
        deliver("g", 3, "fifo:a", 3, { atomic: true }),
        deliver("g", 4, "fifo:a", 4),
        { type: "catchup_done", group: "g", offset: 4, count: 2 },
      ],
    });
    expect(applied).toEqual([1, 2]);

    const position = async (): Promise<{ offset: number; streams: Record<string, number> }> => {
      const before = ws2.ofType("checkpoint").length;
      void g.checkpoint().catch(() => undefined);
      await vi.waitFor(() => expect(ws2.ofType("checkpoint").length).toBeGreaterThan(before));
      return ws2.ofType("checkpoint").at(-1)!.position as { offset: number; streams: Record<string, number> };
    };
    // The snapshot holds messages 1 and 2 only: the position must not include 3 or 4, or a
    // member restoring this checkpoint would never get them.
    const held = await position();
    const includes = (p: typeof held, offset: number, stream: string, seq: number): boolean =>
      offset <= p.offset || seq <= (p.streams[stream] ?? 0);
    expect(held.streams).toEqual({ "fifo:a": 2 });
    expect(includes(held, 2, "fifo:a", 2)).toBe(true);
    expect(includes(held, 3, "fifo:a", 3)).toBe(false);
    expect(includes(held, 4, "fifo:a", 4)).toBe(false);

    ws2.push({ type: "confirm", group: "g", offsets: [3] });
    expect(applied).toEqual([1, 2, 3, 4]);
    const after = await position();
    expect(after).toMatchObject({ offset: 4, streams: { "fifo:a": 4 } });
    applied = [];
  });
});

describe("a refused resume point", () => {
  it("joins afresh: the application sees `reset`, then the new view, then the new log", async () => {
    const { h, ws } = connected();
    const g = h.client.group("g");
    const events: string[] = [];
    g.on("reset", (r) => events.push(`reset ${r.reason} ${r.oldEpoch}->${r.newEpoch}`));
    g.on("view", (v) => events.push(`view ${v.view}`));
    g.on("message", (m) => events.push(`message ${m.stream}/${m.seq}`));
    const joining = g.join();
    ws.push(install("g", { epoch: 1 }));
    await joining;
    ws.push({ type: "batch", frames: [deliver("g", 1, "fifo:a", 1), deliver("g", 2, "fifo:a", 2)] });
    ws.serverClose(1006);

    vi.advanceTimersByTime(100);
    const ws2 = h.last();
    ws2.open();
    ws2.push(welcome({ session: "s2", resumed: false })); // the server restarted: session gone
    const [rejoin] = ws2.ofType("join");
    expect(rejoin).toMatchObject({ resume: { epoch: 1, streams: { "fifo:a": 2 } } });
    ws2.push({ type: "error", code: "offset_unavailable", message: "another epoch", req: rejoin!.req as string });
    const fresh = ws2.ofType("join")[1];
    expect(fresh).toBeDefined();
    expect(fresh).not.toHaveProperty("resume");
    ws2.push(install("g", { epoch: 2, view: 1, offset: 0 }));
    ws2.push(deliver("g", 1, "fifo:a", 1, { payload: "new log" }));
    expect(events).toEqual([
      "view 1",
      "message fifo:a/1",
      "message fifo:a/2",
      "reset offset_unavailable 1->2",
      "view 1",
      "message fifo:a/1",
    ]);
    expect(g.status).toBe("joined");
    expect(h.client.state).toBe("connected");
  });

  it("a join refused for good rejects join() with the server's code", async () => {
    const { h, ws } = connected();
    const g = h.client.group("g");
    const joining = g.join();
    const [j] = ws.ofType("join");
    ws.push({ type: "error", code: "forbidden", message: "no join grant", req: j!.req as string });
    await expect(joining).rejects.toMatchObject({ name: "ServerRefused", code: "forbidden" });
    expect(g.status).toBe("removed");
  });

  it("join_pending is retried by itself, with a delay", async () => {
    const { h, ws } = connected();
    const g = h.client.group("g");
    const joining = g.join();
    const [j] = ws.ofType("join");
    ws.push({ type: "error", code: "join_pending", message: "busy", req: j!.req as string });
    expect(ws.ofType("join")).toHaveLength(1);
    vi.advanceTimersByTime(200);
    expect(ws.ofType("join")).toHaveLength(2);
    ws.push(install("g"));
    await joining;
    expect(g.status).toBe("joined");
  });
});
