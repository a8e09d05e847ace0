/**
 * A page reload: `pagehide` saves the session, each group's resume point and its snapshot in
 * the storage; the next page (a new client on the same storage) restores the snapshot and
 * resumes from the point, so it gets only what was missed. The page is faked with two
 * EventTargets standing for `window` and `document`.
 */

import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Client } from "../src/client.js";
import { deliver, fakeClient, install, MapStorage, welcome } from "./fake-socket.js";


const page = globalThis as { window?: EventTarget; document?: EventTarget & { visibilityState: string } };
let clients: Client[] = [];

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "Date", "performance"] });
  page.window = new EventTarget();
  page.document = Object.assign(new EventTarget(), { visibilityState: "visible" });
});

afterEach(() => {
  for (const c of clients) c.close();
  clients = [];
  delete page.window;
  delete page.document;
  vi.useRealTimers();
});

describe("reload", () => {
  it("pagehide saves; the next page restores the snapshot and resumes from the saved point", async () => {
    const storage = new MapStorage();
    const enc = (s: string): Uint8Array => new TextEncoder().encode(s);

    // -- the first page ------------------------------------------------------------------------
    let applied1: number[] = [];
    const p1 = fakeClient({ storage, lifecycle: true });
    clients.push(p1.client);
    const ws1 = p1.last();
    ws1.open();
    ws1.push(welcome({ session: "sess-A" }));
    const g1 = p1.client.group("g", {
      state: { snapshot: () => enc(JSON.stringify(applied1)), restore: () => undefined },
    });
    g1.on("message", (m) => applied1.push(m.offset));
    const j1 = g1.join();
    ws1.push(install("g", { epoch: 5, offset: 0 }));
    await j1;
    ws1.push({
      type: "batch",
      frames: [
        deliver("g", 1, "fifo:a", 1),
        deliver("g", 2, "fifo:a", 2),
        deliver("g", 3, "total", 1),
        deliver("g", 4, "fifo:a", 3, { atomic: true }), // held: no outcome yet
        deliver("g", 5, "fifo:a", 4),
      ],
    });
    expect(applied1).toEqual([1, 2, 3]);
    page.window!.dispatchEvent(new Event("pagehide"));
    const saved = JSON.parse([...storage.map.values()][0]!) as {
      member: string;
      session: string;
      groups: Record<string, { point: unknown; snapshot?: string }>;
    };
    expect(saved.member).toBe("me");
    expect(saved.session).toBe("sess-A");
    // the point stops before the held atomic message and what waits behind it
    expect(saved.groups.g!.point).toEqual({ epoch: 5, offset: 0, view: 1, streams: { "fifo:a": 2, total: 1 } });
    applied1 = []; // the page goes away

    // -- the reloaded page -----------------------------------------------------------------------
    const log: string[] = [];
    const p2 = fakeClient({ storage, lifecycle: true });
    clients.push(p2.client);
    const ws2 = p2.last();
    ws2.open();
    expect(ws2.sent[0]).toMatchObject({ type: "hello", member: "me", resume_session: "sess-A" });
    ws2.push(welcome({ session: "sess-A", resumed: true }));
    const g2 = p2.client.group("g", {
      state: {
        snapshot: () => new Uint8Array(),
        restore: (b) => log.push(`restore ${new TextDecoder().decode(b)}`),
      },
    });
    g2.on("message", (m) => log.push(`message ${m.offset}${m.replayed ? " replayed" : ""}`));
    g2.on("caught-up", (c) => log.push(`caught-up ${c.offset}`));
    const j2 = g2.join();
    expect(log).toEqual(["restore [1,2,3]"]);
    const [join] = ws2.ofType("join");
    expect(join).toMatchObject({ group: "g", resume: { epoch: 5, offset: 0, view: 1, streams: { "fifo:a": 2, total: 1 } } });
    ws2.push({ type: "view_resume", group: "g", view: 1 });
    await j2;
    expect(g2.status).toBe("catching-up");
    // the server replays what the point lacks (and, harmlessly, something it covers)
    ws2.push({
      type: "batch",
      frames: [
        deliver("g", 2, "fifo:a", 2),
        deliver("g", 4, "fifo:a", 3, { atomic: true }),
        deliver("g", 5, "fifo:a", 4),
        { type: "catchup_done", group: "g", offset: 5, count: 2 },
      ],
    });
    expect(ws2.ofType("ack")).toEqual([{ type: "ack", group: "g", offsets: [4] }]);
    ws2.push({ type: "confirm", group: "g", offsets: [4] });
    expect(log).toEqual(["restore [1,2,3]", "caught-up 5", "message 4 replayed", "message 5 replayed"]);
    expect(g2.status).toBe("joined");
  });

  it("close() forgets the saved session", async () => {
    const storage = new MapStorage();
    const p = fakeClient({ storage, lifecycle: true });
    clients.push(p.client);
    p.last().open();
    p.last().push(welcome());
    page.window!.dispatchEvent(new Event("pagehide"));
    expect(storage.map.size).toBe(1);
    p.client.close();
    expect(storage.map.size).toBe(0);
  });
});
