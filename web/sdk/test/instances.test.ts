/**
 * Users and instances (docs/protocol.md, "Users and instances"; issue 29) in the browser SDK:
 * the SDK-picked instance kept in the storage (a reload resumes it), the duplicated tab that
 * asks the live tabs over a BroadcastChannel before connecting (a stand-in channel here, whose
 * "tabs" the test kills), the clash policy of close 4002 (a new instance if the SDK picked it,
 * `Replaced` if the application named it), and presence by user (`view.users`, arrivals).
 */

import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Client, ReplacedEvent } from "../src/client.js";
import { Replaced } from "../src/errors.js";
import type { ViewEvent } from "../src/events.js";
import { userOf, usersOf } from "../src/presence.js";
import { deliver, type Harness, fakeClient, install, MapStorage, welcome } from "./fake-socket.js";


/** BroadcastChannel as the tabs of one origin share it: every other open channel of the same
 * name gets each message, a task later (a microtask here: the test's timers are fake). */
class FakeChannel {
  static all: FakeChannel[] = [];
  static posted: unknown[] = [];
  onmessage: ((e: { data: unknown }) => void) | null = null;
  closed = false;
  constructor(readonly name: string) {
    FakeChannel.all.push(this);
  }
  postMessage(data: unknown): void {
    FakeChannel.posted.push(data);
    for (const c of FakeChannel.all) {
      if (c !== this && !c.closed && c.name === this.name) queueMicrotask(() => c.closed || c.onmessage?.({ data: structuredClone(data) }));
    }
  }
  close(): void {
    this.closed = true;
  }
}

let clients: Client[] = [];

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "Date", "performance"] });
  FakeChannel.all = [];
  FakeChannel.posted = [];
  vi.stubGlobal("BroadcastChannel", FakeChannel);
});

afterEach(() => {
  for (const c of clients) c.close();
  clients = [];
  vi.unstubAllGlobals();
  vi.useRealTimers();
});

/** A tab: a client with the SDK's default instance ("auto") on `storage`. */
function tab(storage: MapStorage | null, opts: Parameters<typeof fakeClient>[0] = {}): Harness {
  const h = fakeClient({ storage, instance: undefined, ...opts });
  clients.push(h.client);
  return h;
}

/** Open the tab's current socket and welcome it as the server would: the member is user#instance. */
function connect(h: Harness, session = "s1"): void {
  const ws = h.last();
  ws.open();
  const hello = ws.sent[0]!;
  const instance = (hello.instance as string | undefined) ?? null;
  ws.push(welcome({ session, member: instance === null ? "me" : `me#${instance}`, user: "me", instance }));
  expect(h.client.state).toBe("connected");
}

describe("the instance the SDK picks", () => {
  it("is random per client, said in the hello, and the welcome's user and instance are the client's", () => {
    const a = tab(null);
    const b = tab(null);
    const ia = a.client.instance!;
    expect(ia).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
    expect(b.client.instance).not.toBe(ia);
    expect(a.client.member).toBe(`me#${ia}`);
    a.last().open();
    expect(a.last().sent[0]).toMatchObject({ type: "hello", member: "me", instance: ia });
    connect(a);
    expect([a.client.user, a.client.instance, a.client.member]).toEqual(["me", ia, `me#${ia}`]);
  });

  it("is saved at the first welcome and a reload resumes the same instance and session", async () => {
    const storage = new MapStorage();
    const page1 = tab(storage);
    connect(page1, "sess-A");
    const instance = page1.client.instance;
    // saved at once (no pagehide needed): a tab duplicated now must see it
    expect(storage.saved()).toMatchObject({ member: "me", instance, session: "sess-A" });

    // The reload: the old page is gone (its channel with it), the new one starts from storage.
    for (const c of FakeChannel.all) c.close();
    const page2 = tab(storage);
    expect(page2.client.instance).toBe(instance);
    expect(page2.sockets).toHaveLength(0); // it asks the other tabs first...
    await vi.advanceTimersByTimeAsync(100); // ...and nobody answers within the deadline
    expect(page2.sockets).toHaveLength(1);
    page2.last().open();
    expect(page2.last().sent[0]).toMatchObject({ type: "hello", member: "me", instance, resume_session: "sess-A" });
  });

  it("an instance the application names is kept as is, and never asked about", () => {
    const storage = new MapStorage();
    const h = tab(storage, { instance: "phone" });
    expect(h.sockets).toHaveLength(1); // no question to the other tabs: the app decides
    connect(h);
    expect(h.client.member).toBe("me#phone");
    expect(FakeChannel.all).toHaveLength(0);
  });
});

