/**
 * The transitional set (docs/semantics.md, EVS's transitional configuration): on `view-changing`
 * the members expected to move together into the proposed view, on `view` those that did (the
 * previous view less `left`: every one of them delivered the same previous-view messages, G2).
 * Computed from what the frames carry (`members` less `joined`/`joining`), in view order. The
 * Python SDK's tests of the same are tests/unit/test_transitional.py; both replay the shared
 * cases `transitional_*` of tests/fixtures/protocol_cases.json.
 */

import { describe, expect, it } from "vitest";
import type { ViewChangingEvent, ViewEvent } from "../src/events.js";
import { ClientProtocol, type Frame, type ProtocolEvent } from "../src/protocol.js";
import { G } from "./frames.js";

function install(view: number, members: string[], joined: string[], left: string[]): Frame {
  return { type: "view_install", group: G, view, members, joined, left, epoch: 7, offset: 10 * view };
}

function change(proposed: number, members: string[], joining: string[], leaving: string[]): Frame {
  return { type: "view_change", group: G, proposed, members, joining, leaving, reason: "x" };
}

/** "me" joined G in view 1 with a, b and c (seniority order: a, b, me, c). */
function joined(): ClientProtocol {
  const p = new ClientProtocol("me");
  p.join("j1", G, {});
  p.receive(install(1, ["a", "b", "me", "c"], ["me", "c"], []));
  p.dataToSend();
  return p;
}

const views = (events: readonly ProtocolEvent[]): ViewEvent[] => events.filter((e): e is ViewEvent => e.type === "view");
const changes = (events: readonly ProtocolEvent[]): ViewChangingEvent[] =>
  events.filter((e): e is ViewChangingEvent => e.type === "view-changing");

describe("transitional set", () => {
  it("a joiner's first view: only the members already there, not the joiner itself", () => {
    const p = new ClientProtocol("me");
    p.join("j1", G, {});
    const [v] = views(p.receive(install(1, ["a", "b", "me", "c"], ["me", "c"], [])).events);
    expect(v!.transitional).toEqual(["a", "b"]);
    expect(v!.transitional).not.toContain("me");
  });

  it("a failure: the view before less the leavers, in view order; the same on view-changing", () => {
    const p = joined();
    const [c] = changes(p.receive(change(2, ["a", "me", "c"], [], ["b"])).events);
    expect(c!.transitional).toEqual(["a", "me", "c"]);
    const [v] = views(p.receive(install(2, ["a", "me", "c"], [], ["b"])).events);
    expect(v!.transitional).toEqual(["a", "me", "c"]);
  });

  it("joins and leaves in one change: joiners are outside it, leavers too", () => {
    const p = joined();
    const [c] = changes(p.receive(change(2, ["b", "me", "d", "e"], ["d", "e"], ["a", "c"])).events);
    expect(c!.transitional).toEqual(["b", "me"]);
    const [v] = views(p.receive(install(2, ["b", "me", "d", "e"], ["d", "e"], ["a", "c"])).events);
    expect(v!.transitional).toEqual(["b", "me"]);
  });

  it("a member that left and joined again in the same change (a new incarnation) did not move together", () => {
    const p = joined();
    // b is in both views by name, but its old membership left and a new one joined
    const [v] = views(p.receive(install(2, ["a", "me", "c", "b"], ["b"], ["b"])).events);
    expect(v!.members).toContain("b");
    expect(v!.transitional).toEqual(["a", "me", "c"]);
  });

  it("a restarted flush may shrink it; the install says who moved", () => {
    const p = joined();
    const first = changes(p.receive(change(2, ["a", "b", "me", "c", "d"], ["d"], [])).events);
    expect(first[0]!.transitional).toEqual(["a", "b", "me", "c"]);
    const again = changes(p.receive(change(2, ["a", "me", "c", "d"], ["d"], ["b"])).events);
    expect(again[0]!.transitional).toEqual(["a", "me", "c"]);
    const [v] = views(p.receive(install(2, ["a", "me", "c", "d"], ["d"], ["b"])).events);
    expect(v!.transitional).toEqual(["a", "me", "c"]);
  });

  it("installs read from the log during a catch-up carry it too", () => {
    const p = joined();
    p.receive({ type: "catchup_log", group: G, after: 10, before: 31, view: 1 });
    const [hist] = p.dataToSend();
    expect(hist!.type).toBe("history");
    const { events } = p.receive({
      type: "history_page",
      req: hist!.req,
      group: G,
      epoch: 7,
      messages: [],
      installs: [install(2, ["a", "me", "c", "x"], ["x"], ["b"]), install(3, ["me", "c", "x"], [], ["a"])],
      aborted: [],
      end: 30,
      first: 1,
      head: 30,
    });
    expect(views(events).map((v) => v.transitional)).toEqual([
      ["a", "me", "c"],
      ["me", "c", "x"],
    ]);
  });
});
