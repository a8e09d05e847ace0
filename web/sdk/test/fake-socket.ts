/**
 * A WebSocket stand-in for client tests: it records what the client sends (parsed) and lets the
 * test play the server: `open()`, `push(frame)`, `serverClose(code)`. Nothing touches a network.
 */

import { type Client, type ClientOptions, createClient, type WebSocketLike } from "../src/client.js";
import type { Frame } from "../src/protocol.js";
import type { StorageLike } from "../src/storage.js";

export class FakeSocket implements WebSocketLike {
  readyState = 0;
  /** the frames sent, a `batch`'s one by one */
  readonly sent: Frame[] = [];
  /** the messages sent, as written */
  readonly messages: string[] = [];
  /** set when the client closed this socket */
  closedByClient: { code: number | undefined; reason: string | undefined } | null = null;
  onopen: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  onclose: ((ev: { code: number; reason: string }) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;

  constructor(readonly url: string) {}

  send(data: string): void {
    if (this.readyState !== 1) throw new Error(`send on a socket in state ${this.readyState}`);
    this.messages.push(data);
    const f = JSON.parse(data) as Frame;
    if (f.type === "batch") this.sent.push(...(f.frames as Frame[]));
    else this.sent.push(f);
  }

  close(code?: number, reason?: string): void {
    this.closedByClient = { code, reason };
    this.readyState = 3; // a browser fires onclose later; the client ignores an old socket's
  }

  // -- the server's side ------------------------------------------------------------------

  open(): void {
    this.readyState = 1;
    this.onopen?.({});
  }

  push(frame: Frame): void {
    this.onmessage?.({ data: JSON.stringify(frame) });
  }

  serverClose(code = 1006, reason = ""): void {
    this.readyState = 3;
    this.onclose?.({ code, reason });
  }

  /** The frames sent of one type. */
  ofType(type: string): Frame[] {
    return this.sent.filter((f) => f.type === type);
  }
}

export interface Harness {
  client: Client;
  sockets: FakeSocket[];
  last(): FakeSocket;
}

export function fakeClient(opts: ClientOptions = {}): Harness {
  const sockets: FakeSocket[] = [];
  class Socket extends FakeSocket {
    constructor(url: string) {
      super(url);
      sockets.push(this);
    }
  }
  const client = createClient("ws://fake.test:1", {
    WebSocket: Socket,
    storage: null,
    lifecycle: false,
    member: "me",
    instance: null, // the member id is "me" (tests of instances name theirs, or pick "auto")
    random: () => 0.5,
    ...opts,
  });
  return {
    client,
    sockets,
    last: () => {
      const s = sockets[sockets.length - 1];
      if (s === undefined) throw new Error("no socket was opened");
      return s;
    },
  };
}

export function welcome(over: Partial<Frame> = {}): Frame {
  return {
    type: "welcome",
    session: "s1",
    member: "me",
    heartbeat_ms: 5_000,
    limits: { suspect_timeout_ms: 3_000, max_frame_bytes: 1_048_576 },
    resumed: false,
    ...over,
  };
}

export function install(group: string, over: Partial<Frame> = {}): Frame {
  return {
    type: "view_install",
    group,
    view: 1,
    members: ["me"],
    joined: ["me"],
    left: [],
    epoch: 1,
    offset: 0,
    ...over,
  };
}

export function deliver(group: string, offset: number, stream: string, seq: number, over: Partial<Frame> = {}): Frame {
  return {
    type: "deliver",
    group,
    offset,
    stream,
    seq,
    sender: "a",
    view: 1,
    atomic: false,
    payload: { offset },
    ts: 1_700_000_000,
    ...over,
  };
}

/** Web Storage in a Map (a tab's `sessionStorage`); `new MapStorage(other)` copies `other`, as a duplicated tab does. */
export class MapStorage implements StorageLike {
  readonly map: Map<string, string>;
  constructor(from?: MapStorage) {
    this.map = new Map(from?.map); // a duplicated tab starts with a copy
  }
  getItem(key: string): string | null {
    return this.map.get(key) ?? null;
  }
  setItem(key: string, value: string): void {
    this.map.set(key, value);
  }
  removeItem(key: string): void {
    this.map.delete(key);
  }
  saved(): { member: string; instance: string | null; session: string | null; groups: Record<string, unknown> } {
    return JSON.parse([...this.map.values()][0]!);
  }
}
