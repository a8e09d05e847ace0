/**
 * The sans-I/O protocol (protocol.ts): server frames go in as objects, events, replies and the
 * frames to send come out. No sockets, no timers.
 */

import { describe, expect, it } from "vitest";
import type { Message } from "../src/events.js";
import { ClientProtocol, type Frame, type ProtocolEvent, ProtocolViolation } from "../src/protocol.js";
import { deliver, G } from "./frames.js";

function install(over: Partial<Frame> = {}): Frame {
  return {
    type: "view_install",
    group: G,
    view: 1,
    members: ["a", "me"],
    joined: ["me"],
    left: [],
    epoch: 7,
    offset: 10,
    ...over,
  };
}

function batch(...frames: Frame[]): Frame {
  return { type: "batch", frames };
}

/** A protocol whose member "me" has joined G (view 1, epoch 7, offset 10); outbox emptied. */
function joined(opts: { wantState?: boolean } = {}): ClientProtocol {
  const p = new ClientProtocol("me");
  p.join("j1", G, opts);
  p.dataToSend();
  p.receive(install());
  p.dataToSend();
  return p;
}

function offsets(events: readonly ProtocolEvent[]): number[] {
  return events.filter((e): e is Message => e.type === "message").map((m) => m.offset);
}

function types(events: readonly ProtocolEvent[]): string[] {
  return events.map((e) => e.type);
}

function violation(fn: () => unknown): ProtocolViolation {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(ProtocolViolation);
    return e as ProtocolViolation;
  }
  throw new Error("expected a ProtocolViolation, nothing was thrown");
}

describe("join, install, deliver", () => {
  it("sends a join, installs the view, hands over messages in order", () => {
    const p = new ClientProtocol("me");
    p.join("j1", G, { wantState: false, acceptFrom: "any" });
    expect(p.dataToSend()).toEqual([{ type: "join", req: "j1", group: G, want_state: false, accept_from: "any" }]);
    expect(p.groups.get(G)!.canSend).toBe(false);

    const r1 = p.receive(install());
    expect(r1.events).toEqual([
      {
        type: "view",
        group: G,
        view: 1,
        members: ["a", "me"],
        joined: ["me"],
        left: [],
        offset: 10,
        transitional: ["a"],
        users: new Map([["a", ["a"]], ["me", ["me"]]]),
        usersJoined: ["me"],
        usersLeft: [],
      },
    ]);
    const g = p.groups.get(G)!;
    expect(g.canSend).toBe(true);
    expect(g.epoch).toBe(7);
    expect(g.base).toBe(10);

    const r2 = p.receive(deliver(11, "fifo:a", 1));
    expect(r2.events).toEqual([
      {
        type: "message",
        group: G,
        offset: 11,
        stream: "fifo:a",
        seq: 1,
        sender: "a",
        view: 1,
        atomic: false,
        payload: { n: 11 },
        ts: 1_700_000_000,
        replayed: false,
      },
    ]);
    expect(p.dataToSend()).toEqual([]); // a FIFO message needs no ack
    expect(p.groups.get(G)!.top).toBe(11);
  });

  it("ignores frames of a group it never joined", () => {
    const p = joined();
    expect(p.receive(deliver(11, "fifo:a", 1, { group: "other" })).events).toEqual([]);
  });
});