describe("a duplicated tab", () => {
  it("sees the original over the channel, takes a new instance before connecting, drops the copied session and keeps the points", async () => {
    const page = globalThis as { window?: EventTarget; document?: EventTarget };
    page.window = new EventTarget();
    page.document = Object.assign(new EventTarget(), { visibilityState: "visible" });
    try {
      const storage = new MapStorage();
      const first = tab(storage, { lifecycle: true });
      connect(first, "sess-A");
      const g1 = first.client.group("g");
      const j1 = g1.join();
      const me1 = first.client.member;
      first.last().push(install("g", { members: [me1], joined: [me1], epoch: 3, offset: 4 }));
      await j1;
      first.last().push(deliver("g", 5, "fifo:b", 1));
      page.window.dispatchEvent(new Event("pagehide")); // saves the point, as a real tab does
      expect(storage.saved().groups).toHaveProperty("g");

      const copy = tab(new MapStorage(storage)); // the duplicate: a copy of sessionStorage
      expect(copy.client.instance).toBe(first.client.instance); // as copied, until it asks
      await vi.advanceTimersByTimeAsync(0); // the original answers at once (no deadline waited)
      expect(copy.sockets).toHaveLength(1);
      expect(copy.client.instance).not.toBe(first.client.instance);
      copy.last().open();
      const hello = copy.last().sent[0]!;
      expect(hello).toMatchObject({ type: "hello", member: "me", instance: copy.client.instance });
      expect(hello).not.toHaveProperty("resume_session"); // the copied session is the original's
      copy.last().push(welcome({ session: "sess-B", member: copy.client.member, user: "me", instance: copy.client.instance }));
      // the copied resume point: a new member that catches up from where the original was
      copy.client.group("g").join().catch(() => undefined); // (never answered here)
      expect(copy.last().ofType("join")[0]).toMatchObject({ group: "g", resume: { epoch: 3, offset: 4, streams: { "fifo:b": 1 } } });
      // the original was never disturbed
      expect(first.client.state).toBe("connected");
      expect(first.sockets).toHaveLength(1);
      expect(FakeChannel.posted).toEqual([{ q: first.client.instance }, { h: first.client.instance }]);
    } finally {
      delete page.window;
      delete page.document;
    }
  });

  it("waits at most tabCheckMs for an answer", async () => {
    const saved = new MapStorage();
    const again = tab(saved);
    connect(again, "sess-A");
    for (const c of FakeChannel.all) c.close(); // that tab is gone
    const later = tab(new MapStorage(saved), { tabCheckMs: 40 });
    await vi.advanceTimersByTimeAsync(39);
    expect(later.sockets).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(later.sockets).toHaveLength(1);
    expect(later.client.instance).toBe(again.client.instance); // nobody held it: a reload
  });

  it("without BroadcastChannel (Node, old browsers) connects at once: the server's clash rule still holds", () => {
    vi.stubGlobal("BroadcastChannel", undefined);
    const storage = new MapStorage();
    const first = tab(storage);
    connect(first, "sess-A");
    const copy = tab(new MapStorage(storage));
    expect(copy.sockets).toHaveLength(1);
    expect(copy.client.instance).toBe(first.client.instance);
  });
});

