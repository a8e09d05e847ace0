/**
 * Catch-up from the log (catchup.ts, wired into protocol.ts): a `catchup_log` opens a gap that
 * the protocol reads with `history` requests while it keeps what comes behind the gap for the
 * application. The shared cases (tests/fixtures/protocol_cases.json, `gap_*`) cover the page
 * walk; these cover pages with live frames between them, refusals, and resume points meanwhile.
 */

import { describe, expect, it } from "vitest";
import type { Message } from "../src/events.js";
import { GapUnreadable } from "../src/errors.js";
import { ClientProtocol, type Frame, type ProtocolEvent, ProtocolViolation } from "../src/protocol.js";
import { deliver, G } from "./frames.js";

function install(view: number, offset: number, over: Partial<Frame> = {}): Frame {
  return { type: "view_install", group: G, view, members: ["a", "me"], joined: [], left: [], epoch: 7, offset, ...over };
}

function page(req: string, messages: Frame[], o: { installs?: Frame[]; aborted?: number[]; end: number; first?: number; head?: number }): Frame {
  return {
    type: "history_page",
    req,
    group: G,
    epoch: 7,
    messages,
    installs: o.installs ?? [],
    aborted: o.aborted ?? [],
    end: o.end,
    first: o.first ?? 1,
    head: o.head ?? 30,
  };
}

/** What the application is handed, in short: `m<offset>`, `v<view>`, `caught-up`, `reset`... */
function short(events: readonly ProtocolEvent[]): string[] {
  return events.map((e) => (e.type === "message" ? `m${e.offset}` : e.type === "view" ? `v${e.view}` : e.type));
}

/**
 * "me" joined G (view 1, epoch 7, offset 10) and received fifo:a seq 1 (offset 11); the link
 * dropped and the rejoin resumed; the server says the messages after 11 and before 16 are in
 * its log only. The history request (`h2`: `r1` was the rejoin) is drained.
 */
function inGap(): ClientProtocol {
  const p = new ClientProtocol("me");
  p.join("j1", G);
  p.receive(install(1, 10, { joined: ["me"] }));
  p.receive(deliver(11, "fifo:a", 1));
  p.dataToSend();
  p.connectionLost();
  p.rejoinAll();
  expect(p.dataToSend()).toEqual([
    { type: "join", req: "r1", group: G, want_state: false, accept_from: "members", resume: { epoch: 7, offset: 10, view: 1, streams: { "fifo:a": 1 } } },
  ]);
  p.receive({ type: "view_resume", group: G, view: 1 });
  expect(p.receive({ type: "catchup_log", group: G, after: 11, before: 16, view: 1 }).events).toEqual([]);
  expect(p.dataToSend()).toEqual([{ type: "history", req: "h2", group: G, after: 11, before: 16, limit: 1000 }]);
  return p;
}

/** The replay behind the gap (an atomic message confirmed after the next one: m17, then m16), then `catchup_done`: all kept. */
function replayBehind(p: ClientProtocol): void {
  const { events } = p.receive({
    type: "batch",
    frames: [
      deliver(16, "fifo:a", 4, { atomic: true }),
      deliver(17, "total", 2),
      { type: "confirm", group: G, offsets: [16] },
      { type: "catchup_done", group: G, offset: 17, count: 2 },
    ],
  });
  expect(events).toEqual([]); // behind the gap: kept for the application
  expect(p.dataToSend()).toEqual([{ type: "ack", group: G, offsets: [16] }]); // but acted on at once
}

