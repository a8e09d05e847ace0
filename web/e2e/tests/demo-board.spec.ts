// The demo board (web/demo, built by `node web/demo/build.mjs`, served at /demo/) in three
// browser contexts against a real server: presence, cards through the UI in the total order,
// Yjs notes, and a late joiner that gets the board by state transfer. The atomic claim with a
// frozen member is in demo-board-claim.spec.ts (its server has a short ack_timeout).
// Made from web/demo/scripts/screenshot.mjs.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { expect, test } from '../fixtures.ts';
import { addCard, cardsOf, hashOf, logOf, noteOf, openBoard, openBoards, opsOf, shownCards, viewUsers } from '../board.ts';
import { DEMO_DIST } from '../paths.ts';

const MEMBERS = ['ana', 'bo', 'cy'] as const;

test.beforeAll(() => {
  if (!existsSync(join(DEMO_DIST, 'app.js'))) throw new Error(`${DEMO_DIST} is not built: node web/demo/build.mjs`);
});

test('three members: presence, cards through the UI, a move and a note converge, with one total order', async ({ newPage, notify, web, group }) => {
  const { pages, errors } = await openBoards(newPage, MEMBERS, { ws: notify.url, origin: web.origin, board: group });
  const [ana, bo, cy] = pages as [typeof pages[0], typeof pages[0], typeof pages[0]];

  // Everyone is in everyone's view, and the presence bar shows all three.
  for (const p of pages) await expect.poll(() => viewUsers(p)).toEqual([...MEMBERS]);
  for (const p of pages) {
    for (const m of MEMBERS) await expect(p.getByTestId(`presence-${m}`)).toBeVisible();
  }
  await expect(ana.getByTestId('presence-ana')).toContainText('ana (you)');
  await expect(bo.getByTestId('presence-ana')).not.toContainText('(you)');

  // ana adds two cards, bo one, through the form.
  await addCard(ana, 'Write the release notes');
  await addCard(ana, 'Fix the reconnect storm');
  await addCard(bo, 'Review the Yjs binding');
  for (const p of pages) await expect(p.locator('#col-todo article.card')).toHaveCount(3);
  const cards = await cardsOf(ana);
  const byTitle = Object.fromEntries(cards.map((c) => [c.title, c]));
  expect(Object.keys(byTitle).sort()).toEqual(['Fix the reconnect storm', 'Review the Yjs binding', 'Write the release notes']);
  expect(byTitle['Write the release notes']!.by).toBe('ana');
  expect(byTitle['Review the Yjs binding']!.by).toBe('bo');

  // bo moves ana's first card to "doing"; cy types into the notes of bo's card.
  const moved = byTitle['Write the release notes']!.id;
  const noted = byTitle['Review the Yjs binding']!.id;
  await bo.getByTestId(`right-${moved}`).click();
  const text = 'cy: looks good';
  await cy.getByTestId(`text-${noted}`).click();
  await cy.getByTestId(`text-${noted}`).pressSequentially(text, { delay: 10 });

  // Every page: the move applied, the note arrived, the same hash.
  for (const p of pages) {
    await expect(p.locator(`#col-doing [data-testid="card-${moved}"]`)).toBeVisible();
    await expect.poll(() => noteOf(p, noted)).toBe(text);
    await expect(p.getByTestId(`text-${noted}`)).toHaveValue(text);
  }
  await expect.poll(async () => new Set(await Promise.all(pages.map(hashOf))).size).toBe(1);

  // The same titles and columns, in the state and on the screen.
  const states = await Promise.all(pages.map(cardsOf));
  for (const s of states) expect(s).toEqual(states[0]);
  expect(states[0]!.map((c) => [c.title, c.column])).toEqual([
    ['Write the release notes', 'doing'],
    ['Fix the reconnect storm', 'todo'],
    ['Review the Yjs binding', 'todo'],
  ]);
  const shown = await Promise.all(pages.map(shownCards));
  for (const s of shown) expect(s.map(({ id, title, column }) => ({ id, title, column })))
    .toEqual(shown[0]!.map(({ id, title, column }) => ({ id, title, column })));
  expect(shown[0]!.map((c) => c.column).sort()).toEqual(['doing', 'todo', 'todo']);

  // One total order: the same ops, at the same offsets, with the same seq, on every page.
  const ops = await Promise.all(pages.map(opsOf));
  expect(ops[0]!.map((e) => [e.user, e.op.op])).toEqual([['ana', 'add'], ['ana', 'add'], ['bo', 'add'], ['bo', 'move']]);
  for (const o of ops) expect(o).toEqual(ops[0]);
  const seqs = ops[0]!.map((e) => e.seq);
  expect(seqs).toEqual(seqs.map((_, i) => seqs[0]! + i)); // gap-free: no atomic was aborted here

  for (const e of errors) expect(e).toEqual([]);
});