describe("a clash: close 4002", () => {
  it("an instance the SDK picked: a new instance, a fresh session, the groups rejoined from their points, the app told, unanswered publishes failed", async () => {
    const h = tab(null);
    const seen: ReplacedEvent[] = [];
    h.client.on("replaced", (e) => seen.push(e));
    connect(h);
    const old = h.client.member;
    const g = h.client.group("g");
    const messages: number[] = [];
    g.on("message", (m) => messages.push(m.offset));
    const p = g.join();
    h.last().push(install("g", { members: ["b", old], joined: [old], epoch: 2, offset: 7 }));
    await p;
    h.last().push(deliver("g", 8, "fifo:b", 1));
    const pub = g.publish({ n: 1 }).then(() => null, (e: unknown) => e);

    h.last().serverClose(4002, "replaced");
    const fresh = h.client.member;
    expect(fresh).not.toBe(old);
    expect(userOf(fresh)).toBe("me");
    expect(seen).toEqual([{ old, new: fresh }]);
    expect(h.client.state).toBe("reconnecting");
    expect(h.client.failure).toBeNull();

    await vi.advanceTimersByTimeAsync(10_000);
    expect(h.sockets).toHaveLength(2);
    const ws = h.last();
    ws.open();
    expect(ws.sent[0]).toEqual({ type: "hello", protocol: 1, member: "me", instance: h.client.instance });
    ws.push(welcome({ session: "s2", member: fresh, user: "me", instance: h.client.instance }));
    expect(ws.ofType("join")[0]).toMatchObject({ group: "g", resume: { epoch: 2, offset: 7, streams: { "fifo:b": 1 } } });
    // joined as the new member; the old one is gone from the view (one change for the others)
    ws.push(install("g", { view: 3, members: ["b", fresh], joined: [fresh], left: [old], epoch: 2, offset: 9 }));
    ws.push(deliver("g", 9, "fifo:b", 2));
    expect(g.view?.members).toEqual(["b", fresh]);
    expect(messages).toEqual([8, 9]);
    // the publish waiting may be stored under the old instance: it fails (outcome unknown)
    // rather than go out again under the new one, where its id is new (it could be delivered twice)
    expect(ws.ofType("publish")).toHaveLength(0);
    expect(await pub).toMatchObject({ code: "replaced" });
  });

  it("an instance the application named: closed with Replaced, the app told, no reconnect into the clash", async () => {
    const h = tab(null, { instance: "worker-3" });
    const seen: ReplacedEvent[] = [];
    h.client.on("replaced", (e) => seen.push(e));
    connect(h);
    expect(h.client.member).toBe("me#worker-3");
    h.last().serverClose(4002, "replaced");
    expect(seen).toEqual([{ old: "me#worker-3", new: null }]);
    expect(h.client.state).toBe("closed");
    expect(h.client.failure).toBeInstanceOf(Replaced);
    expect(h.client.failure).toMatchObject({ code: "replaced", old: "me#worker-3" });
    await expect(h.client.ready()).rejects.toBeInstanceOf(Replaced);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(h.sockets).toHaveLength(1);
  });
});

describe("presence by user", () => {
  it("view.users groups instances by user; a user arrives with its first instance and leaves with its last", async () => {
    const h = tab(null, { instance: null });
    connect(h);
    const g = h.client.group("g");
    const views: Pick<ViewEvent, "usersJoined" | "usersLeft">[] = [];
    g.on("view", (v) => views.push({ usersJoined: v.usersJoined, usersLeft: v.usersLeft }));
    const p = g.join();
    const ws = h.last();
    ws.push(install("g", { view: 1, members: ["me", "ana#t1"], joined: ["me"] }));
    await p;
    ws.push(install("g", { view: 2, members: ["me", "ana#t1", "ana#t2"], joined: ["ana#t2"] })); // a second tab
    expect(g.view?.users).toEqual(new Map([["me", ["me"]], ["ana", ["ana#t1", "ana#t2"]]]));
    ws.push(install("g", { view: 3, members: ["me", "ana#t2", "bo#x"], joined: ["bo#x"], left: ["ana#t1"] }));
    ws.push(install("g", { view: 4, members: ["me", "bo#y"], joined: ["bo#y"], left: ["ana#t2", "bo#x"] }));
    expect(views).toEqual([
      { usersJoined: ["me"], usersLeft: [] }, // ana was here before this client
      { usersJoined: [], usersLeft: [] }, // ana's second tab is no arrival
      { usersJoined: ["bo"], usersLeft: [] }, // closing one of two tabs is no departure
      { usersJoined: [], usersLeft: ["ana"] }, // bo's instance replaced in one view: bo stays
    ]);
    expect(g.view?.users).toEqual(new Map([["me", ["me"]], ["bo", ["bo#y"]]]));
  });

  it("userOf and usersOf", () => {
    expect(userOf("ana#t1")).toBe("ana");
    expect(userOf("ana")).toBe("ana");
    expect(userOf("ana#t#1")).toBe("ana");
    expect([...usersOf(["b#1", "a", "b#2"])]).toEqual([["b", ["b#1", "b#2"]], ["a", ["a"]]]);
  });
});

describe("with Node's own BroadcastChannel", () => {
  it("a duplicate is detected through the real channel (and the channels do not keep Node up)", async () => {
    vi.unstubAllGlobals();
    vi.useRealTimers();
    expect(typeof globalThis.BroadcastChannel).toBe("function");
    const storage = new MapStorage();
    const first = tab(storage);
    connect(first, "sess-A");
    const copy = tab(new MapStorage(storage), { tabCheckMs: 2_000 });
    const t0 = Date.now();
    await vi.waitFor(() => expect(copy.sockets).toHaveLength(1), { timeout: 2_000, interval: 5 });
    expect(Date.now() - t0).toBeLessThan(1_000); // answered, not timed out
    expect(copy.client.instance).not.toBe(first.client.instance);
  });
});
