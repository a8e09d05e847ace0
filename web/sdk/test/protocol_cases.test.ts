/**
 * The protocol cases both SDKs replay (tests/fixtures/protocol_cases.json, its format in
 * tests/fixtures/README.md), through this SDK's sans-I/O protocol (`protocol.ts`,
 * `requests.ts`): the frames it sends, the events it hands over and what its requests come to.
 * The Python replay of the same file is tests/unit/test_protocol_cases.py; the two cannot drift.
 *
 * The fixture speaks the Python SDK's names (snake_case events such as `view_installed`); the
 * adapter below says what each of this SDK's events and answers is called there.
 */

import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import type { EncodedChunk } from "../src/codec.js";
import { GroupLeftError, NotifyError, PublishRejected, ServerRefused } from "../src/errors.js";
import { ClientProtocol, type Frame, type ProtocolEvent, type ResumePoint } from "../src/protocol.js";
import type { RequestOutput } from "../src/requests.js";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Step = { [key: string]: Json };
interface Case {
  name: string;
  doc?: string;
  member?: string;
  instance?: string | null;
  steps: Step[];
  expect: { [key: string]: Json };
}

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const CASES_FILE = resolve(ROOT, "tests/fixtures/protocol_cases.json");
const CASES = JSON.parse(readFileSync(CASES_FILE, "utf8")) as Case[];

/** In an expected value, this string matches any value. */
const ANY = "$any";

/**
 * Keys derived from an event's fields, compared only where a case names them (cases written
 * before them leave them out): the transitional set of a view event.
 */
const DERIVED: Record<string, readonly string[]> = { view_installed: ["transitional"], view_changing: ["transitional"] };

function plain(value: unknown): Json {
  if (value instanceof Uint8Array) return Buffer.from(value).toString("base64");
  if (value === undefined) return null;
  return JSON.parse(JSON.stringify(value)) as Json;
}

function pick(ev: object, fields: string[]): { [key: string]: Json } {
  const out: { [key: string]: Json } = {};
  const get = ev as Record<string, unknown>;
  for (const f of fields) if (f in get) out[f] = plain(get[f]); // a missing field fails the case
  return out;
}

/** A TS event as the fixture writes it: `{type: <python name>, ...every field, snake_case}`. */
export function eventJson(e: ProtocolEvent): { [key: string]: Json } {
  switch (e.type) {
    case "message":
      return { type: "message", ...pick(e, ["group", "offset", "stream", "seq", "sender", "view", "atomic", "payload", "ts"]) };
    case "view":
      return { type: "view_installed", ...pick(e, ["group", "view", "members", "joined", "left", "offset", "transitional"]) };
    case "view-changing":
      return { type: "view_changing", ...pick(e, ["group", "proposed", "members", "joining", "leaving", "reason", "transitional"]) };
    case "view-resumed":
      return { type: "view_resumed", ...pick(e, ["group", "view"]) };
    case "caught-up":
      return { type: "caught_up", ...pick(e, ["group", "offset", "count"]) };
    case "removed":
      return { type: "removed", ...pick(e, ["group", "view", "reason"]) };
    case "reset":
      return {
        type: "reset",
        group: e.group,
        reason: e.reason,
        old_epoch: e.oldEpoch,
        old_offset: e.oldOffset,
        new_epoch: e.newEpoch,
        new_offset: e.newOffset,
        lost: e.lost,
      };
    case "state-received":
      return { type: "state_received", ...pick(e, ["group", "offset", "snapshot", "reason", "streams"]) };
    case "state-request":
      return { type: "state_requested", ...pick(e, ["group", "transfer", "joiner", "offset"]) };
    default:
      // `ephemeral` and `snapshot-ready` have no Python counterpart: no case may expect them
      return { type: `ts:${e.type}` };
  }
}

function errorCode(e: NotifyError): string {
  if (e instanceof ServerRefused || e instanceof PublishRejected) return e.code;
  if (e instanceof GroupLeftError) return "left";
  return "failed";
}

export function answerJson(a: RequestOutput): { [key: string]: Json } {
  switch (a.type) {
    case "answer": {
      const out: { [key: string]: Json } = { type: "answer", request: a.kind, key: a.key };
      if (a.error !== null) out.error = errorCode(a.error);
      else if (a.kind === "publish" && a.value !== null) {
        const r = a.value;
        out.result = { id: r.id, offset: r.offset, committed: r.committed ?? null, reason: r.reason ?? null };
      } else if (a.kind === "join" && a.value !== null) out.result = eventJson(a.value);
      else out.result = plain(a.value);
      return out;
    }
    case "retry-join":
      return { type: "retry_join", group: a.group, req: a.req, attempt: a.attempt };
    case "joined-afresh":
      return { type: "joined_afresh", group: a.group, code: a.code, want_state: a.wantState };
    case "stray-error":
      return { type: "stray_error", code: a.error.code, req: plain(a.error.req) };
  }
}

const str = (s: Step, k: string): string => s[k] as string;
const opt = <T>(s: Step, k: string, fallback: T): T => (k in s ? (s[k] as T) : fallback);

