/**
 * The client (client.ts, group.ts) against a fake WebSocket the test plays the server on, with
 * vitest's fake timers: reconnects, queued and retried publishes, refusals, states, StrictMode
 * ref-counting, re-entrant handlers, and the ack/flush_ok that leave before application code.
 */

import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Client, ConnectionState } from "../src/client.js";
import { ClientClosed, GroupLeftError, PublishQueueFull, RequestTimeout } from "../src/errors.js";
import type { Message } from "../src/events.js";
import type { Group } from "../src/group.js";
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

function harness(opts: Parameters<typeof fakeClient>[0] = {}): Harness {
  const h = fakeClient(opts);
  clients.push(h.client);
  return h;
}

/** Open the current socket and welcome it. */
function connect(h: Harness, over: Parameters<typeof welcome>[0] = {}): FakeSocket {
  const ws = h.last();
  ws.open();
  ws.push(welcome(over));
  expect(h.client.state).toBe("connected");
  return ws;
}

async function joined(h: Harness, name = "g"): Promise<Group> {
  const ws = h.last();
  const g = h.client.group(name);
  const p = g.join();
  const join = ws.ofType("join").find((f) => f.group === name);
  expect(join).toBeDefined();
  ws.push(install(name));
  await p;
  expect(g.status).toBe("joined");
  return g;
}

/** The test does not care how this promise ends (the client's close in afterEach rejects it). */
function quiet(p: Promise<unknown>): void {
  p.catch(() => undefined);
}

/** A promise's outcome without waiting on timers: settled now or never. */
async function settled<T>(p: Promise<T>): Promise<{ ok: T } | { err: unknown } | "pending"> {
  let out: { ok: T } | { err: unknown } | "pending" = "pending";
  p.then(
    (ok) => (out = { ok }),
    (err: unknown) => (out = { err }),
  );
  for (let i = 0; i < 5; i++) await Promise.resolve();
  return out;
}

