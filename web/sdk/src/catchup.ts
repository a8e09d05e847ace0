/**
 * Catch-up from the log, client side (G8, issue 30): reading what a `catchup_log` left out. The
 * same rules as the Python SDK's `client_sdk/catchup.py`.
 *
 * A member that resumes or rejoins from a point older than the server's in-memory window gets
 * `catchup_log{after, before, view}` ahead of the replay: the messages after `after` and before
 * `before`, and the view installs among them, are in the log only, and the member reads them
 * with `history` requests, one page at a time. Everything else comes as usual meanwhile: the
 * replay from `before`, then live frames. The protocol acts on those at once (it ACKs atomic
 * messages, answers `flush_ok`, follows the view), so the member holds up nobody while it reads,
 * but it keeps their *events* for the application until the gap is read: the application sees
 * every message once, in log order per stream, with the installs it crossed in their place.
 *
 * `Gap` is that reading, sans I/O: which page to ask for next, what a page hands the
 * application, and the position the member's knowledge is at meanwhile (a resume point taken
 * during the gap starts at its frontier, never past it: what was kept back is read again).
 * `protocol.ts` parses the frames and owns the group's streams.
 */

import { ProtocolViolation } from "./errors.js";
import type { Message, ViewEvent } from "./events.js";
import type { Frame, ProtocolEvent } from "./protocol.js";

/** Messages asked for per page (the server may answer fewer). */
export const PAGE = 1000;
/** A page refused (or that does not move on) is asked again this many times; then the host reconnects. */
export const PAGE_RETRIES = 3;

/** A `history_page`, its `deliver`s and `view_install`s parsed into events. */
export interface Page {
  readonly epoch: number;
  /** the oldest offset the log keeps */
  readonly first: number;
  /** the page's last offset: the next page's `after` */
  readonly end: number;
  /** the log's newest offset */
  readonly head: number;
  /** the atomic messages of the page that were aborted */
  readonly aborted: readonly number[];
  readonly messages: readonly Message[];
  readonly installs: readonly ViewEvent[];
}

export class Gap {
  /** the events of what arrived behind the gap, kept for the application */
  readonly events: ProtocolEvent[] = [];
  /** per stream, the first seq that arrived behind the gap (the history must end before it) */
  readonly ahead = new Map<string, number>();
  /** the `history` request under way, and how often the current page was asked for */
  req = "";
  tries = 0;
  /** the frontier jumped over offsets retention dropped (streams may skip seqs after it) */
  holed = false;
  /** the members of `view`, once a page installed it (null: not read from the log) */
  members: readonly string[] | null = null;
  /**
   * the messages the pages handed to the application (the `caught-up` kept behind the gap
   * counts only the replay from memory: this is added to it)
   */
  count = 0;
  /**
   * The messages held back (behind an atomic one) when the gap opened: received before it, they
   * go to the application when released, ahead of the gap (each is later in its stream than
   * anything the log can add), and stay held if the gap is abandoned (a lost connection).
   */
  readonly heldBefore = new Set<number>();

  constructor(
    readonly group: string,
    readonly epoch: number,
    /** the frontier: every message up to this offset has been handed to the application */
    public after: number,
    readonly before: number,
    /** per stream, the last seq handed to the application (history's frontier) */
    readonly streams: Record<string, number>,
    /** the last view installed, as the application has seen them */
    public view: number,
  ) {}

  /** The `history` frame for the next page (with the group's own `accept_from`). */
  request(req: string, acceptFrom: string): Frame {
    this.req = req;
    this.tries += 1;
    const f: Frame = { type: "history", req, group: this.group, after: this.after, before: this.before, limit: PAGE };
    if (acceptFrom !== "members") f.accept_from = acceptFrom;
    return f;
  }

  get done(): boolean {
    return this.after >= this.before - 1;
  }


  /**
   * A page for this gap: its messages and installs go to `events` (for the application, now),
   * in log order; aborted atomic ones are skipped. Moves the frontier to the page's `end`, or
   * to `before - 1` when the page reaches the log's head; then, if the gap is read, checks that
   * it meets what came behind it.
   */
  page(p: Page, events: ProtocolEvent[]): void {
    const { group, epoch, after } = this;
    if (p.end > after) this.tries = 0; // it moved on (a page that does not counts as a refusal)
    if (p.epoch !== epoch) throw new ProtocolViolation(`${group}: epoch ${p.epoch}, not ${epoch}`);
    // retention dropped what lay between: the application is told how far its knowledge
    // jumps, as after a refused resume
    if (p.first > after + 1 && !this.holed) {
      const lost = p.first - after - 1;
      events.push({ type: "reset", group, reason: "offset_unavailable", oldEpoch: epoch, oldOffset: after, newEpoch: epoch, newOffset: after + lost, lost });
      this.holed = true;
    }
    const installs = [...p.installs].sort((a, b) => a.view - b.view);
    let k = 0;
    const installsBefore = (offset: number): void => {
      for (let i; (i = installs[k]) !== undefined && i.offset < offset; k++) {
        if (i.view <= this.view) continue; // seen already (the page before had it too)
        this.view = i.view;
        this.members = i.members;
        events.push(i);
      }
    };
    // `seq` follows the last one handed over in its stream (unless retention made a hole)
    const follows = (stream: string, seq: number): void => {
      const had = this.streams[stream] ?? 0;
      if (had && seq !== had + 1 && !this.holed) throw new ProtocolViolation(`${group}/${stream}: seq ${seq} after ${had}`);
    };
    for (const m of p.messages) {
      installsBefore(m.offset);
      if (m.seq <= (this.streams[m.stream] ?? 0)) continue; // had already (its point covered this stream further)
      follows(m.stream, m.seq);
      this.streams[m.stream] = m.seq;
      if (!p.aborted.includes(m.offset)) events.push(m), this.count++;
    }
    installsBefore(Infinity);
    // (a page that reaches the log's head leaves nothing more to read)
    this.after = Math.max(after, p.end, p.end >= p.head ? this.before - 1 : 0);
    if (!this.done) return;
    // read: each stream's history reaches exactly the first seq that came behind the gap
    for (const [stream, first] of this.ahead) follows(stream, first);
  }
}