describe("view change", () => {
  it("answers flush_ok after the acks of the atomic messages it holds", () => {
    const p = joined();
    const { events } = p.receive(
      batch(
        deliver(11, "fifo:a", 1, { atomic: true }),
        deliver(12, "total", 1, { atomic: true }),
        { type: "view_change", group: G, proposed: 2, members: ["a", "me", "b"], joining: ["b"], leaving: [], reason: "join" },
      ),
    );
    expect(types(events)).toEqual(["view-changing"]);
    const out = p.dataToSend();
    expect(out.map((f) => f.type)).toEqual(["ack", "flush_ok"]);
    expect(out[0]).toEqual({ type: "ack", group: G, offsets: [11, 12] });
    expect(out[1]).toEqual({ type: "flush_ok", group: G, view: 2 });
    expect(p.groups.get(G)!.canSend).toBe(false);
    expect(p.groups.get(G)!.phase).toBe("flushing");

    // A second view_change with the same proposal is answered again; nothing is acked twice.
    p.receive({ type: "view_change", group: G, proposed: 2, members: ["a", "me"], joining: [], leaving: [], reason: "join,suspect" });
    expect(p.dataToSend()).toEqual([{ type: "flush_ok", group: G, view: 2 }]);

    const r = p.receive(install({ view: 2, members: ["a", "me"], joined: [], offset: 12 }));
    expect(types(r.events)).toEqual(["view"]);
    expect(p.groups.get(G)!.canSend).toBe(true);
    expect(p.groups.get(G)!.base).toBe(12); // a member of the old view: everything up to it arrived
  });

  it("acks an atomic arriving during the flush before anything queued after it", () => {
    const p = joined();
    p.receive({ type: "view_change", group: G, proposed: 2, members: ["a", "me"], joining: [], leaving: [], reason: "suspect" });
    p.receive(deliver(11, "fifo:a", 1, { atomic: true }));
    p.leave("l1", G);
    const out = p.dataToSend();
    expect(out.map((f) => f.type)).toEqual(["ack", "flush_ok", "leave"]);
  });

  it("view_resume cancels the change", () => {
    const p = joined();
    p.receive({ type: "view_change", group: G, proposed: 2, members: ["a", "me"], joining: [], leaving: [], reason: "suspect" });
    expect(p.groups.get(G)!.canSend).toBe(false);
    const { events } = p.receive({ type: "view_resume", group: G, view: 1 });
    expect(events).toEqual([{ type: "view-resumed", group: G, view: 1 }]);
    expect(p.groups.get(G)!.canSend).toBe(true);
  });
});

describe("atomic holdback (G5)", () => {
  function held(): ClientProtocol {
    const p = joined();
    const { events } = p.receive(
      batch(
        deliver(11, "fifo:a", 1, { atomic: true }),
        deliver(12, "fifo:a", 2),
        deliver(13, "fifo:b", 1),
        deliver(14, "fifo:a", 3),
      ),
    );
    // The atomic message and the FIFO messages behind it wait; stream fifo:b is not blocked.
    expect(offsets(events)).toEqual([13]);
    expect(p.groups.get(G)!.held).toBe(3);
    expect(p.dataToSend()).toEqual([{ type: "ack", group: G, offsets: [11] }]);
    return p;
  }

  it("releases the atomic message and what waits behind it on confirm, in stream order", () => {
    const p = held();
    expect(offsets(p.receive(deliver(15, "fifo:b", 2)).events)).toEqual([15]);
    const { events } = p.receive({ type: "confirm", group: G, offsets: [11] });
    expect(offsets(events)).toEqual([11, 12, 14]);
    expect(p.groups.get(G)!.held).toBe(0);
    // later messages of the stream flow again
    expect(offsets(p.receive(deliver(16, "fifo:a", 4)).events)).toEqual([16]);
  });

  it("drops the aborted message and releases the FIFO messages behind it", () => {
    const p = held();
    const { events } = p.receive({ type: "abort", group: G, offsets: [11], reason: "ack_timeout" });
    expect(offsets(events)).toEqual([12, 14]);
    expect(p.groups.get(G)!.held).toBe(0);
    expect(p.groups.get(G)!.atomic.size).toBe(0);
  });

  it("a second atomic behind the first waits for its own outcome", () => {
    const p = joined();
    p.receive(batch(deliver(11, "total", 1, { atomic: true }), deliver(12, "total", 2, { atomic: true }), deliver(13, "total", 3)));
    expect(p.dataToSend()).toEqual([{ type: "ack", group: G, offsets: [11, 12] }]);
    // the outcome of the later one first: still nothing, the stream waits for 11
    expect(offsets(p.receive({ type: "confirm", group: G, offsets: [12] }).events)).toEqual([]);
    expect(offsets(p.receive({ type: "confirm", group: G, offsets: [11] }).events)).toEqual([11, 12, 13]);
  });

  it("a confirm for an offset it does not hold changes nothing", () => {
    const p = held();
    expect(p.receive({ type: "confirm", group: G, offsets: [99] }).events).toEqual([]);
    expect(p.groups.get(G)!.held).toBe(3);
  });
});