describe("connecting", () => {
  it("the hello carries member and token, and resume_session on a reconnect", () => {
    const h = harness({ token: "tok.en.x" });
    expect(h.sockets).toHaveLength(1);
    const ws1 = h.last();
    expect(ws1.url).toBe("ws://fake.test:1");
    ws1.open();
    expect(ws1.sent).toEqual([{ type: "hello", protocol: 1, member: "me", token: "tok.en.x" }]);
    ws1.push(welcome({ session: "sess-1" }));
    ws1.serverClose(1006);
    expect(h.client.state).toBe("reconnecting");
    vi.advanceTimersByTime(100); // full jitter, attempt 0: at most baseMs (100)
    expect(h.sockets).toHaveLength(2);
    h.last().open();
    expect(h.last().sent[0]).toEqual({ type: "hello", protocol: 1, member: "me", token: "tok.en.x", resume_session: "sess-1" });
  });

  it("a client without a WebSocket class says how to get one", () => {
    const g = globalThis as { WebSocket?: unknown };
    const saved = g.WebSocket;
    delete g.WebSocket;
    try {
      expect(() => harness({ WebSocket: undefined })).toThrow(/WebSocket is not defined.*ws/);
    } finally {
      if (saved !== undefined) g.WebSocket = saved;
    }
  });

  it("a refused hello (error, then close 4004) closes the client with the code, no retry", () => {
    const h = harness({ token: "bad" });
    const states: ConnectionState[] = [];
    h.client.on("state", (s) => states.push(s.to));
    const ws = h.last();
    ws.open();
    ws.push({ type: "error", code: "token_invalid", message: "signature", req: null });
    ws.serverClose(4004, "hello refused");
    expect(h.client.state).toBe("closed");
    expect(states).toEqual(["closed"]);
    expect(h.client.failure?.code).toBe("token_invalid");
    vi.advanceTimersByTime(60_000);
    expect(h.sockets).toHaveLength(1);
  });

  it("close 4002 (replaced by another connection) is closed for good: 'replaced'", async () => {
    const h = harness();
    const ws = connect(h);
    const g = await joined(h);
    const p = g.publish({ n: 1 });
    ws.serverClose(4002, "replaced");
    expect(h.client.state).toBe("closed");
    expect(h.client.failure?.code).toBe("replaced");
    const out = await settled(p);
    expect(out).toMatchObject({ err: expect.any(ClientClosed) });
    vi.advanceTimersByTime(60_000);
    expect(h.sockets).toHaveLength(1);
  });

  it("close 4007 (disconnected by the server API) without getToken is closed for good: 'disconnected'", async () => {
    const h = harness({ token: "old.to.ken" });
    const ws = connect(h);
    const g = await joined(h);
    const p = g.publish({ n: 1 });
    ws.serverClose(4007, "disconnected by the server API");
    expect(h.client.state).toBe("closed");
    expect(h.client.failure?.code).toBe("disconnected");
    expect(await settled(p)).toMatchObject({ err: expect.any(ClientClosed) });
    vi.advanceTimersByTime(60_000);
    expect(h.sockets).toHaveLength(1); // never again with the old token
  });

  it("close 4007 with getToken reconnects with a new token, and a revoked one closes the client", async () => {
    const tokens = ["old", "new", "revoked", "revoked", "revoked", "revoked"];
    const h = harness({ getToken: () => tokens.shift() ?? "revoked" });
    await Promise.resolve(); // (the first hello waits for getToken)
    await Promise.resolve();
    const ws = connect(h, { session: "s1" });
    ws.serverClose(4007, "disconnected by the server API");
    expect(h.client.state).toBe("reconnecting");
    vi.advanceTimersByTime(100);
    for (let i = 0; i < 3; i++) await Promise.resolve();
    const ws2 = h.last();
    expect(ws2).not.toBe(ws);
    ws2.open();
    expect(ws2.sent[0]).toMatchObject({ type: "hello", token: "new" });
    // a revoked token is refused (4004, token_revoked): a fresh one is asked a few times, then stop
    ws2.push({ type: "error", code: "token_revoked", message: "revoked", req: null });
    ws2.serverClose(4004, "hello refused");
    for (let round = 0; round < 6 && h.client.state !== "closed"; round++) {
      const n = h.sockets.length;
      for (let ms = 0; ms < 60_000 && h.sockets.length === n; ms += 50) await vi.advanceTimersByTimeAsync(50);
      expect(h.sockets.length).toBe(n + 1);
      const w = h.last();
      w.open();
      expect(w.sent[0]).toMatchObject({ type: "hello", token: "revoked" });
      w.push({ type: "error", code: "token_revoked", message: "revoked", req: null });
      w.serverClose(4004, "hello refused");
    }
    expect(h.client.state).toBe("closed");
    expect(h.client.failure?.code).toBe("token_revoked");
  });

  it("an install that removes this member tells why, and the group is not joined again", async () => {
    const h = harness();
    const ws = connect(h);
    const g = await joined(h);
    const removed: unknown[] = [];
    g.on("removed", (e) => removed.push(e));
    ws.push(install("g", { view: 2, members: [], joined: [], left: ["me"], reason: "removed" }));
    expect(removed).toEqual([{ type: "removed", group: "g", view: 2, reason: "removed" }]);
    expect(g.status).toBe("removed");
    // a reconnect does not join it again
    const joins = ws.ofType("join").length;
    ws.serverClose(1006);
    vi.advanceTimersByTime(1_000);
    const ws2 = h.last();
    ws2.open();
    ws2.push(welcome({ resumed: true }));
    expect(ws2.ofType("join")).toHaveLength(0);
    expect(ws.ofType("join")).toHaveLength(joins);
  });

  it("states: connecting → connected → reconnecting → suspended (after suspect_timeout_ms) → connected", () => {
    const h = harness({ backoff: { baseMs: 5_000, capMs: 5_000 }, random: () => 0.9 });
    const seen: string[] = [];
    h.client.on("state", (s) => seen.push(`${s.from}→${s.to}`));
    expect(h.client.state).toBe("connecting");
    const ws = connect(h, { limits: { suspect_timeout_ms: 2_000 } });
    ws.serverClose(1006);
    vi.advanceTimersByTime(1_999);
    expect(h.client.state).toBe("reconnecting");
    vi.advanceTimersByTime(1);
    expect(h.client.state).toBe("suspended");
    expect(h.sockets).toHaveLength(1); // the retry waits 0.9 × 5000 ms
    vi.advanceTimersByTime(2_500);
    expect(h.sockets).toHaveLength(2);
    connect(h);
    expect(seen).toEqual(["connecting→connected", "connected→reconnecting", "reconnecting→suspended", "suspended→connected"]);
  });

  it("attempts that fail before a welcome keep the state and back off further", () => {
    const h = harness({ random: () => 0.999 });
    const ws = connect(h);
    ws.serverClose(1006);
    const at: number[] = [];
    let t = 0;
    for (let i = 0; i < 5; i++) {
      const n = h.sockets.length;
      while (h.sockets.length === n) {
        vi.advanceTimersByTime(10);
        t += 10;
      }
      at.push(t);
      h.last().serverClose(1006); // refused before the welcome
    }
    const gaps = at.map((x, i) => x - (at[i - 1] ?? 0));
    // 100, 200, 400, 800, 1600 (× 0.999), to the nearest 10 ms
    expect(gaps).toEqual([100, 200, 400, 800, 1_600]);
    expect(["reconnecting", "suspended"]).toContain(h.client.state);
  });

  it("maxAttempts: gives up, closed 'unreachable'", () => {
    const h = harness({ maxAttempts: 2 });
    h.last().serverClose(1006);
    vi.advanceTimersByTime(1_000);
    h.last().serverClose(1006);
    expect(h.client.state).toBe("closed");
    expect(h.client.failure?.code).toBe("unreachable");
  });
});

