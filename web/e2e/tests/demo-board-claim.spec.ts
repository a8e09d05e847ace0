// The demo board's atomic claim (G5) in three browser contexts: confirmed on every page, and
// rolled back when a member is frozen past the server's ack_timeout (1 s here, hence a file of
// its own: its server runs with other options than demo-board.spec.ts's).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { expect, test } from '../fixtures.ts';
import { addCard, cardsOf, hashOf, logOf, openBoards, opsOf, viewUsers } from '../board.ts';
import { DEMO_DIST } from '../paths.ts';

test.use({ notifyOptions: { ackTimeout: 1 } });

const MEMBERS = ['ana', 'bo', 'cy'] as const;
const FREEZE_MS = 4_000; // well past ack_timeout (1 s)

test.beforeAll(() => {
  if (!existsSync(join(DEMO_DIST, 'app.js'))) throw new Error(`${DEMO_DIST} is not built: node web/demo/build.mjs`);
});

test('an atomic claim is confirmed everywhere, and rolled back when a member is frozen past ack_timeout', async ({ newPage, notify, web, group }) => {
  const { pages, errors } = await openBoards(newPage, MEMBERS, { ws: notify.url, origin: web.origin, board: group });
  const [ana, bo, cy] = pages as [typeof pages[0], typeof pages[0], typeof pages[0]];
  for (const p of pages) await expect.poll(() => viewUsers(p)).toEqual([...MEMBERS]);

  await addCard(ana, 'Write the release notes');
  await addCard(ana, 'Fix the reconnect storm');
  for (const p of pages) await expect(p.locator('article.card')).toHaveCount(2);
  const [first, second] = (await cardsOf(ana)).map((c) => c.id) as [string, string];

  // ana claims the first card: claimed by ana on every page, in the state and on the screen.
  await ana.getByTestId(`claim-${first}`).click();
  for (const p of pages) {
    await expect.poll(async () => (await cardsOf(p)).find((c) => c.id === first)?.claimedBy).toBe('ana');
    await expect(p.getByTestId(`owner-${first}`)).toHaveText(p === ana ? 'claimed by you' : 'claimed by ana');
    await expect(p.getByTestId(`card-${first}`)).toHaveAttribute('data-claim', p === ana ? 'mine' : 'other');
    await expect(p.getByTestId(`claim-${first}`)).toHaveText(p === ana ? 'release' : 'claim');
    if (p !== ana) await expect(p.getByTestId(`claim-${first}`)).toBeDisabled();
  }

  // cy is frozen (reads nothing, acknowledges nothing) past ack_timeout; bo claims the second
  // card: a ghost on bo's page, then rolled back with the reason.
  await cy.evaluate((ms) => (window as any).board.client.freeze(ms), FREEZE_MS);
  await bo.getByTestId(`claim-${second}`).click();
  await expect(bo.getByTestId(`card-${second}`)).toHaveAttribute('data-claim', 'ghost');
  await expect(bo.getByTestId(`note-${second}`)).toHaveText(/^claim rolled back: \S/);
  const note = await bo.getByTestId(`note-${second}`).textContent();
  await expect(bo.getByTestId(`card-${second}`)).toHaveAttribute('data-claim', 'none');
  await expect(bo.getByTestId(`claim-${second}`)).toBeEnabled();

  // A later total-order op as a barrier: had the claim been delivered anywhere, it would be
  // before this move, on every page.
  await ana.getByTestId(`right-${second}`).click();
  for (const p of [ana, bo]) {
    await expect(p.locator(`#col-doing [data-testid="card-${second}"]`)).toBeVisible();
  }

  // cy thaws, is removed (it held up the atomic message), joins again and gets the state.
  await expect.poll(async () => (await logOf(cy)).some((e) => e.kind === 'removed' && e.group === group),
                    { timeout: 20_000, message: "cy's page saw its removal from the board group" }).toBe(true);
  await expect.poll(() => viewUsers(ana), { timeout: 20_000 }).toEqual(['ana', 'bo', 'cy']);
  await expect.poll(() => cy.evaluate(() => (window as any).board.group.status), { timeout: 20_000 }).toBe('joined');
  await expect.poll(async () => new Set(await Promise.all(pages.map(hashOf))).size, { timeout: 20_000 }).toBe(1);
  await expect(cy.locator(`#col-doing [data-testid="card-${second}"]`)).toBeVisible();

  // No page shows the second card claimed by bo, and no page has a claim of bo's in its log;
  // ana's claim of the first card stands everywhere.
  for (const p of pages) {
    const cards = await cardsOf(p);
    expect(cards.find((c) => c.id === second)?.claimedBy).toBeNull();
    expect(cards.find((c) => c.id === first)?.claimedBy).toBe('ana');
    await expect(p.getByTestId(`owner-${second}`)).toHaveText('added by ana');
    await expect(p.getByTestId(`card-${second}`)).toHaveAttribute('data-claim', 'none');
    const claims = (await opsOf(p)).filter((e) => e.op.op === 'claim');
    expect(claims.every((e) => e.user === 'ana' && e.sender.startsWith('ana#') && e.op.by === 'ana')).toBe(true);
  }
  // ana and bo saw every op: exactly ana's claim, and the seq skips the aborted one.
  for (const p of [ana, bo]) {
    const ops = await opsOf(p);
    expect(ops.map((e) => [e.user, e.op.op])).toEqual([['ana', 'add'], ['ana', 'add'], ['ana', 'claim'], ['ana', 'move']]);
    const seqs = ops.map((e) => e.seq);
    expect(seqs.at(-1)! - seqs.at(-2)!).toBe(2); // the aborted claim took a seq that is never handed over
  }
  test.info().annotations.push({ type: 'rollback', description: note ?? '' });

  for (const e of errors) expect(e).toEqual([]);
});