describe("duplicates and gaps", () => {
  it("drops a seq already received and counts it", () => {
    const p = joined();
    p.receive(batch(deliver(11, "fifo:a", 1), deliver(12, "fifo:a", 2)));
    const { events } = p.receive(batch(deliver(11, "fifo:a", 1), deliver(12, "fifo:a", 2), deliver(13, "fifo:a", 3)));
    expect(offsets(events)).toEqual([13]);
    expect(p.groups.get(G)!.duplicates).toBe(2);
  });

  it("a seq gap throws ProtocolViolation carrying the events of the earlier frames of the batch", () => {
    const p = joined();
    const v = violation(() =>
      p.receive(batch(deliver(11, "fifo:a", 1), deliver(12, "fifo:b", 1), deliver(13, "fifo:a", 3), deliver(14, "fifo:b", 2))),
    );
    expect(v.message).toMatch(/seq 3 after 1/);
    expect(offsets(v.events)).toEqual([11, 12]);
    // nothing beyond the bad frame was counted: the resume point is exact
    expect(p.groups.get(G)!.resumePoint().streams).toEqual({ "fifo:a": 1, "fifo:b": 1 });
    expect(offsets(p.receive(deliver(13, "fifo:a", 2)).events)).toEqual([13]);
  });

  it("carries the replies of earlier frames too", () => {
    const p = joined();
    const v = violation(() =>
      p.receive(batch({ type: "published", req: "p1", id: "x", offset: 11 }, { type: "nonsense" } as Frame)),
    );
    expect(v.replies).toEqual([{ type: "published", req: "p1", id: "x", offset: 11 }]);
    expect(v.message).toMatch(/unknown frame/);
  });
});

describe("batches and malformed frames", () => {
  it("unpacks nested batches in order", () => {
    const p = joined();
    const { events } = p.receive(
      batch(deliver(11, "fifo:a", 1), batch(deliver(12, "fifo:a", 2), batch(deliver(13, "total", 1))), deliver(14, "fifo:a", 3)),
    );
    expect(offsets(events)).toEqual([11, 12, 13, 14]);
  });

  it.each([
    ["a deliver whose offset is not an integer", deliver(11, "fifo:a", 1, { offset: "11" })],
    ["a deliver without a stream", deliver(11, "fifo:a", 1, { stream: undefined })],
    ["a deliver whose seq is fractional", deliver(11, "fifo:a", 1, { seq: 1.5 })],
    ["a view_install whose members are not strings", install({ members: ["a", 3] })],
    ["an unknown frame type", { type: "surprise" }],
    ["a batch without frames", { type: "batch" }],
    ["a batch holding a non-object", { type: "batch", frames: [1] }],
    ["a confirm without offsets", { type: "confirm", group: G }],
  ])("%s is a ProtocolViolation", (_what, frame) => {
    const p = joined();
    violation(() => p.receive(frame as Frame));
    // nothing counted: the next good message of that stream is seq 1
    expect(offsets(p.receive(deliver(11, "fifo:a", 1)).events)).toEqual([11]);
  });
});