describe("publishing", () => {
  it("a publish while disconnected is queued, sent after the welcome and the rejoin with the same id, once per connection", async () => {
    const h = harness();
    const ws1 = connect(h);
    const g = await joined(h);
    ws1.serverClose(1006);
    const p = g.publish({ n: 1 }, { order: "total" });
    expect(g.pending).toBe(1);

    vi.advanceTimersByTime(100);
    const ws2 = h.last();
    ws2.open();
    expect(ws2.sent.map((f) => f.type)).toEqual(["hello"]); // nothing before the welcome
    ws2.push(welcome({ resumed: true }));
    expect(ws2.sent.map((f) => f.type)).toEqual(["hello", "join"]); // the rejoin; the publish waits for it
    expect(ws2.sent[1]).toMatchObject({ group: "g", resume: { epoch: 1, offset: 0 } });
    ws2.push({ type: "view_resume", group: "g", view: 1 });
    const [pub2] = ws2.ofType("publish");
    expect(pub2).toMatchObject({ group: "g", order: "total", payload: { n: 1 } });
    const id = pub2!.id;

    // dropped again before the answer: sent again, same id, once
    ws2.serverClose(1006);
    vi.advanceTimersByTime(1_000);
    const ws3 = h.last();
    expect(ws3).not.toBe(ws2);
    ws3.open();
    ws3.push(welcome({ resumed: true }));
    ws3.push({ type: "view_resume", group: "g", view: 1 });
    expect(ws3.ofType("publish").map((f) => f.id)).toEqual([id]);
    expect(h.sockets.map((s) => s.ofType("publish").length)).toEqual([0, 1, 1]);

    ws3.push({ type: "published", req: ws3.ofType("publish")[0]!.req as string, id: id as string, offset: 7 });
    expect(await p).toEqual({ id, offset: 7 });
    expect(g.pending).toBe(0);
    // a late duplicate answer changes nothing, and a later drop sends nothing again
    ws3.push({ type: "published", req: "p0", id: id as string, offset: 7 });
    ws3.serverClose(1006);
    vi.advanceTimersByTime(1_000);
    h.last().open();
    h.last().push(welcome({ resumed: true }));
    h.last().push({ type: "view_resume", group: "g", view: 1 });
    expect(h.last().ofType("publish")).toEqual([]);
  });

  it("a publish sent during a view change and rejected view_changing is sent again after the install", async () => {
    const h = harness();
    const ws = connect(h);
    const g = await joined(h);
    const p = g.publish("x");
    const [first] = ws.ofType("publish");
    ws.push({ type: "view_change", group: "g", proposed: 2, members: ["me", "b"], joining: ["b"], leaving: [], reason: "join" });
    ws.push({ type: "rejected", req: first!.req as string, id: first!.id as string, code: "view_changing" });
    expect(ws.ofType("publish")).toHaveLength(1); // not while the change is under way
    expect(await settled(p)).toBe("pending");
    ws.push(install("g", { view: 2, members: ["me", "b"], joined: ["b"], offset: 0 }));
    const again = ws.ofType("publish");
    expect(again).toHaveLength(2);
    expect(again[1]!.id).toBe(first!.id);
    ws.push({ type: "published", req: again[1]!.req as string, id: first!.id as string, offset: 1 });
    expect(await p).toEqual({ id: first!.id, offset: 1 });
  });

  it("a publish made during a view change waits for the install", async () => {
    const h = harness();
    const ws = connect(h);
    const g = await joined(h);
    ws.push({ type: "view_change", group: "g", proposed: 2, members: ["me"], joining: [], leaving: ["b"], reason: "leave" });
    quiet(g.publish("y"));
    expect(ws.ofType("publish")).toHaveLength(0);
    ws.push(install("g", { view: 2, joined: [], left: ["b"], offset: 0 }));
    expect(ws.ofType("publish")).toHaveLength(1);
  });

  it("other rejections reject the publish with the code", async () => {
    const h = harness();
    const ws = connect(h);
    const g = await joined(h);
    const p = g.publish("x", { sameView: true });
    const [f] = ws.ofType("publish");
    expect(f).toMatchObject({ same_view: true, view: 1 });
    ws.push({ type: "rejected", req: f!.req as string, id: f!.id as string, code: "stale_view" });
    await expect(p).rejects.toMatchObject({ name: "PublishRejected", code: "stale_view" });
  });

  it("an atomic publish resolves with its outcome, not at `published`", async () => {
    const h = harness();
    const ws = connect(h);
    const g = await joined(h);
    const p = g.publish("claim", { atomic: true, order: "total" });
    const [f] = ws.ofType("publish");
    ws.push({ type: "published", req: f!.req as string, id: f!.id as string, offset: 3 });
    expect(await settled(p)).toBe("pending");
    ws.push({ type: "outcome", id: f!.id as string, group: "g", offset: 3, committed: false, reason: "ack_timeout" });
    expect(await p).toEqual({ id: f!.id, offset: 3, committed: false, reason: "ack_timeout" });
  });

  it("maxPendingPublishes: one more is refused with PublishQueueFull, nothing queued", async () => {
    const h = harness({ maxPendingPublishes: 2 });
    const ws = connect(h);
    const g = await joined(h);
    ws.serverClose(1006);
    quiet(g.publish(1));
    quiet(g.publish(2));
    const c = g.publish(3);
    await expect(c).rejects.toBeInstanceOf(PublishQueueFull);
    expect(g.pending).toBe(2);
    vi.advanceTimersByTime(100);
    h.last().open();
    h.last().push(welcome({ resumed: true }));
    h.last().push({ type: "view_resume", group: "g", view: 1 });
    expect(h.last().ofType("publish").map((f) => f.payload)).toEqual([1, 2]);
  });

  it("requestTimeoutMs: an unanswered publish rejects with RequestTimeout and is not sent again", async () => {
    const h = harness({ requestTimeoutMs: 1_000 });
    const ws = connect(h);
    const g = await joined(h);
    const p = g.publish("x");
    const check = expect(p).rejects.toBeInstanceOf(RequestTimeout);
    vi.advanceTimersByTime(999);
    expect(await settled(p)).toBe("pending");
    vi.advanceTimersByTime(1);
    await check;
    expect(g.pending).toBe(0);
    ws.serverClose(1006);
    vi.advanceTimersByTime(100);
    h.last().open();
    h.last().push(welcome({ resumed: true }));
    h.last().push({ type: "view_resume", group: "g", view: 1 });
    expect(h.last().ofType("publish")).toEqual([]);
  });

  it("requestTimeoutMs: an unanswered join rejects with RequestTimeout", async () => {
    const h = harness({ requestTimeoutMs: 500 });
    connect(h);
    const p = h.client.group("g").join();
    const check = expect(p).rejects.toBeInstanceOf(RequestTimeout);
    vi.advanceTimersByTime(500);
    await check;
  });

  it.each([
    ["NaN", Number.NaN],
    ["Infinity", { x: Number.POSITIVE_INFINITY }],
    ["undefined", undefined],
    ["a function", () => 1],
    ["a BigInt", { n: 1n }],
  ])("a payload JSON cannot carry (%s) is a TypeError at publish; nothing is sent", async (_what, payload) => {
    const h = harness();
    const ws = connect(h);
    const g = await joined(h);
    const before = ws.sent.length;
    await expect(g.publish(payload)).rejects.toBeInstanceOf(TypeError);
    expect(ws.sent.length).toBe(before);
    expect(g.pending).toBe(0);
  });

  it("publishing to a group not joined is refused", async () => {
    const h = harness();
    connect(h);
    await expect(h.client.group("nope").publish(1)).rejects.toBeInstanceOf(GroupLeftError);
  });
});

