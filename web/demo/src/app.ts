/**
 * notify board: a shared task board on one notify server, showing what each guarantee buys.
 *
 * - Presence, by user: a member of the group is one instance (a tab) of a user, `user#instance`;
 *   the presence bar shows users (`view.users`), with how many tabs each has open, and the
 *   arrivals and departures of users (`usersJoined`/`usersLeft`: a second tab is no arrival).
 *   Each instance also says its connection state in an ephemeral `{presence: {state}}` every
 *   few seconds; a user's chip shows the best state of its instances.
 * - Instances are the SDK's (one per tab, kept in sessionStorage): a reload resumes the same
 *   instance, a duplicated tab takes a new one, and a clash (4002) is shown as a notice.
 * - Cards: `add`, `move`, `delete`, `claim` are total-order messages, and the board is
 *   `reduce(state, op, user)` of them in order (G3): identical on every page, with no merging.
 *   Cards and claims belong to users (`userOf(sender)`): any tab of a user may release its claim.
 * - Claim is atomic (G5): a dashed "ghost" while it is pending, then the delivered op claims
 *   the card, or the ghost rolls back with the reason.
 * - Card notes are Y.Text in one Y.Doc, synced by the Yjs binding over a second group
 *   (`<board>.text`, FIFO); cursors and "typing" are its awareness (ephemeral).
 * - A late joiner gets both states by state transfer (wantState); a reload resumes.
 *
 * `window.board` is for the end-to-end tests: the client, the groups, the state, its hash, and
 * the log of every total-order op and view in the order this page applied them.
 */

import { createClient, userOf, type Client, type Group, type Message, type ReplacedEvent } from "@notify/client";
import { yjsBinding } from "@notify/client/yjs";
import * as Y from "yjs";
import { asOp, type BoardState, canonicalJson, COLUMNS, type Column, decodeBoard, emptyBoard, encodeBoard, type Op, reduce } from "./board.js";
import { bindTextarea } from "./ytextarea.js";

/** A member with no presence for this long is shown "away". */
const AWAY_MS = 12_000;
/** How long a user's arrival or departure stays in the activity line. */
const ACTIVITY_MS = 8_000;
const PRESENCE_EVERY_MS = 5_000;

type LogEntry =
  /** `sender`: the instance (member id) that sent it; `user`: its user */
  | { kind: "op"; offset: number; seq: number; sender: string; user: string; op: Op }
  | { kind: "view"; version: number; members: string[]; users: string[]; usersJoined: string[]; usersLeft: string[] }
  | { kind: "state"; offset: number; reason: string | null }
  | { kind: "removed"; group: string; reason: string | null }
  | { kind: "replaced"; old: string; new: string | null };

/** Connection states from best to worst: a user's chip shows its best instance's. */
const STATE_RANK = ["connected", "reconnecting", "connecting", "suspended", "away", "closed"];

interface Ghost {
  by: string;
  /** the publish committed; the delivered op is on its way */
  committed: boolean;
}

const params = new URLSearchParams(location.search);
const $ = <T extends HTMLElement = HTMLElement>(sel: string): T => {
  const el = document.querySelector<T>(sel);
  if (el === null) throw new Error(`no ${sel} in the page`);
  return el;
};
const h = <K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, text?: string): HTMLElementTagNameMap[K] => {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
};

/** The user: `?member=ana`, or a guest name kept for this tab (a duplicated tab copies it). */
function userName(): string {
  const given = params.get("member");
  if (given) return given;
  const key = "notify-board:member";
  let m = sessionStorage.getItem(key);
  if (m === null) {
    m = `guest-${Math.random().toString(36).slice(2, 7)}`;
    sessionStorage.setItem(key, m);
  }
  return m;
}

async function serverUrl(): Promise<string> {
  const given = params.get("ws");
  if (given) return given;
  const res = await fetch("/config.json", { cache: "no-store" });
  if (!res.ok) throw new Error(`/config.json: HTTP ${res.status} (or give ?ws=ws://host:port)`);
  const cfg = (await res.json()) as { url?: unknown };
  if (typeof cfg.url !== "string") throw new Error("/config.json has no \"url\"");
  return cfg.url;
}

function newId(): string {
  const b = new Uint8Array(4);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

const rank = (state: string): number => {
  const i = STATE_RANK.indexOf(state);
  return i < 0 ? STATE_RANK.length : i;
};

async function sha256Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (x) => x.toString(16).padStart(2, "0")).join("");
}