test('a late joiner gets the board by state transfer, not by replaying the ops', async ({ newPage, notify, web, group }) => {
  const ana = await newPage();
  const bo = await newPage();
  const errors = [
    await openBoard(ana, { ws: notify.url, origin: web.origin, member: 'ana', board: group }),
    await openBoard(bo, { ws: notify.url, origin: web.origin, member: 'bo', board: group }),
  ];
  await expect.poll(() => viewUsers(ana)).toEqual(['ana', 'bo']);
  await addCard(ana, 'Write the release notes');
  await addCard(ana, 'Fix the reconnect storm');
  await expect(bo.locator('article.card')).toHaveCount(2);
  const [first, second] = (await cardsOf(bo)).map((c) => c.id) as [string, string];
  await bo.getByTestId(`right-${second}`).click();
  await bo.getByTestId(`text-${first}`).click();
  await bo.getByTestId(`text-${first}`).pressSequentially('bo was here', { delay: 10 });
  await expect.poll(() => noteOf(ana, first)).toBe('bo was here');
  await expect(ana.locator(`#col-doing [data-testid="card-${second}"]`)).toBeVisible();
  await expect.poll(async () => (await hashOf(ana)) === (await hashOf(bo))).toBe(true);
  const before = await opsOf(ana);
  expect(before.map((e) => e.op.op)).toEqual(['add', 'add', 'move']);

  // cy joins now.
  const cy = await newPage();
  errors.push(await openBoard(cy, { ws: notify.url, origin: web.origin, member: 'cy', board: group }));
  for (const p of [ana, bo, cy]) await expect.poll(() => viewUsers(p)).toEqual(['ana', 'bo', 'cy']);

  // The same board, notes included, on cy's page as on the others.
  await expect.poll(() => hashOf(cy)).toBe(await hashOf(ana));
  expect(await hashOf(bo)).toBe(await hashOf(ana));
  expect(await cardsOf(cy)).toEqual(await cardsOf(ana));
  await expect(cy.locator(`#col-doing [data-testid="card-${second}"]`)).toBeVisible();
  await expect(cy.getByTestId(`text-${first}`)).toHaveValue('bo was here');
  await expect(cy.getByTestId(`title-${first}`)).toHaveText('Write the release notes');

  // ...by a state transfer (a snapshot, not "no state" with a reason), at or after the last op,
  // and none of the earlier ops replayed.
  const log = await logOf(cy);
  const states = log.filter((e) => e.kind === 'state');
  expect(states).toHaveLength(1);
  expect(states[0]).toMatchObject({ kind: 'state', reason: null });
  expect((states[0] as { offset: number }).offset).toBeGreaterThanOrEqual(before.at(-1)!.offset);
  expect(log.filter((e) => e.kind === 'op')).toEqual([]);

  // And it goes on from there in the same total order: one more op reaches all three.
  await addCard(cy, 'Try it on a phone');
  for (const p of [ana, bo, cy]) await expect(p.locator('article.card')).toHaveCount(3);
  const after = await Promise.all([ana, bo, cy].map(opsOf));
  expect(after[2]).toEqual([after[0]!.at(-1)]);
  expect(after[0]!.at(-1)).toMatchObject({ user: 'cy', op: { op: 'add', title: 'Try it on a phone' } });
  expect(after[1]).toEqual(after[0]);
  await expect.poll(async () => new Set(await Promise.all([ana, bo, cy].map(hashOf))).size).toBe(1);

  for (const e of errors) expect(e).toEqual([]);
});