describe("resume points", () => {
  it("resumePoint is the install offset with the last seq per stream; installs move it up", () => {
    const p = joined();
    p.receive(batch(deliver(11, "fifo:a", 1), deliver(12, "total", 1), deliver(13, "fifo:a", 2)));
    expect(p.groups.get(G)!.resumePoint()).toEqual({ epoch: 7, offset: 10, view: 1, streams: { "fifo:a": 2, total: 1 } });
    p.receive(install({ view: 2, joined: [], offset: 13 }));
    expect(p.groups.get(G)!.resumePoint()).toMatchObject({ offset: 13, view: 2 });
  });

  it("a rejoin with resume presents the point, and the replay is marked and deduplicated", () => {
    const p = joined();
    p.receive(batch(deliver(11, "fifo:a", 1), deliver(12, "fifo:a", 2)));
    p.join("r2", G, { resume: true });
    const [frame] = p.dataToSend();
    expect(frame).toMatchObject({ type: "join", req: "r2", group: G, resume: { epoch: 7, offset: 10, view: 1, streams: { "fifo:a": 2 } } });
    expect(types(p.receive({ type: "view_resume", group: G, view: 1 }).events)).toEqual(["view-resumed"]);
    const { events } = p.receive(batch(deliver(12, "fifo:a", 2), deliver(13, "fifo:a", 3)));
    expect(offsets(events)).toEqual([13]);
    expect((events[0] as Message).replayed).toBe(true);
    expect(p.groups.get(G)!.duplicates).toBe(1);
    const done = p.receive({ type: "catchup_done", group: G, offset: 13, count: 1 });
    expect(done.events).toEqual([{ type: "caught-up", group: G, offset: 13, count: 1 }]);
    expect(p.groups.get(G)!.base).toBe(13);
    expect((p.receive(deliver(14, "fifo:a", 4)).events[0] as Message).replayed).toBe(false);
  });

  it("a resume re-acks the atomic messages still held", () => {
    const p = joined();
    p.receive(deliver(11, "fifo:a", 1, { atomic: true }));
    p.dataToSend();
    p.join("r2", G, { resume: true });
    p.dataToSend();
    p.receive({ type: "view_resume", group: G, view: 1 });
    expect(p.dataToSend()).toEqual([{ type: "ack", group: G, offsets: [11] }]);
  });

  it("savedPoint stops before a held atomic message and what waits behind it", () => {
    const p = joined();
    p.join("r2", G, { resume: true });
    p.dataToSend();
    p.receive({ type: "view_resume", group: G, view: 1 });
    p.receive(
      batch(
        deliver(11, "fifo:a", 1),
        deliver(12, "fifo:a", 2, { atomic: true }),
        deliver(13, "fifo:a", 3),
        deliver(14, "total", 1),
        { type: "catchup_done", group: G, offset: 14, count: 4 },
      ),
    );
    const g = p.groups.get(G)!;
    expect(g.resumePoint()).toEqual({ epoch: 7, offset: 14, view: 1, streams: { "fifo:a": 3, total: 1 } });
    expect(g.savedPoint()).toEqual({ epoch: 7, offset: 11, view: 1, streams: { "fifo:a": 1, total: 1 } });
    p.receive({ type: "confirm", group: G, offsets: [12] });
    expect(g.savedPoint()).toEqual(g.resumePoint());
  });

  it("restorePoint: a join from a saved point presents it and drops what it covers", () => {
    const point = { epoch: 7, offset: 20, view: 3, streams: { "fifo:a": 5 } };
    const p = new ClientProtocol("me");
    p.join("j1", G, { resumeFrom: point });
    const [frame] = p.dataToSend();
    expect(frame).toMatchObject({ type: "join", resume: point });
    expect(p.groups.get(G)!.resumePoint()).toEqual(point);
    p.receive({ type: "view_resume", group: G, view: 3 });
    const { events } = p.receive(batch(deliver(18, "fifo:a", 5), deliver(21, "fifo:a", 6)));
    expect(offsets(events)).toEqual([21]);
    expect(p.groups.get(G)!.duplicates).toBe(1);
  });

  it("joinAfresh: a reset event precedes the next view, and the old streams are forgotten", () => {
    const p = joined();
    p.receive(batch(deliver(11, "fifo:a", 1), deliver(12, "fifo:a", 2, { atomic: true })));
    p.join("r2", G, { resume: true });
    p.dataToSend();
    p.joinAfresh("r3", G, "offset_unavailable");
    const out = p.dataToSend();
    expect(out).toEqual([{ type: "join", req: "r3", group: G, want_state: false, accept_from: "members" }]);
    const { events } = p.receive(install({ view: 1, members: ["me"], epoch: 8, offset: 0 }));
    expect(events).toEqual([
      { type: "reset", group: G, reason: "offset_unavailable", oldEpoch: 7, oldOffset: 12, newEpoch: 8, newOffset: 0, lost: null },
      { type: "view", group: G, view: 1, members: ["me"], joined: ["me"], left: [], offset: 0, transitional: [], users: new Map([["me", ["me"]]]), usersJoined: ["me"], usersLeft: [] },
    ]);
    const g = p.groups.get(G)!;
    expect(g.held).toBe(0);
    // the new log's seq 1 is new, not a duplicate of the old stream's
    expect(offsets(p.receive(deliver(1, "fifo:a", 1)).events)).toEqual([1]);
    // only one reset
    p.receive(install({ view: 2, joined: [], members: ["me", "b"], epoch: 8, offset: 1 }));
    expect(g.refusal).toBeNull();
  });
});