describe("groups", () => {
  it("StrictMode: join(), leave(), join() in the same tick sends one join and no leave", async () => {
    const h = harness();
    const ws = connect(h);
    const g = h.client.group("g");
    expect(h.client.group("g")).toBe(g);
    const j1 = g.join();
    const l = g.leave();
    const j2 = g.join();
    expect(await settled(l)).toEqual({ ok: undefined }); // the cancelled leave does not hang
    vi.advanceTimersByTime(10);
    ws.push(install("g"));
    await Promise.all([j1, j2]);
    vi.advanceTimersByTime(10);
    expect(ws.ofType("join")).toHaveLength(1);
    expect(ws.ofType("leave")).toHaveLength(0);
    expect(g.status).toBe("joined");
    expect(g.wanted).toBe(true);
  });

  it("the last leave leaves, once, after the current task", async () => {
    const h = harness();
    const ws = connect(h);
    const g = await joined(h);
    g.join(); // a second user
    await g.leave();
    vi.advanceTimersByTime(10);
    expect(ws.ofType("leave")).toHaveLength(0);
    const l = g.leave();
    expect(ws.ofType("leave")).toHaveLength(0); // not in this task
    vi.advanceTimersByTime(0);
    expect(ws.ofType("leave")).toHaveLength(1);
    ws.push(install("g", { view: 2, members: [], joined: [], left: ["me"], offset: 0 }));
    await l;
    expect(g.status).toBe("left");
  });

  it("re-entrancy: group.leave() from a message handler in the middle of a batch", async () => {
    const h = harness();
    const ws = connect(h);
    const g = await joined(h);
    const seen: number[] = [];
    let leaving: Promise<void> | null = null;
    g.on("message", (m) => {
      seen.push(m.offset);
      if (m.offset === 2) leaving = g.leave();
    });
    expect(() =>
      ws.push({ type: "batch", frames: [deliver("g", 1, "fifo:a", 1), deliver("g", 2, "fifo:a", 2), deliver("g", 3, "fifo:a", 3)] }),
    ).not.toThrow();
    expect(seen).toEqual([1, 2]); // after the leave, the handlers hear nothing more
    vi.advanceTimersByTime(0);
    expect(ws.ofType("leave")).toHaveLength(1);
    ws.push(install("g", { view: 2, members: [], joined: [], left: ["me"], offset: 3 }));
    await leaving;
    expect(g.status).toBe("left");
  });

  it("re-entrancy: client.close() from a message handler in the middle of a batch", async () => {
    const h = harness();
    const errors: unknown[] = [];
    const ws = connect(h);
    const g = await joined(h);
    const other = h.client.group("h").join(); // a join still waiting
    const pub = g.publish("waiting");
    const seen: number[] = [];
    g.on("message", (m) => {
      seen.push(m.offset);
      if (m.offset === 1) h.client.close();
    });
    g.on("view", () => seen.push(-1));
    h.client.on("error", (e) => errors.push(e));
    expect(() =>
      ws.push({
        type: "batch",
        frames: [deliver("g", 1, "fifo:a", 1), deliver("g", 2, "fifo:a", 2), install("g", { view: 2, joined: [], offset: 2 })],
      }),
    ).not.toThrow();
    expect(seen).toEqual([1]);
    expect(h.client.state).toBe("closed");
    expect(ws.closedByClient?.code).toBe(1000);
    await expect(pub).rejects.toBeInstanceOf(ClientClosed);
    await expect(other).rejects.toBeInstanceOf(ClientClosed);
    await expect(g.publish("after")).rejects.toBeInstanceOf(ClientClosed);
    expect(errors).toEqual([]);
    // a closed client stays closed: no reconnect
    vi.advanceTimersByTime(60_000);
    expect(h.sockets).toHaveLength(1);
  });

  it("a throwing message handler does not stop the others or the connection", async () => {
    const reported: unknown[] = [];
    const h = harness({ onListenerError: (e) => reported.push(e) });
    const ws = connect(h);
    const g = await joined(h);
    const seen: number[] = [];
    g.on("message", () => {
      throw new Error("app bug");
    });
    g.on("message", (m) => seen.push(m.offset));
    ws.push({ type: "batch", frames: [deliver("g", 1, "fifo:a", 1), deliver("g", 2, "fifo:a", 2)] });
    expect(seen).toEqual([1, 2]);
    expect(reported).toHaveLength(2);
    expect(h.client.state).toBe("connected");
  });

  it("for await over a group yields its events in order", async () => {
    const h = harness();
    const ws = connect(h);
    const g = await joined(h);
    const it = g[Symbol.asyncIterator]();
    ws.push({ type: "batch", frames: [deliver("g", 1, "total", 1), deliver("g", 2, "total", 2)] });
    const a = await it.next();
    const b = await it.next();
    expect([(a.value as Message).offset, (b.value as Message).offset]).toEqual([1, 2]);
    await it.return?.();
  });
});