async function main(): Promise<void> {
  const user = userName();
  const boardName = params.get("board") ?? "board";
  const url = await serverUrl();
  $("#me").textContent = user;
  document.title = `notify board: ${user}`;

  // -- state ---------------------------------------------------------------------------------
  let board: BoardState = emptyBoard();
  let lastOffset = 0;
  const log: LogEntry[] = [];
  const ghosts = new Map<string, Ghost>();
  const flashes = new Map<string, { text: string; until: number }>();
  // Per instance (member id): what each tab last said of its connection.
  const presence = new Map<string, { state: string; at: number }>();
  // Users who came or went lately (by user: a second tab is no arrival), newest last.
  const activity: { text: string; until: number }[] = [];
  let notice: string | null = null;

  // The SDK's default instance: one per tab, `user#instance`. People are shown by user (presence
  // chips, cards, claims, notes); what belongs to one tab (its connection state, its pending
  // claims, its own echoes) is keyed by member id.
  // `tabCheckMs` in the URL: how long a tab with a saved instance asks the others whether they
  // hold it (the SDK's default is 100 ms; the browser tests give a loaded machine longer)
  const tabCheck = Number(params.get("tabCheckMs")) || undefined;
  const client: Client = createClient(url, { member: user, tabCheckMs: tabCheck });
  /** This tab's member ids: the current one, and any it had before a clash replaced it. */
  const mine = new Set<string>();
  const isMine = (sender: string): boolean => sender === client.member || mine.has(sender);
  const group: Group = client.group(boardName, {
    wantState: true,
    state: {
      snapshot: () => encodeBoard(board),
      restore: (bytes) => {
        board = decodeBoard(bytes);
        render();
      },
    },
  });
  const doc = new Y.Doc();
  const y = yjsBinding(doc);
  const texts: Group = client.group(`${boardName}.text`, { wantState: true, state: y.state });
  // Our own echoes are skipped by member id; read it live (a clash gives this tab a new one).
  y.attach(texts, {
    get member() {
      return client.member;
    },
  });

  const flash = (id: string, text: string): void => {
    flashes.set(id, { text, until: Date.now() + 6000 });
    render();
    setTimeout(render, 6100);
  };

  // -- the total order -----------------------------------------------------------------------
  group.on("message", (m: Message) => {
    lastOffset = Math.max(lastOffset, m.offset);
    if (m.stream !== "total") return;
    const op = asOp(m.payload);
    if (op === null) return;
    const who = userOf(m.sender);
    board = reduce(board, op, who);
    log.push({ kind: "op", offset: m.offset, seq: m.seq, sender: m.sender, user: who, op });
    // This tab's own claim (not one from another tab of the same user) settles its ghost.
    if (op.op === "claim" && isMine(m.sender) && ghosts.has(op.id)) {
      ghosts.delete(op.id);
      const card = board.cards.find((c) => c.id === op.id);
      if (card !== undefined && card.claimedBy !== user) flash(op.id, `${card.claimedBy ?? "someone"} claimed it first`);
    }
    render();
  });
  group.on("view", (v) => {
    lastOffset = Math.max(lastOffset, v.offset);
    log.push({ kind: "view", version: v.view, members: [...v.members], users: [...v.users.keys()], usersJoined: [...v.usersJoined], usersLeft: [...v.usersLeft] });
    for (const m of presence.keys()) if (!v.members.includes(m)) presence.delete(m);
    // Arrivals and departures of users; our own first view brings everyone in: not news.
    if (log.some((e) => e.kind === "view" && e !== log.at(-1))) {
      const until = Date.now() + ACTIVITY_MS;
      for (const u of v.usersJoined) if (u !== user) activity.push({ text: `${u} joined`, until });
      for (const u of v.usersLeft) activity.push({ text: `${u} left`, until });
      activity.splice(0, Math.max(0, activity.length - 4));
      setTimeout(render, ACTIVITY_MS + 100);
    }
    sendPresence();
    render();
  });
  group.on("state-received", (ev) => {
    log.push({ kind: "state", offset: ev.offset, reason: ev.reason });
    lastOffset = Math.max(lastOffset, ev.offset);
    render();
  });
  group.on("caught-up", (ev) => {
    lastOffset = Math.max(lastOffset, ev.offset);
    render();
  });
  group.on("status", () => {
    sendPresence();
    render();
  });
  texts.on("status", render);

  // Removed by the group (e.g. frozen past ack_timeout, or away past suspect_timeout while a
  // view change needed it): the application is still here, so join again; the state comes by
  // transfer, as for any joiner. A leave of our own ends as "left", not "removed".
  for (const g of [group, texts]) {
    g.on("removed", (ev) => {
      log.push({ kind: "removed", group: g.name, reason: ev.reason });
      render();
      if (g.status !== "removed") return;
      setTimeout(() => {
        g.join().catch((e: unknown) => console.warn(`notify board: could not join ${g.name} again`, e));
      }, 250);
    });
  }

  // -- presence ------------------------------------------------------------------------------
  function sendPresence(): void {
    if (!group.wanted) return;
    group.publish({ presence: { state: client.state } }, { ephemeral: true }).catch(() => undefined);
  }
  group.on("ephemeral", (ev) => {
    const p = (ev.payload as { presence?: { state?: unknown } } | null)?.presence;
    if (p === undefined || typeof p.state !== "string") return;
    presence.set(ev.sender, { state: p.state, at: Date.now() });
    render();
  });
  client.on("state", () => {
    sendPresence();
    render();
  });
  // Another connection claimed this tab's instance (close 4002): the SDK took a new instance and
  // rejoined from its resume points (or, had the instance been named, closed). Say so.
  client.on("replaced", (ev: ReplacedEvent) => {
    mine.add(ev.old);
    log.push({ kind: "replaced", old: ev.old, new: ev.new });
    notice =
      ev.new === null
        ? `Another connection took over this tab's instance (${ev.old}): this tab is closed.`
        : `Another connection took over this tab's instance (${ev.old}): this tab goes on as ${ev.new}.`;
    render();
  });
  $("#notice-close").addEventListener("click", () => {
    notice = null;
    render();
  });
  setInterval(() => {
    sendPresence();
    render();
  }, PRESENCE_EVERY_MS);

  // -- actions -------------------------------------------------------------------------------
  const publishOp = (op: Op): void => {
    group.publish(op, { order: "total" }).catch((e: unknown) => flash(op.id, `not sent: ${(e as Error).message}`));
  };

  async function claim(id: string): Promise<void> {
    if (ghosts.has(id)) return;
    const ghost: Ghost = { by: client.member, committed: false };
    ghosts.set(id, ghost);
    render();
    try {
      const r = await group.publish({ op: "claim", id, by: user }, { order: "total", atomic: true });
      if (ghosts.get(id) !== ghost) return; // the delivered op settled it first
      if (r.committed === false) {
        ghosts.delete(id);
        flash(id, `claim rolled back: ${r.reason ?? "aborted"}`);
      } else {
        ghost.committed = true; // the reducer applies it when it is delivered
      }
    } catch (e) {
      if (ghosts.get(id) === ghost) ghosts.delete(id);
      flash(id, `claim failed: ${(e as Error).message}`);
    }
    render();
  }

  const addForm = $<HTMLFormElement>("#add");
  const addInput = $<HTMLInputElement>("#add-title");
  addForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const title = addInput.value.trim();
    if (!title) return;
    addInput.value = "";
    publishOp({ op: "add", id: newId(), title });
  });

  $("#drop-link").addEventListener("click", () => client.dropLink());
  $("#freeze").addEventListener("click", () => client.freeze(5000));
  $("#reload").addEventListener("click", () => location.reload());
  $("#debug-toggle").addEventListener("click", () => document.body.classList.toggle("debug-open"));
  if (params.has("debug")) document.body.classList.add("debug-open");

  // Drag a card onto a column to move it.
  for (const col of COLUMNS) {
    const zone = $(`#col-${col}`);
    zone.addEventListener("dragover", (ev) => {
      ev.preventDefault();
      zone.classList.add("drop");
    });
    zone.addEventListener("dragleave", () => zone.classList.remove("drop"));
    zone.addEventListener("drop", (ev) => {
      ev.preventDefault();
      zone.classList.remove("drop");
      const id = ev.dataTransfer?.getData("text/x-card");
      if (id) publishOp({ op: "move", id, column: col });
    });
  }

  // -- awareness: who is in which card's notes -----------------------------------------------
  let awTimer: ReturnType<typeof setTimeout> | null = null;
  let awNext: Record<string, unknown> | null = null;
  const setAwareness = (state: Record<string, unknown>): void => {
    awNext = state;
    if (awTimer !== null) return;
    awTimer = setTimeout(() => {
      awTimer = null;
      y.awareness.setLocal(awNext);
    }, 80);
  };
  y.awareness.on("change", () => render());

  // -- rendering (keyed: a card's element and its textarea live as long as the card) ----------
  interface CardView {
    root: HTMLElement;
    title: HTMLElement;
    owner: HTMLElement;
    claim: HTMLButtonElement;
    typing: HTMLElement;
    note: HTMLElement;
    left: HTMLButtonElement;
    right: HTMLButtonElement;
    unbind: () => void;
  }
  const cardViews = new Map<string, CardView>();

  function cardView(id: string): CardView {
    const existing = cardViews.get(id);
    if (existing !== undefined) return existing;
    const root = h("article", { class: "card", "data-testid": `card-${id}`, draggable: "true" });
    const head = h("header");
    const title = h("h3", { "data-testid": `title-${id}` });
    const del = h("button", { class: "icon", title: "delete", "data-testid": `delete-${id}` }, "×");
    const left = h("button", { class: "icon", title: "move left", "data-testid": `left-${id}` }, "◀");
    const right = h("button", { class: "icon", title: "move right", "data-testid": `right-${id}` }, "▶");
    const tools = h("span", { class: "tools" });
    tools.append(left, right, del);
    head.append(title, tools);
    const area = h("textarea", { "data-testid": `text-${id}`, placeholder: "notes…", rows: "3", spellcheck: "false" });
    const typingEl = h("div", { class: "typing", "data-testid": `typing-${id}` });
    const foot = h("footer");
    const owner = h("span", { class: "owner", "data-testid": `owner-${id}` });
    const claimBtn = h("button", { class: "claim", "data-testid": `claim-${id}` }, "claim");
    foot.append(owner, claimBtn);
    const note = h("div", { class: "note", "data-testid": `note-${id}` });
    root.append(head, area, typingEl, foot, note);

    const move = (step: number): void => {
      const card = board.cards.find((c) => c.id === id);
      if (card === undefined) return;
      const to = COLUMNS[COLUMNS.indexOf(card.column) + step];
      if (to !== undefined) publishOp({ op: "move", id, column: to });
    };
    del.addEventListener("click", () => publishOp({ op: "delete", id }));
    left.addEventListener("click", () => move(-1));
    right.addEventListener("click", () => move(1));
    claimBtn.addEventListener("click", () => {
      const card = board.cards.find((c) => c.id === id);
      if (card?.claimedBy === user) publishOp({ op: "release", id, by: user });
      else void claim(id);
    });
    root.addEventListener("dragstart", (ev) => ev.dataTransfer?.setData("text/x-card", id));
    const typing = (): void => setAwareness({ name: user, card: id, cursor: area.selectionStart, typing: Date.now() });
    const unbind = bindTextarea(area, doc.getText(`card:${id}`), typing);
    area.addEventListener("focus", () => setAwareness({ name: user, card: id, cursor: area.selectionStart }));
    area.addEventListener("blur", () => setAwareness({ name: user, card: null }));

    const v: CardView = { root, title, owner, claim: claimBtn, typing: typingEl, note, left, right, unbind };
    cardViews.set(id, v);
    return v;
  }

  let renderQueued = false;
  function render(): void {
    if (renderQueued) return;
    renderQueued = true;
    queueMicrotask(() => {
      renderQueued = false;
      draw();
    });
  }

  function draw(): void {
    const now = Date.now();
    // Presence bar: the users of the view (in the seniority of their first instance), each with
    // its number of tabs and the best connection state among them.
    const bar = $("#presence");
    const members = group.view?.members ?? [];
    const users = group.view?.users ?? new Map<string, readonly string[]>();
    const stateOf = (m: string): string => {
      if (m === client.member) return client.state;
      const p = presence.get(m);
      return p === undefined || now - p.at > AWAY_MS ? "away" : p.state;
    };
    bar.replaceChildren(
      ...[...users].map(([u, instances]) => {
        const me = u === user;
        const states = instances.map(stateOf);
        const state = states.reduce((a, b) => (rank(b) < rank(a) ? b : a), "closed");
        const title = `${u}: ${instances.map((m, i) => `${m} ${states[i]}`).join(", ")}`;
        const chip = h("span", { class: `member s-${state}${me ? " me" : ""}`, "data-testid": `presence-${u}`, "data-state": state, "data-instances": String(instances.length), title });
        chip.append(h("i", { class: "dot" }), h("span", { class: "name" }, me ? `${u} (you)` : u));
        if (instances.length > 1) chip.append(h("b", { class: "tabs", "data-testid": `tabs-${u}`, title: `${instances.length} tabs` }, `×${instances.length}`));
        chip.append(h("small", {}, state));
        return chip;
      }),
    );
    while (activity.length > 0 && activity[0]!.until <= now) activity.shift();
    $("#activity").textContent = activity.map((a) => a.text).join(" · ");
    $("#notice-text").textContent = notice ?? "";
    $("#notice").hidden = notice === null;
    $("#conn").textContent = client.state;
    $("#conn").className = `conn s-${client.state}`;

    // Cards, in the order they were added, each in its column.
    const seen = new Set<string>();
    const perColumn: Record<Column, HTMLElement[]> = { todo: [], doing: [], done: [] };
    for (const card of board.cards) {
      seen.add(card.id);
      const v = cardView(card.id);
      v.title.textContent = card.title;
      v.root.dataset.column = card.column;
      const ghost = ghosts.get(card.id);
      const claimState = card.claimedBy !== null ? (card.claimedBy === user ? "mine" : "other") : ghost !== undefined ? "ghost" : "none";
      v.root.dataset.claim = claimState;
      v.owner.textContent =
        card.claimedBy !== null ? `claimed by ${card.claimedBy === user ? "you" : card.claimedBy}` : ghost !== undefined ? `claiming… (${ghost.committed ? "committed" : "pending"})` : `added by ${card.by}`;
      v.claim.textContent = card.claimedBy === user ? "release" : "claim";
      v.claim.disabled = ghost !== undefined || (card.claimedBy !== null && card.claimedBy !== user);
      v.left.disabled = card.column === "todo";
      v.right.disabled = card.column === "done";
      const f = flashes.get(card.id);
      v.note.textContent = f !== undefined && f.until > now ? f.text : "";
      // Awareness is per instance; say it per user (typing in any of its tabs wins).
      const inCard = new Map<string, boolean>();
      for (const [m, e] of y.awareness.states) {
        if (e.state.card !== card.id) continue;
        const typing = typeof e.state.typing === "number" && now - e.state.typing < 3000;
        inCard.set(userOf(m), (inCard.get(userOf(m)) ?? false) || typing);
      }
      const here = [...inCard].map(([u, typing]) => (typing ? `${u} is typing…` : `${u} is here`));
      v.typing.textContent = here.length ? `✎ ${here.join(", ")}` : "";
      perColumn[card.column].push(v.root);
    }
    for (const col of COLUMNS) {
      const list = $(`#col-${col} .cards`);
      // Only touch the DOM where it differs, so a focused textarea keeps its focus.
      const want = perColumn[col];
      const have = [...list.children];
      if (want.length !== have.length || want.some((el, i) => have[i] !== el)) list.replaceChildren(...want);
      $(`#col-${col} .count`).textContent = String(want.length);
    }
    for (const [id, v] of cardViews) {
      if (seen.has(id)) continue;
      v.unbind();
      v.root.remove();
      cardViews.delete(id);
      ghosts.delete(id);
    }
    for (const [id, f] of flashes) if (f.until <= now) flashes.delete(id);

    // Debug drawer.
    const set = (id: string, text: string): void => {
      $(`[data-testid="debug-${id}"]`).textContent = text;
    };
    set("member", `${client.member} (user ${user})`);
    set("state", client.state);
    set("view", group.view === null ? "—" : `v${group.view.version}`);
    set("members", members.join(", ") || "—");
    set("users", [...users].map(([u, i]) => (i.length > 1 ? `${u} ×${i.length}` : u)).join(", ") || "—");
    set("status", `${group.status} / text: ${texts.status}`);
    set("offset", String(lastOffset));
    set("pending", `${group.pending} board · ${texts.pending} text · ${y.buffered} merging`);
    set("rtt", client.rtt === null ? "—" : `${client.rtt.toFixed(0)} ms`);
    set("url", client.url);
  }

  async function hash(): Promise<string> {
    const text: Record<string, string> = {};
    for (const key of [...doc.share.keys()].sort()) {
      const s = doc.getText(key).toString();
      if (s) text[key] = s; // an empty text exists only where it was looked at
    }
    return (await sha256Hex(canonicalJson({ board, text }))).slice(0, 12);
  }
  setInterval(() => {
    void hash().then((x) => {
      $('[data-testid="debug-hash"]').textContent = x;
    });
  }, 500);

  (window as unknown as { board: unknown }).board = {
    client,
    group,
    texts,
    doc,
    user,
    /** this tab's member id (user#instance), live: a clash gives it a new one */
    get member(): string {
      return client.member;
    },
    log,
    state: (): BoardState => structuredClone(board),
    hash,
    awareness: y.awareness,
  };

  render();
  await Promise.all([group.join(), texts.join()]);
  document.body.dataset.ready = "true";
  sendPresence();
  render();
}

main().catch((e: unknown) => {
  console.error(e);
  const el = document.querySelector("#fatal");
  if (el !== null) el.textContent = `notify board could not start: ${(e as Error).message}`;
});

