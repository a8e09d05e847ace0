// Try the board for real: three members in Debian's chromium against a running server, then a
// screenshot. Checks on the way: equal state hashes, the same total-order sequence on every page
// (gap-free seq), a late joiner that gets the state, an atomic claim confirmed and one rolled back.
//
//   node web/demo/scripts/screenshot.mjs ws://127.0.0.1:18800 http://127.0.0.1:18801 [docs/img/board.png]
//
// The server's ack_timeout (default 10 s) decides how long the rolled-back claim takes; pass
// --no-abort to skip that part. Never runs `playwright install`: CHROMIUM (default
// /usr/bin/chromium) is the browser.
import { mkdir } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { chromium } from "playwright-core";

const args = process.argv.slice(2).filter((a) => !a.startsWith("--"));
const flags = new Set(process.argv.slice(2).filter((a) => a.startsWith("--")));
const [ws, http, outArg] = args;
if (!ws || !http) {
  console.error("usage: screenshot.mjs <ws url> <http url of dist/> [out.png] [--no-abort]");
  process.exit(2);
}
const out = resolve(outArg ?? "docs/img/board.png");
const boardName = `board-${Date.now().toString(36)}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what, fn, timeoutMs = 15_000) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const failures = [];
const check = (ok, what) => {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures.push(what);
};

async function open(member, { debug = false } = {}) {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await ctx.newPage();
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") console.log(`  [${member} console.${m.type()}] ${m.text()}`);
  });
  page.on("pageerror", (e) => console.log(`  [${member} pageerror] ${e.message}`));
  const q = new URLSearchParams({ ws, member, board: boardName });
  if (debug) q.set("debug", "1");
  await page.goto(`${http.replace(/\/$/, "")}/index.html?${q}`);
  await page.waitForSelector('body[data-ready="true"]', { timeout: 15_000 });
  return page;
}

const hashes = (pages) => Promise.all(pages.map((p) => p.evaluate(() => window.board.hash())));
const cardIds = (page) => page.evaluate(() => window.board.state().cards.map((c) => c.id));
const ops = (page) => page.evaluate(() => window.board.log.filter((e) => e.kind === "op"));

async function converge(pages, what) {
  let last = [];
  try {
    await waitFor(what, async () => {
      last = await hashes(pages);
      return last.every((x) => x === last[0]);
    });
  } catch {
    /* reported below */
  }
  check(last.every((x) => x === last[0]), `${what}: hashes ${last.join(" ")}`);
}

try {
  const t0 = Date.now();
  const ana = await open("ana", { debug: true });
  const bo = await open("bo");
  await waitFor("bo in ana's view", () => ana.evaluate(() => window.board.group.view?.users.size === 2));

  // ana adds cards through the form, as a user would.
  const titles = ["Write the release notes", "Fix the reconnect storm", "Review the Yjs binding", "Try it on a phone"];
  for (const t of titles) {
    await ana.getByTestId("add-card-input").fill(t);
    await ana.getByTestId("add-card-button").click();
  }
  await waitFor("4 cards on both pages", async () => (await cardIds(bo)).length === 4 && (await cardIds(ana)).length === 4);
  const ids = await cardIds(ana);

  // bo moves two cards, ana deletes nothing, both type into notes at once.
  await bo.getByTestId(`right-${ids[1]}`).click();
  await bo.getByTestId(`right-${ids[2]}`).click();
  await waitFor("moves", async () => (await ana.evaluate(() => window.board.state().cards.filter((c) => c.column === "doing").length)) === 2);
  await bo.getByTestId(`right-${ids[2]}`).click();
  await ana.getByTestId(`text-${ids[0]}`).click();
  await ana.getByTestId(`text-${ids[0]}`).pressSequentially("Highlights: exact resume, atomic claim.", { delay: 5 });
  await bo.getByTestId(`text-${ids[1]}`).click();
  await bo.getByTestId(`text-${ids[1]}`).pressSequentially("backoff resets only after 10 s stable", { delay: 5 });
  await converge([ana, bo], "ana and bo converge");

  // Concurrent edits in the same text.
  await Promise.all([
    ana.getByTestId(`text-${ids[3]}`).pressSequentially("ana was here. ", { delay: 3 }),
    bo.getByTestId(`text-${ids[3]}`).pressSequentially("bo too. ", { delay: 3 }),
  ]);
  await converge([ana, bo], "concurrent typing in one note");

  // cy joins late and gets the board and the notes by state transfer.
  const cy = await open("cy");
  const cyState = await cy.evaluate(() => window.board.log.find((e) => e.kind === "state"));
  check(cyState !== undefined && cyState.reason === null, `cy got the state by transfer at offset ${cyState?.offset}`);
  check((await cardIds(cy)).length === 4, "cy sees the 4 cards");
  await converge([ana, bo, cy], "three pages converge after the late join");

  // An atomic claim, confirmed.
  await cy.getByTestId(`claim-${ids[1]}`).click();
  await waitFor("cy's claim", () => ana.evaluate((id) => window.board.state().cards.find((c) => c.id === id)?.claimedBy === "cy", ids[1]));
  check(true, "cy's atomic claim confirmed on ana's page");

  // A claim race: ana and bo claim the same card at once; the total order picks one everywhere.
  await Promise.all([ana.getByTestId(`claim-${ids[3]}`).click(), bo.getByTestId(`claim-${ids[3]}`).click()]);
  await converge([ana, bo, cy], "after the claim race");
  const winner = await cy.evaluate((id) => window.board.state().cards.find((c) => c.id === id)?.claimedBy, ids[3]);
  check(winner === "ana" || winner === "bo", `claim race won by ${winner} on every page`);

  // A claim while cy is frozen for 4 s: a ghost until cy acknowledges, then confirmed.
  await cy.evaluate(() => window.board.client.freeze(4000));
  await bo.getByTestId(`text-${ids[2]}`).click(); // bo's cursor shows as "here" on the others
  await ana.getByTestId(`claim-${ids[0]}`).click();
  await waitFor("the ghost", () => ana.evaluate((id) => document.querySelector(`[data-testid="card-${id}"]`)?.dataset.claim === "ghost", ids[0]));
  check(true, "ana's claim shows as a ghost while cy is frozen");
  await sleep(600);
  await ana.mouse.move(0, 0);
  await mkdir(dirname(out), { recursive: true });
  await ana.screenshot({ path: out.replace(/\.png$/, "-ghost.png") });
  await waitFor("ana's claim confirmed", () => ana.evaluate((id) => window.board.state().cards.find((c) => c.id === id)?.claimedBy === "ana", ids[0]), 20_000);
  check(true, "the ghost became a confirmed claim once cy thawed");

  // A claim rolled back: cy frozen past the server's ack_timeout.
  if (!flags.has("--no-abort")) {
    await cy.evaluate(() => window.board.client.freeze(13_000));
    const t = Date.now();
    await bo.getByTestId(`claim-${ids[2]}`).click();
    const note = await waitFor(
      "bo's claim rolled back",
      () => bo.evaluate((id) => {
        const el = document.querySelector(`[data-testid="note-${id}"]`);
        return el?.textContent || null;
      }, ids[2]),
      30_000,
    );
    const card = await bo.evaluate((id) => window.board.state().cards.find((c) => c.id === id), ids[2]);
    check(card.claimedBy === null && /rolled back/.test(note), `bo's claim rolled back after ${((Date.now() - t) / 1000).toFixed(1)} s: "${note}"`);
    // The server counts cy as failed (it acknowledged nothing) and removes it; the page joins again.
    await waitFor("cy back in the view", async () =>
      (await ana.evaluate(() => window.board.group.view?.users.has("cy"))) &&
      (await cy.evaluate(() => window.board.group.status === "joined" && window.board.texts.status === "joined")),
      30_000,
    );
    const removed = await cy.evaluate(() => window.board.log.filter((e) => e.kind === "removed").map((e) => e.group));
    console.log(`     cy was removed from [${removed.join(", ")}] and joined again`);
  }

  // A short drop (back within suspect_timeout): no view change (G7), nothing lost.
  const viewBefore = await ana.evaluate(() => window.board.group.view.version);
  await bo.evaluate(() => window.board.client.dropLink());
  await ana.getByTestId("add-card-input").fill("Added while bo was away");
  await ana.getByTestId("add-card-button").click();
  await waitFor("bo reconnected", () => bo.evaluate(() => window.board.client.state === "connected"));
  await converge([ana, bo, cy], "after bo's short drop");
  check((await ana.evaluate(() => window.board.group.view.version)) === viewBefore, `short drop: still view v${viewBefore}`);

  // A reload: the saved snapshot, then only what was missed.
  await bo.evaluate(() => setTimeout(() => location.reload(), 0));
  await ana.getByTestId("add-card-input").fill("Added while bo reloads");
  await ana.getByTestId("add-card-button").click();
  await bo.waitForURL(/./); // the navigation has started
  await bo.waitForSelector('body[data-ready="true"]', { timeout: 15_000 });
  await converge([ana, bo, cy], "after bo's reload");
  const afterReload = await bo.evaluate(() => ({ ops: window.board.log.filter((e) => e.kind === "op").length, states: window.board.log.filter((e) => e.kind === "state").length }));
  check(afterReload.ops <= 1 && afterReload.states === 0, `reload resumed from the saved snapshot: ${afterReload.ops} op(s) replayed (the card added meanwhile, unless the snapshot had it), ${afterReload.states} state transfers`);

  // Convergence: hashes and the total-order sequence (seq gap-free between state transfers).
  const pages = [ana, bo, cy];
  await converge(pages, "final state");
  const logs = await Promise.all(pages.map((p) => p.evaluate(() => window.board.log)));
  const byOffset = new Map();
  const gaps = new Set();
  let same = true;
  for (const list of logs) {
    let prev = null;
    for (const e of list) {
      if (e.kind === "state") prev = null;
      if (e.kind !== "op") continue;
      // An aborted atomic message takes a seq that is never handed over: the only gap allowed.
      if (prev !== null && e.seq <= prev) same = false;
      if (prev !== null && e.seq > prev + 1) gaps.add(`${prev + 1}..${e.seq - 1}`);
      prev = e.seq;
      const key = JSON.stringify([e.seq, e.sender, e.op]);
      if (byOffset.has(e.offset) && byOffset.get(e.offset) !== key) {
        same = false;
        console.log(`     offset ${e.offset}: ${byOffset.get(e.offset)} vs ${key}`);
      }
      byOffset.set(e.offset, key);
    }
  }
  const counts = logs.map((l) => l.filter((e) => e.kind === "op").length);
  const aborted = flags.has("--no-abort") ? 0 : 1;
  if (gaps.size !== aborted) same = false;
  check(same, `total order: ${counts.join("/")} ops applied (ana/bo-after-reload/cy), seq increasing with ${gaps.size} gap(s) [${[...gaps]}] (the aborted claim), equal at every common offset (${byOffset.size} offsets)`);
  if (!same) for (const l of logs) console.log(JSON.stringify(l.map((e) => [e.kind, e.offset ?? e.version, e.seq ?? e.reason ?? e.members])));
  const views = logs.map((l) => l.filter((e) => e.kind === "view").map((e) => e.version));
  console.log(`     views seen: ana ${views[0].join(",")} · bo ${views[1].join(",")} · cy ${views[2].join(",")}`);

  // The picture: three members, some cards, someone in a note.
  const byTitle = await ana.evaluate(() => Object.fromEntries(window.board.state().cards.map((c) => [c.title, c.id])));
  await ana.getByTestId(`right-${byTitle["Added while bo was away"]}`).click();
  await cy.getByTestId(`delete-${byTitle["Added while bo reloads"]}`).click();
  await converge(pages, "after a move and a delete");
  await bo.getByTestId(`text-${ids[1]}`).click();
  await bo.getByTestId(`text-${ids[1]}`).press("End");
  await bo.getByTestId(`text-${ids[1]}`).pressSequentially(" (then full jitter)", { delay: 20 });
  await ana.getByTestId("add-card-input").fill("");
  await waitFor("three members present", () =>
    ana.evaluate(() => ["ana", "bo", "cy"].every((m) => document.querySelector(`[data-testid="presence-${m}"]`)?.dataset.state === "connected")),
  );
  await sleep(300);
  await ana.screenshot({ path: out });
  const final = await hashes(pages);
  console.log(`screenshot ${out}; final hashes ${final.join(" ")}; ${((Date.now() - t0) / 1000).toFixed(1)} s`);
} finally {
  await browser.close();
}
if (failures.length) {
  console.error(`${failures.length} check(s) failed`);
  process.exit(1);
}