describe("while away, and the heartbeat", () => {
  it("a join asked before the first welcome is sent once, after it", async () => {
    const h = harness();
    const g = h.client.group("g");
    const joining = g.join();
    const ws = h.last();
    ws.open();
    expect(ws.ofType("join")).toHaveLength(0);
    ws.push(welcome());
    expect(ws.ofType("join")).toHaveLength(1);
    expect(ws.ofType("join")[0]).not.toHaveProperty("resume");
    ws.push(install("g"));
    await joining;
    expect(g.view).toEqual({ version: 1, members: ["me"], users: new Map([["me", ["me"]]]) });
  });

  it("an ephemeral publish while disconnected is dropped, not queued", async () => {
    const h = harness();
    const ws = connect(h);
    const g = await joined(h);
    ws.serverClose(1006);
    expect(await g.publish({ cursor: 1 }, { ephemeral: true })).toMatchObject({ offset: 0, dropped: true });
    expect(g.pending).toBe(0);
    await expect(g.publish(1, { ephemeral: true, atomic: true })).rejects.toBeInstanceOf(TypeError);
  });

  it("pings a quiet link, times the pong, and drops a link that does not answer", () => {
    const h = harness();
    const ws = connect(h, { heartbeat_ms: 5_000 });
    vi.advanceTimersByTime(5_000);
    const [ping] = ws.ofType("ping");
    expect(ping).toBeDefined();
    vi.advanceTimersByTime(30);
    ws.push({ type: "pong", req: ping!.req as string });
    expect(h.client.rtt).toBe(30);
    // silence from now on: a ping at the first tick 5 s after the pong (t = 11 s), dead 15 s later
    vi.advanceTimersByTime(5_960); // t = 10.99 s
    expect(ws.ofType("ping")).toHaveLength(1);
    vi.advanceTimersByTime(10); // t = 11 s
    expect(ws.ofType("ping")).toHaveLength(2);
    vi.advanceTimersByTime(14_000);
    expect(h.client.state).toBe("connected");
    vi.advanceTimersByTime(1_000);
    expect(h.client.state).toBe("reconnecting");
    expect(ws.closedByClient?.code).toBe(3000);
  });
});

