// The browser tests' member: one notify client in this page, joined to one group, with a state
// made of what it received (the total order as a list, each sender's FIFO stream as a list), so
// that equal hashes across pages mean equal delivery. Driven from Playwright by page.evaluate:
//
//   await page.evaluate((o) => h.start(o), { url, member, group, wantState: true });
//   await page.evaluate(() => h.publish({ n: 1 }, { order: "total" }));
//   const s = await page.evaluate(() => h.snapshot());   // { hash, total, fifo, messages, views, states }
//
// `start` remembers its options in sessionStorage, and a reloaded page starts again from them:
// the SDK then restores the state it saved at `pagehide` and resumes from its saved point.
import { createClient } from "@notify/client";

const enc = new TextEncoder();
const dec = new TextDecoder();
const OPTS = "harness:opts";

class Member {
  constructor(o) {
    this.o = o;
    this.total = []; // [offset, sender, payload] in delivery order
    this.fifo = {}; // sender -> payloads
    this.messages = []; // every message event, in order: {offset, stream, seq, sender, payload, replayed}
    this.views = []; // {view, members, joined, left}
    this.states = []; // client states
    this.replaced = []; // the client's `replaced` events: {old, new}
    this.events = []; // every group event type, in order
    this.errors = [];
    this.caughtUp = []; // the group's `caught-up` events: {offset, count}
    this.restored = 0; // messages that came in a restored snapshot (state transfer or reload)
    this.handlers = {}; // test-installed reentrant handlers: type -> source of a function
    const state = {
      snapshot: () => enc.encode(JSON.stringify({ total: this.total, fifo: this.fifo })),
      restore: (bytes) => {
        const s = JSON.parse(dec.decode(bytes));
        this.total = s.total;
        this.fifo = s.fifo;
        this.restored = s.total.length + Object.values(s.fifo).reduce((n, l) => n + l.length, 0);
      },
    };
    const clientOpts = { member: o.member, storage: o.storage === false ? null : sessionStorage };
    if (o.instance !== undefined) clientOpts.instance = o.instance; // default: the SDK picks it
    if (o.backoff) clientOpts.backoff = o.backoff;
    if (o.requestTimeoutMs) clientOpts.requestTimeoutMs = o.requestTimeoutMs;
    if (o.tokens) {
      clientOpts.getToken = async () => {
        this.tokenCalls = (this.tokenCalls ?? 0) + 1;
        return await window.mintToken(o.member);
      };
    }
    this.client = createClient(o.url, clientOpts);
    this.client.on("state", (s) => this.states.push(s.to));
    this.client.on("replaced", (e) => this.replaced.push({ old: e.old, new: e.new }));
    this.client.on("error", (e) => this.errors.push(e.code));
    this.group = this.client.group(o.group, { wantState: !!o.wantState, state });
    const g = this.group;
    g.on("message", (m) => {
      this.messages.push({ offset: m.offset, stream: m.stream, seq: m.seq, sender: m.sender, payload: m.payload, replayed: m.replayed });
      if (m.stream === "total") this.total.push([m.offset, m.sender, m.payload]);
      else (this.fifo[m.sender] ??= []).push(m.payload);
    });
    for (const type of ["message", "view", "view-changing", "view-resumed", "caught-up", "state-received", "removed", "reset", "ephemeral"]) {
      g.on(type, (ev) => {
        this.events.push(type);
        const src = this.handlers[type];
        if (src) new Function("ev", "h", "g", "client", src)(ev, this, g, this.client);
      });
    }
    g.on("caught-up", (e) => this.caughtUp.push({ offset: e.offset, count: e.count }));
    g.on("view", (v) =>
      this.views.push({
        view: v.view,
        members: [...v.members],
        joined: [...v.joined],
        left: [...v.left],
        users: [...v.users.keys()],
        usersJoined: [...v.usersJoined],
        usersLeft: [...v.usersLeft],
      }),
    );
  }

  async hash() {
    const canon = JSON.stringify({ total: this.total.map(([, s, p]) => [s, p]), fifo: Object.keys(this.fifo).sort().map((k) => [k, this.fifo[k]]) });
    const d = new Uint8Array(await crypto.subtle.digest("SHA-256", enc.encode(canon)));
    return Array.from(d, (b) => b.toString(16).padStart(2, "0")).join("").slice(0, 16);
  }
}

window.h = {
  m: null,
  async start(o) {
    sessionStorage.setItem(OPTS, JSON.stringify(o));
    this.m = new Member(o);
    await this.m.group.join();
    return this.m.client.member;
  },
  async publish(payload, opts = {}) {
    try {
      return await this.m.group.publish(payload, opts);
    } catch (e) {
      return { error: e.code ?? String(e) };
    }
  },
  /** Start publishes now; their results land in h.results (an offline queue). */
  publishLater(payloads, opts = {}) {
    this.results = [];
    for (const p of payloads) this.m.group.publish(p, opts).then((r) => this.results.push(r), (e) => this.results.push({ error: e.code ?? String(e) }));
  },
  async snapshot() {
    const m = this.m;
    return {
      hash: await m.hash(),
      total: m.total,
      fifo: m.fifo,
      messages: m.messages,
      views: m.views,
      states: m.states,
      events: m.events,
      errors: m.errors,
      caughtUp: m.caughtUp,
      restored: m.restored,
      state: m.client.state,
      status: m.group.status,
      view: m.group.view && { version: m.group.view.version, members: m.group.view.members, users: Object.fromEntries(m.group.view.users) },
      member: m.client.member,
      instance: m.client.instance,
      replaced: m.replaced,
      pending: m.group.pending,
      tokenCalls: m.tokenCalls ?? 0,
    };
  },
};

const saved = sessionStorage.getItem(OPTS);
if (saved !== null) {
  window.h.reloaded = window.h.start(JSON.parse(saved)).then(() => true);
}