describe("catch-up from the log", () => {
  it("reads a gap in pages while live frames arrive: the history first, then what came behind, caught-up last", () => {
    const p = inGap();
    replayBehind(p);
    // a view change meanwhile: flushed at once, its events kept
    expect(p.receive({ type: "view_change", group: G, proposed: 3, members: ["a", "me"], joining: [], leaving: [], reason: "join" }).events).toEqual([]);
    expect(p.dataToSend()).toEqual([{ type: "flush_ok", group: G, view: 3 }]);

    const first = p.receive(page("h2", [deliver(12, "fifo:a", 2), deliver(13, "total", 1)], { installs: [install(2, 12)], end: 13 }));
    expect(short(first.events)).toEqual(["m12", "v2", "m13"]);
    expect((first.events[0] as Message).replayed).toBe(true);
    expect(p.dataToSend()).toEqual([{ type: "history", req: "h3", group: G, after: 13, before: 16, limit: 1000 }]);
    expect(p.groups.get(G)!.gap).not.toBeNull();

    const second = p.receive(page("h3", [deliver(14, "fifo:a", 3, { view: 2 })], { installs: [install(2, 12)], end: 14, head: 14 }));
    // (the log ends at 14: nothing more before 16; the install repeated is not handed over again)
    expect(short(second.events)).toEqual(["m14", "m17", "m16", "caught-up", "view-changing"]);
    expect(p.dataToSend()).toEqual([]);
    const g = p.groups.get(G)!;
    expect(g.gap).toBeNull();
    expect(g.resumePoint()).toEqual({ epoch: 7, offset: 17, view: 2, streams: { "fifo:a": 4, total: 2 } });
    // what comes next is live, handed over at once
    expect(short(p.receive(install(3, 18)).events)).toEqual(["v3"]);
    expect(short(p.receive(deliver(19, "total", 3, { view: 3 })).events)).toEqual(["m19"]);
  });

  it("caught-up counts every message handed over in the catch-up: the pages' (not an aborted one) and the replay's", () => {
    const p = inGap();
    replayBehind(p); // the server's count: the 2 messages it replayed from memory
    p.receive(deliver(18, "fifo:a", 5)); // live, after the catch-up: not counted
    const pg = page("h2", [deliver(12, "fifo:a", 2), deliver(13, "total", 1, { atomic: true }), deliver(14, "fifo:a", 3)], { aborted: [13], end: 14, head: 14 });
    const { events } = p.receive(pg);
    expect(short(events)).toEqual(["m12", "m14", "m17", "m16", "caught-up", "m18"]);
    expect(events[4]).toEqual({ type: "caught-up", group: G, offset: 17, count: 4 });
  });

  it("asks a refused page again, then gives the gap up as a violation: the host reconnects from its frontier", () => {
    const p = inGap();
    replayBehind(p);
    const refused = (req: string) => p.receive({ type: "error", req, code: "unavailable", message: "busy" });
    expect(refused("h2").events).toEqual([]);
    expect(p.dataToSend()).toEqual([{ type: "history", req: "h3", group: G, after: 11, before: 16, limit: 1000 }]);
    expect(refused("h3").events).toEqual([]);
    expect(p.dataToSend()).toEqual([{ type: "history", req: "h4", group: G, after: 11, before: 16, limit: 1000 }]);
    let thrown: unknown = null;
    try {
      refused("h4");
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toBeInstanceOf(GapUnreadable); // a ProtocolViolation: the client reconnects
    expect(thrown).toBeInstanceOf(ProtocolViolation);
    p.connectionLost(); // ... and resumes from the gap's frontier: nothing handed over, nothing skipped
    const g = p.groups.get(G)!;
    expect(g.gap).toBeNull();
    expect(g.resumePoint()).toEqual({ epoch: 7, offset: 11, view: 1, streams: { "fifo:a": 1 } });
  });

  it("a not_member for a page (a node behind) is asked again too, and a page that does not move on counts as a refusal", () => {
    const p = inGap();
    replayBehind(p);
    p.receive({ type: "error", req: "h2", code: "not_member", message: "" });
    expect(p.dataToSend()).toEqual([{ type: "history", req: "h3", group: G, after: 11, before: 16, limit: 1000 }]);
    p.receive(page("h3", [], { end: 11 })); // no progress: a copy behind bounds it
    expect(p.dataToSend()).toEqual([{ type: "history", req: "h4", group: G, after: 11, before: 16, limit: 1000 }]);
    expect(() => p.receive(page("h4", [], { end: 11 }))).toThrow(GapUnreadable);
  });

  it("resumePoint during a gap is its frontier; savedPoint keeps out only what was held before it", () => {
    const p = new ClientProtocol("me");
    p.join("j1", G);
    p.receive(install(1, 10, { joined: ["me"] }));
    p.receive({ type: "batch", frames: [deliver(11, "fifo:a", 1), deliver(12, "fifo:b", 1, { atomic: true })] });
    p.connectionLost();
    p.rejoinAll();
    const [join] = p.dataToSend();
    expect((join!.resume as Record<string, unknown>).held).toEqual([12]); // undecided: its outcome first
    p.receive({ type: "view_resume", group: G, view: 1 });
    p.receive({ type: "catchup_log", group: G, after: 12, before: 20, view: 1 });
    const g = p.groups.get(G)!;
    const frontier = { epoch: 7, offset: 12, view: 1, streams: { "fifo:a": 1, "fifo:b": 1 } };
    expect(g.resumePoint()).toEqual(frontier);
    // behind the gap: a held atomic message and another message; neither moves the point
    p.receive({ type: "batch", frames: [deliver(20, "fifo:a", 4, { atomic: true }), deliver(21, "fifo:c", 1)] });
    expect(g.resumePoint()).toEqual(frontier);
    // the atomic message held since before the gap is kept out of a saved point
    expect(g.savedPoint()).toEqual({ epoch: 7, offset: 11, view: 1, streams: { "fifo:a": 1 } });
    // it is confirmed: handed over at once (received before the gap), and the point includes it
    expect(short(p.receive({ type: "confirm", group: G, offsets: [12] }).events)).toEqual(["m12"]);
    expect(g.savedPoint()).toEqual(frontier);
    // a page moves the frontier
    p.receive(page("h2", [deliver(13, "fifo:a", 2), deliver(14, "fifo:b", 2)], { installs: [install(2, 13)], end: 14 }));
    expect(g.resumePoint()).toEqual({ epoch: 7, offset: 14, view: 2, streams: { "fifo:a": 2, "fifo:b": 2 } });
    // and a rejoin now presents that frontier (what was kept behind the gap comes again, the
    // atomic message too: it is not named undecided)
    p.connectionLost();
    p.rejoinAll();
    expect(p.dataToSend()).toEqual([
      { type: "join", req: "r4", group: G, want_state: false, accept_from: "members", resume: { epoch: 7, offset: 14, view: 2, streams: { "fifo:a": 2, "fifo:b": 2 } } },
    ]);
  });

  it("a removal during the gap is handed over at once and ends the gap", () => {
    const p = inGap();
    replayBehind(p);
    const { events } = p.receive(install(2, 18, { members: ["a"], left: ["me"] }));
    expect(events).toEqual([{ type: "removed", group: G, view: 2, reason: null }]);
    expect(p.groups.get(G)!.gap).toBeNull();
    expect(p.receive(page("h2", [deliver(12, "fifo:a", 2)], { end: 15 })).events).toEqual([]);
  });

  it("a page that skips a seq, or that does not meet what came behind the gap, is a ProtocolViolation", () => {
    const skip = inGap();
    expect(() => skip.receive(page("h2", [deliver(13, "fifo:a", 3)], { end: 15 }))).toThrow(ProtocolViolation);
    const unmet = inGap();
    replayBehind(unmet); // fifo:a resumes at seq 4 behind the gap
    expect(() => unmet.receive(page("h2", [deliver(12, "fifo:a", 2)], { end: 15 }))).toThrow(/fifo:a: seq 4 after 2/);
  });
});