describe("ack and flush_ok leave from the frame handler, before application code", () => {
  it("the ack of an atomic message is on the socket when a listener of the same batch runs", async () => {
    const h = harness();
    const ws = connect(h);
    const g = await joined(h);
    const sentWhenCalled: string[][] = [];
    g.on("message", () => sentWhenCalled.push(ws.sent.map((f) => f.type)));
    ws.push({ type: "batch", frames: [deliver("g", 1, "total", 1, { atomic: true }), deliver("g", 2, "fifo:a", 1)] });
    expect(sentWhenCalled).toHaveLength(1); // the FIFO message; the atomic one waits
    expect(sentWhenCalled[0]).toContain("ack");
    expect(ws.ofType("ack")).toEqual([{ type: "ack", group: "g", offsets: [1] }]);
  });

  it("flush_ok (after the ack) is on the socket when the view-changing listener runs, even if it blocks", async () => {
    const h = harness();
    const ws = connect(h);
    const g = await joined(h);
    let atCall: string[] | null = null;
    g.on("view-changing", () => {
      atCall = ws.sent.map((f) => f.type);
      throw new Error("a handler that fails must not matter");
    });
    h.client.on("error", () => undefined);
    const spy = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      ws.push({
        type: "batch",
        frames: [
          deliver("g", 1, "total", 1, { atomic: true }),
          { type: "view_change", group: "g", proposed: 2, members: ["me"], joining: [], leaving: ["b"], reason: "leave" },
        ],
      });
    } finally {
      spy.mockRestore();
    }
    expect(atCall).not.toBeNull();
    const tail = atCall!.slice(-2);
    expect(tail).toEqual(["ack", "flush_ok"]);
    expect(ws.ofType("flush_ok")).toEqual([{ type: "flush_ok", group: "g", view: 2 }]);
  });

  it("a message listener sees its atomic message only after confirm", async () => {
    const h = harness();
    const ws = connect(h);
    const g = await joined(h);
    const seen: number[] = [];
    g.on("message", (m) => seen.push(m.offset));
    ws.push(deliver("g", 1, "total", 1, { atomic: true }));
    ws.push(deliver("g", 2, "total", 2));
    expect(seen).toEqual([]);
    ws.push({ type: "confirm", group: "g", offsets: [1] });
    expect(seen).toEqual([1, 2]);
  });
});

