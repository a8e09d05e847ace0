/** Server frames for the protocol tests, written once. */

import type { Frame } from "../src/protocol.js";

export const G = "g";

/** A `deliver` of group `G` (the sender is the stream's owner, or "a"). */
export function deliver(offset: number, stream: string, seq: number, over: Partial<Frame> = {}): Frame {
  return {
    type: "deliver",
    group: G,
    offset,
    stream,
    seq,
    sender: stream.split(":")[1] ?? "a",
    view: 1,
    atomic: false,
    payload: { n: offset },
    ts: 1_700_000_000,
    ...over,
  };
}