/** The fixture's calls (snake_case arguments) on this SDK's protocol. */
const CALLS: Record<string, (p: ClientProtocol, s: Step) => Frame | void> = {
  hello: (p, s) => p.hello(opt(s, "resume", false), opt<string | undefined>(s, "token", undefined)),
  join: (p, s) => {
    p.openJoin(str(s, "group"), {
      req: opt<string | undefined>(s, "req", undefined),
      acceptFrom: opt(s, "accept_from", "members"),
      wantState: opt(s, "want_state", false),
      resumeFrom: opt<ResumePoint | null>(s, "resume_from", null),
      stateProvider: opt(s, "state_provider", false),
    });
  },
  leave: (p, s) => {
    p.openLeave(str(s, "group"), { req: opt<string | undefined>(s, "req", undefined) });
  },
  publish: (p, s) => {
    p.openPublish(str(s, "group"), str(s, "id"), opt<Json>(s, "payload", null), {
      order: opt(s, "order", "fifo"),
      atomic: opt(s, "atomic", false),
      sameView: opt(s, "same_view", false),
      req: opt<string | undefined>(s, "req", undefined),
    });
  },
  rejoin_all: (p, s) => {
    const reqs = "reqs" in s ? [...(s.reqs as string[])] : null;
    p.rejoinAll(reqs === null ? undefined : () => reqs.shift()!);
  },
  connection_lost: (p) => p.connectionLost(),
  refresh: (p, s) => {
    p.openRefresh(str(s, "token"));
  },
  checkpoint: (p, s) => {
    p.openCheckpoint(str(s, "group"), s.chunks as unknown as EncodedChunk[], s.position as unknown as ResumePoint, {
      req: opt<string | undefined>(s, "req", undefined),
    });
  },
  forget_leave: (p, s) => p.forgetLeave(str(s, "group"), str(s, "req")),
  take_instance: (p, s) => p.takeInstance(str(s, "instance")),
};

function matches(got: unknown, want: Json): boolean {
  if (want === ANY) return true;
  if (Array.isArray(want)) {
    return Array.isArray(got) && got.length === want.length && want.every((w, i) => matches(got[i], w));
  }
  if (want !== null && typeof want === "object") {
    if (got === null || typeof got !== "object" || Array.isArray(got)) return false;
    const g = got as Record<string, unknown>;
    const keys = Object.keys(want);
    const unnamed = (DERIVED[String(want.type)] ?? []).filter((k) => !(k in want));
    const gotKeys = Object.keys(g).filter((k) => !unnamed.includes(k));
    return gotKeys.length === keys.length && keys.every((k) => k in g && matches(g[k], want[k]!));
  }
  return typeof got === typeof want && got === want;
}

/** Run a case's steps; what came out of the protocol, as the fixture writes it. */
export function replay(c: Case): Record<"frames" | "events" | "answers", Json[]> & { waiting?: Json } {
  const p = new ClientProtocol(c.member ?? "a", c.instance ?? null);
  const out: Record<"frames" | "events" | "answers", Json[]> & { waiting?: Json } = { frames: [], events: [], answers: [] };
  // A host writes nothing from `connection_lost` until the step after the next `hello` (a
  // reconnect: the hello, then `rejoin_all`, then what waited).
  let connected = true;
  for (const step of c.steps) {
    const call = step.call as string | undefined;
    if (call === undefined) {
      const { events } = p.receive(step.receive as Frame);
      out.events.push(...events.map(eventJson));
    } else {
      const fn = CALLS[call];
      if (fn === undefined) throw new Error(`${c.name}: unknown call ${call}`);
      const frame = fn(p, step);
      if (frame) out.frames.push(plain(frame));
      if (call === "connection_lost") connected = false;
      else if (call === "hello") {
        connected = true;
        continue;
      }
    }
    if (connected) out.frames.push(...p.dataToSend().map(plain));
    out.answers.push(...p.answers().map(answerJson));
  }
  out.waiting = { ...p.requests.waiting() }; // by kind, at the end (zeros: nothing left to time out)
  return out;
}

describe("protocol cases (tests/fixtures/protocol_cases.json)", () => {
  it("cover what both SDKs must agree on", () => {
    const names = new Set(CASES.map((c) => c.name));
    expect(names.size).toBe(CASES.length);
    const calls = new Set(CASES.flatMap((c) => c.steps.map((s) => s.call).filter((x) => x !== undefined)));
    for (const call of calls) expect(Object.keys(CALLS)).toContain(call);
    for (const call of ["hello", "join", "publish", "rejoin_all", "connection_lost"]) expect(calls).toContain(call);
  });

  it.each(CASES.map((c) => [c.name, c] as const))("%s", (_name, c) => {
    const got = replay(c);
    for (const [key, want] of Object.entries(c.expect)) {
      expect(Object.keys(got), `unknown expectation ${key}`).toContain(key);
      const actual = got[key as keyof typeof got];
      if (!matches(actual, want)) {
        // toEqual shows the difference ($any aside, it is the same comparison)
        expect({ [key]: actual }, `${c.name}: ${key}`).toEqual({ [key]: want });
        throw new Error(`${c.name}: ${key} does not match\n got: ${JSON.stringify(actual)}\nwant: ${JSON.stringify(want)}`);
      }
    }
  });
});