describe("state transfer (wantState)", () => {
  function waiting(): ClientProtocol {
    const p = new ClientProtocol("me");
    p.join("j1", G, { wantState: true });
    expect(p.dataToSend()[0]).toMatchObject({ want_state: true });
    const { events } = p.receive(install());
    expect(types(events)).toEqual(["view"]);
    return p;
  }

  function chunks(transfer: string, streams: Record<string, number>, offset = 10): Frame[] {
    return [
      { type: "state_chunk", group: G, transfer, index: 0, last: false, data: "AAAA" },
      { type: "state_chunk", group: G, transfer, index: 1, last: true, data: "BBBB", sha256: "ab", streams, offset },
    ];
  }

  it("buffers events after the install until stateDecoded; the snapshot's streams filter them", () => {
    const p = waiting();
    const r1 = p.receive(batch(deliver(11, "fifo:a", 1), deliver(12, "fifo:a", 2), deliver(13, "total", 1)));
    expect(r1.events).toEqual([]);
    const r2 = p.receive(batch(...chunks("t1", { "fifo:a": 1 })));
    expect(r2.events).toEqual([{ type: "snapshot-ready", group: G, transfer: "t1", chunks: ["AAAA", "BBBB"], sha256: "ab" }]);
    // still buffered until decoded
    expect(p.receive(deliver(14, "fifo:a", 3)).events).toEqual([]);
    const snapshot = new Uint8Array([1, 2, 3]);
    const events = p.stateDecoded(G, "t1", snapshot, null);
    expect(events[0]).toEqual({ type: "state-received", group: G, offset: 10, snapshot, reason: null, streams: { "fifo:a": 1 } });
    expect(offsets(events.slice(1))).toEqual([12, 13, 14]);
    // then live
    expect(offsets(p.receive(deliver(15, "total", 2)).events)).toEqual([15]);
    // a second stateDecoded is overtaken: nothing
    expect(p.stateDecoded(G, "t1", snapshot, null)).toEqual([]);
  });

  it("orders a checkpoint's completion by offset and puts it before later events", () => {
    const p = waiting();
    // Completion (offset <= the install's 10) arrives out of order, mixed with live messages.
    p.receive(batch(deliver(9, "total", 3), deliver(11, "fifo:a", 1), deliver(6, "total", 2), deliver(5, "total", 1)));
    p.receive(batch(deliver(12, "total", 4)));
    p.receive(batch(...chunks("t1", { total: 1 })));
    const events = p.stateDecoded(G, "t1", new Uint8Array([9]), null);
    expect(types(events)[0]).toBe("state-received");
    // total seq 1 is in the snapshot; 6 and 9 complete it in offset order; then live 11 and 12
    expect(offsets(events)).toEqual([6, 9, 11, 12]);
  });

  it("a replacement donor's transfer restarts the chunks", () => {
    const p = waiting();
    p.receive({ type: "state_chunk", group: G, transfer: "t1", index: 0, last: false, data: "OLD" });
    const { events } = p.receive(batch(...chunks("t2", {})));
    expect(events).toMatchObject([{ type: "snapshot-ready", transfer: "t2", chunks: ["AAAA", "BBBB"] }]);
    expect(p.stateDecoded(G, "t1", new Uint8Array(), null)).toEqual([]); // the old transfer is overtaken
  });

  it("state_unavailable: state-received with the reason, then the buffered events", () => {
    const p = waiting();
    p.receive(batch(deliver(11, "fifo:a", 1), deliver(12, "fifo:a", 2)));
    const { events, replies } = p.receive({ type: "error", code: "state_unavailable", message: "no donor", req: "j1" });
    expect(replies).toEqual([]);
    expect(events[0]).toEqual({ type: "state-received", group: G, offset: 0, snapshot: null, reason: "state_unavailable", streams: {} });
    expect(offsets(events)).toEqual([11, 12]);
    expect(offsets(p.receive(deliver(13, "fifo:a", 3)).events)).toEqual([13]);
  });

  it("a chunk out of order ends the transfer with bad_transfer", () => {
    const p = waiting();
    const { events } = p.receive({ type: "state_chunk", group: G, transfer: "t1", index: 1, last: true, data: "x", sha256: "a", streams: {}, offset: 10 });
    expect(events).toMatchObject([{ type: "state-received", snapshot: null, reason: expect.stringMatching(/^bad_transfer/) }]);
  });

  it("a view event passes the buffer; the removal too", () => {
    const p = waiting();
    p.receive(deliver(11, "fifo:a", 1));
    const r = p.receive(install({ view: 2, joined: ["b"], members: ["a", "me", "b"], offset: 11 }));
    expect(types(r.events)).toEqual(["view"]);
  });
});

describe("removal", () => {
  it("a view_install with this member in left is `removed`, and the group hears nothing more", () => {
    const p = joined();
    const { events } = p.receive(install({ view: 2, members: ["a"], joined: [], left: ["me"], offset: 11 }));
    expect(events).toEqual([{ type: "removed", group: G, view: 2, reason: null }]);
    expect(p.groups.get(G)!.phase).toBe("left");
    expect(p.receive(deliver(12, "fifo:a", 1)).events).toEqual([]);
    expect(p.receive({ type: "view_change", group: G, proposed: 3, members: ["a"], joining: [], leaving: [], reason: "join" }).events).toEqual([]);
    expect(p.dataToSend()).toEqual([]);
  });

  it("another member leaving is a plain view", () => {
    const p = joined();
    const { events } = p.receive(install({ view: 2, members: ["me"], joined: [], left: ["a"], offset: 11 }));
    expect(types(events)).toEqual(["view"]);
  });
});