describe("protocol violations", () => {
  it("a seq gap drops the link (the events before it are delivered) and the client resumes", async () => {
    const h = harness();
    const ws = connect(h);
    const g = await joined(h);
    const seen: number[] = [];
    g.on("message", (m) => seen.push(m.offset));
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      ws.push({ type: "batch", frames: [deliver("g", 1, "fifo:a", 1), deliver("g", 3, "fifo:a", 3)] });
    } finally {
      warn.mockRestore();
    }
    expect(seen).toEqual([1]);
    expect(h.client.state).toBe("reconnecting");
    vi.advanceTimersByTime(100);
    h.last().open();
    h.last().push(welcome({ resumed: true }));
    expect(h.last().ofType("join")[0]).toMatchObject({ resume: { streams: { "fifo:a": 1 } } });
  });
});

describe("issue 32: requests the link drops (C6)", () => {
  it("a leave whose answer the link lost is sent again alone after the reconnect, and resolves", async () => {
    const h = harness();
    const ws = connect(h, { session: "s1" });
    const g = await joined(h);
    const left = g.leave();
    vi.advanceTimersByTime(0); // the last leave goes after the current task
    expect(ws.ofType("leave")).toHaveLength(1); // it left
    ws.serverClose(1006);
    vi.advanceTimersByTime(100);
    const ws2 = h.last();
    expect(ws2).not.toBe(ws);
    ws2.open();
    ws2.push(welcome({ session: "s1", resumed: true }));
    expect(ws2.sent.map((f) => f.type)).toEqual(["hello", "leave"]); // no join: it could let us back in
    ws2.push(install("g", { view: 2, members: [], joined: [], left: ["me"] }));
    expect(await settled(left)).toHaveProperty("ok");
    expect(Object.values(h.client.protocol.requests.waiting()).every((n) => n === 0)).toBe(true);
  });

  it("a token refresh the link cut off is answered by the welcome of the hello that carries it", async () => {
    const h = harness({ token: "t-1" });
    const ws = connect(h);
    const refreshed = h.client.setToken("t-2");
    expect(ws.ofType("refresh")).toEqual([{ type: "refresh", token: "t-2" }]);
    ws.serverClose(1006);
    vi.advanceTimersByTime(100);
    const ws2 = h.last();
    ws2.open();
    expect(ws2.sent[0]).toMatchObject({ type: "hello", token: "t-2" });
    ws2.push(welcome({ resumed: true }));
    expect(await settled(refreshed)).toHaveProperty("ok");
  });
});