describe("replies", () => {
  it("turns published, rejected, outcome, pong, error into replies", () => {
    const p = joined();
    const { replies } = p.receive(
      batch(
        { type: "published", req: "p1", id: "i1", offset: 11 },
        { type: "rejected", req: "p2", id: "i2", code: "view_changing" },
        { type: "outcome", id: "i3", group: G, offset: 12, committed: false, reason: "ack_timeout" },
        { type: "pong", req: "h1" },
        { type: "error", code: "bad_frame", message: "no", req: 5, lost: null },
      ),
    );
    expect(replies).toEqual([
      { type: "published", req: "p1", id: "i1", offset: 11 },
      { type: "rejected", req: "p2", id: "i2", code: "view_changing" },
      { type: "outcome", id: "i3", group: G, offset: 12, committed: false, reason: "ack_timeout" },
      { type: "pong", req: "h1" },
      { type: "error", code: "bad_frame", message: "no", req: 5, lost: null },
    ]);
  });
});

describe("issue 32: a request the link drops is sent again, or fails to the application", () => {
  const welcome: Frame = { type: "welcome", session: "s-1", member: "me", heartbeat_ms: 5000, limits: {} };
  const point = { epoch: 7, offset: 10, view: 1, streams: {} };
  const chunk = { index: 0, last: true, data: "eJwrSS0uAQAEXQHB", sha256: "ab" };
  const rows: {
    kind: string;
    joined: boolean;
    ask: (p: ClientProtocol) => string; // the answer's key
    resent: string[]; // the frames after the reconnect, by type
    answer: Frame[]; // the server's, after the reconnect
    failed?: boolean;
  }[] = [
    { kind: "join", joined: false, ask: (p) => (p.openJoin(G, { req: "j1" }), G), resent: ["join"], answer: [install()] },
    {
      kind: "leave", // C6: the leave again, and no join (it could let the member in after the leave)
      joined: true,
      ask: (p) => (p.openLeave(G, { req: "l1" }), G),
      resent: ["leave"],
      answer: [install({ view: 2, members: ["a"], joined: [], left: ["me"], offset: 11 })],
    },
    {
      kind: "checkpoint", // part of it may be lost: it fails at the loss (take it again)
      joined: true,
      ask: (p) => p.openCheckpoint(G, [chunk], point, { req: "c1" }),
      resent: ["join"],
      answer: [{ type: "view_resume", group: G, view: 1 }],
      failed: true,
    },
    { kind: "refresh", joined: false, ask: (p) => p.openRefresh("t-2"), resent: [], answer: [] }, // the welcome
    {
      kind: "publish", // same id, once the group is resumed
      joined: true,
      ask: (p) => p.openPublish(G, "x-1", 1, { req: "p1" }).frame.id,
      resent: ["join", "publish"],
      answer: [
        { type: "view_resume", group: G, view: 1 },
        { type: "published", req: "p1", id: "x-1", offset: 11 },
      ],
    },
  ];

  it.each(rows.map((r) => [r.kind, r] as const))("%s: dropped after its frame left", (kind, r) => {
    const p = new ClientProtocol("me");
    p.receive(welcome);
    if (r.joined) {
      p.openJoin(G, { req: "j1" });
      p.receive(install());
    }
    p.dataToSend();
    p.answers();
    const key = r.ask(p);
    expect(p.dataToSend().map((f) => f.type)).toContain(kind); // the frame left
    p.connectionLost();
    const answers = p.answers();
    p.hello(true);
    p.receive(welcome);
    p.rejoinAll(() => "r1");
    answers.push(...p.answers());
    const frames = p.dataToSend();
    for (const f of r.answer) {
      p.receive(f);
      frames.push(...p.dataToSend());
      answers.push(...p.answers());
    }
    expect(frames.map((f) => f.type)).toEqual(r.resent);
    expect(answers.map((a) => (a.type === "answer" ? [a.kind, a.key, a.error !== null] : [a.type]))).toEqual([
      [kind, key, r.failed === true],
    ]);
    expect(Object.values(p.requests.waiting()).every((n) => n === 0)).toBe(true);
  });
});
