// The demo board with the SDK's default instances (issue 29; docs/web.md, "Users, instances and
// tabs"): one user in two browser contexts is two members of the board, shown as one user with
// two tabs everywhere; a claim belongs to the user (any of its tabs may release it); and a
// duplicated tab (window.open, which copies sessionStorage in Chromium) takes an instance of its
// own, so the original is not replaced (no 4002) and nobody sees the user leave.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Page } from '@playwright/test';
import { expect, test } from '../fixtures.ts';
import { addCard, cardsOf, logOf, memberOf, openBoard, viewUsersMap } from '../board.ts';
import { DEMO_DIST } from '../paths.ts';

test.beforeAll(() => {
  if (!existsSync(join(DEMO_DIST, 'app.js'))) throw new Error(`${DEMO_DIST} is not built: node web/demo/build.mjs`);
});

/** What the page's presence bar shows: one entry per chip, with its tab count. */
const chips = (p: Page): Promise<{ user: string; instances: string; text: string }[]> =>
  p.evaluate(() =>
    [...document.querySelectorAll<HTMLElement>('#presence [data-testid^="presence-"]')].map((el) => ({
      user: el.dataset.testid!.slice('presence-'.length),
      instances: el.dataset.instances ?? '',
      text: el.textContent ?? '',
    })));

const usersJoinedOf = async (p: Page): Promise<string[]> =>
  (await logOf(p)).flatMap((e) => (e.kind === 'view' ? e.usersJoined : []));
const usersLeftOf = async (p: Page): Promise<string[]> =>
  (await logOf(p)).flatMap((e) => (e.kind === 'view' ? e.usersLeft : []));

test('one user in two contexts is one user with 2 tabs; a duplicated tab does not replace the original', async ({ newPage, notify, web, group }) => {
  // The tab check waits 1 s here, not 100 ms: on a loaded machine (CI, two browsers, servers)
  // the original tab once took longer than 100 ms to answer, so the copy connected as it and
  // the clash path (4002, a new instance) settled it instead of the tab check this tests.
  const o = { ws: notify.url, origin: web.origin, board: group, tabCheckMs: 1_000 };
  const [bo, a1, a2] = await Promise.all([newPage(), newPage(), newPage()]);
  const errors = [
    await openBoard(bo, { ...o, member: 'bo' }),
    await openBoard(a1, { ...o, member: 'ana' }),
    await openBoard(a2, { ...o, member: 'ana' }),
  ];
  const [mb, m1, m2] = (await Promise.all([bo, a1, a2].map(memberOf))) as [string, string, string];
  expect(mb).toMatch(/^bo#[A-Za-z0-9_-]+$/);
  expect(m1).toMatch(/^ana#[A-Za-z0-9_-]+$/);
  expect(m2).toMatch(/^ana#[A-Za-z0-9_-]+$/);
  expect(m2).not.toBe(m1);

  // Every page: two users, ana with both instances; one chip for ana, marked ×2.
  for (const p of [bo, a1, a2]) {
    await expect.poll(() => viewUsersMap(p)).toEqual({ bo: [mb], ana: [m1, m2] });
    await expect.poll(() => chips(p)).toEqual([
      { user: 'bo', instances: '1', text: expect.stringContaining('bo') },
      { user: 'ana', instances: '2', text: expect.stringContaining('ana') },
    ]);
    await expect(p.getByTestId('presence-ana')).toHaveCount(1);
    await expect(p.getByTestId('tabs-ana')).toHaveText('×2');
    await expect(p.getByTestId('tabs-bo')).toHaveCount(0);
  }
  await expect(a1.getByTestId('presence-ana')).toContainText('ana (you)');
  await expect(a2.getByTestId('presence-ana')).toContainText('ana (you)');
  await expect(bo.getByTestId('presence-ana')).not.toContainText('(you)');
  // bo saw ana arrive once (with her first tab), and says so once.
  expect(await usersJoinedOf(bo)).toEqual(['bo', 'ana']);
  await expect(bo.getByTestId('activity')).toHaveText('ana joined');

  // A claim belongs to the user: ana claims in one tab, it is hers in the other (which may
  // release it), and bo sees it claimed by ana.
  await addCard(bo, 'Write the release notes');
  for (const p of [bo, a1, a2]) await expect(p.locator('article.card')).toHaveCount(1);
  const [card] = (await cardsOf(bo)).map((c) => c.id) as [string];
  await a1.getByTestId(`claim-${card}`).click();
  for (const p of [a1, a2]) {
    await expect(p.getByTestId(`owner-${card}`)).toHaveText('claimed by you');
    await expect(p.getByTestId(`card-${card}`)).toHaveAttribute('data-claim', 'mine');
    await expect(p.getByTestId(`claim-${card}`)).toHaveText('release');
  }
  await expect(bo.getByTestId(`owner-${card}`)).toHaveText('claimed by ana');
  await expect(bo.getByTestId(`claim-${card}`)).toBeDisabled();
  const claim = (await logOf(bo)).find((e) => e.kind === 'op' && e.op.op === 'claim');
  expect(claim).toMatchObject({ sender: m1, user: 'ana' });
  await a2.getByTestId(`claim-${card}`).click(); // "release", from the other tab
  for (const p of [bo, a1, a2]) {
    await expect.poll(async () => (await cardsOf(p))[0]?.claimedBy).toBeNull();
    await expect(p.getByTestId(`owner-${card}`)).toHaveText('added by bo');
  }

  // Duplicate a1's tab: window.open of the page copies its sessionStorage (the SDK's saved
  // instance and session), yet the copy takes an instance of its own before connecting.
  const viewsBefore = (await logOf(bo)).filter((e) => e.kind === 'view').length;
  const [dup] = await Promise.all([a1.context().waitForEvent('page'), a1.evaluate(() => void window.open(location.href))]);
  const dupErrors: string[] = [];
  dup.on('pageerror', (e) => dupErrors.push(`dup pageerror: ${e.message}`));
  dup.on('console', (m) => {
    if (m.type() === 'error') dupErrors.push(`dup console.error: ${m.text()}`);
  });
  await dup.waitForSelector('body[data-ready="true"]', { timeout: 15_000 });
  expect(await dup.evaluate(() => Object.keys(sessionStorage).some((k) => k.startsWith('notify:')))).toBe(true);
  const md = await memberOf(dup);
  expect(md).toMatch(/^ana#/);
  expect([m1, m2]).not.toContain(md);

  // Everyone: ana once, with three tabs; the original is still m1, connected, never replaced.
  for (const p of [bo, a1, a2, dup]) {
    await expect.poll(() => viewUsersMap(p)).toEqual({ bo: [mb], ana: [m1, m2, md] });
    await expect(p.getByTestId('presence-ana')).toHaveCount(1);
    await expect(p.getByTestId('presence-ana')).toHaveAttribute('data-instances', '3');
    await expect(p.getByTestId('tabs-ana')).toHaveText('×3');
    await expect(p.getByTestId('replaced-notice')).toBeHidden();
    expect((await logOf(p)).filter((e) => e.kind === 'replaced')).toEqual([]);
  }
  expect(await memberOf(a1)).toBe(m1);
  expect(await a1.evaluate(() => (window as any).board.client.state)).toBe('connected');
  // One view change for bo (the duplicate's join), and no user left: ana never went away.
  const boViews = (await logOf(bo)).filter((e) => e.kind === 'view');
  expect(boViews.length).toBe(viewsBefore + 1);
  expect(boViews.at(-1)).toMatchObject({ usersJoined: [], usersLeft: [] });
  // from ana's arrival on, the original is in every view bo saw: never removed, never rejoined
  const since = boViews.findIndex((v) => v.kind === 'view' && v.members.includes(m1));
  expect(since).toBeGreaterThan(0);
  expect(boViews.slice(since).every((v) => v.kind === 'view' && v.members.includes(m1))).toBe(true);
  expect(await usersJoinedOf(bo)).toEqual(['bo', 'ana']);
  expect(await usersLeftOf(bo)).toEqual([]);

  // Closing the duplicate: back to two tabs, and still no departure of ana.
  await dup.close();
  for (const p of [bo, a1, a2]) {
    await expect.poll(() => viewUsersMap(p), { timeout: 20_000 }).toEqual({ bo: [mb], ana: [m1, m2] });
    await expect(p.getByTestId('tabs-ana')).toHaveText('×2');
  }
  expect(await usersLeftOf(bo)).toEqual([]);

  for (const e of [...errors, dupErrors]) expect(e).toEqual([]);
});

test('a clash the tab check cannot see (a copied session in another context) shows the replaced notice, and the tab goes on', async ({ newPage, notify, web, group }) => {
  const o = { ws: notify.url, origin: web.origin, board: group };
  const [bo, a1, copy] = await Promise.all([newPage(), newPage(), newPage()]);
  const errors = [await openBoard(bo, { ...o, member: 'bo' }), await openBoard(a1, { ...o, member: 'ana' })];
  const m1 = await memberOf(a1);
  await expect.poll(() => viewUsersMap(bo)).toEqual({ bo: [expect.stringMatching(/^bo#/)], ana: [m1] });
  await a1.evaluate(() => dispatchEvent(new Event('pagehide'))); // the SDK saves its session now
  const saved = await a1.evaluate(() => JSON.stringify(Object.entries(sessionStorage)));
  // Another context with a copy of a1's sessionStorage: no BroadcastChannel reaches a1 from
  // there, so it connects as a1's instance, and the server replaces a1 (4002).
  await copy.addInitScript((entries) => {
    if (sessionStorage.length === 0) for (const [k, v] of JSON.parse(entries) as [string, string][]) sessionStorage.setItem(k, v);
  }, saved);
  errors.push(await openBoard(copy, { ...o, member: 'ana' }));
  expect(await memberOf(copy)).toBe(m1);

  // a1 says so, and goes on as a new instance of ana: ana is still present, never left.
  await expect(a1.getByTestId('replaced-notice')).toBeVisible();
  await expect(a1.getByTestId('replaced-notice')).toContainText(m1);
  const m1b = await memberOf(a1);
  expect(m1b).toMatch(/^ana#/);
  expect(m1b).not.toBe(m1);
  expect((await logOf(a1)).filter((e) => e.kind === 'replaced')).toEqual([{ kind: 'replaced', old: m1, new: m1b }]);
  await expect(a1.getByTestId('replaced-notice')).toContainText(m1b);
  for (const p of [bo, a1, copy]) {
    await expect.poll(() => viewUsersMap(p), { timeout: 20_000 }).toEqual({ bo: [expect.stringMatching(/^bo#/)], ana: [m1, m1b] });
    await expect(p.getByTestId('tabs-ana')).toHaveText('×2');
  }
  await expect(copy.getByTestId('replaced-notice')).toBeHidden();
  await expect(bo.getByTestId('replaced-notice')).toBeHidden();
  expect(await usersLeftOf(bo)).toEqual([]);
  // and it still works: a card from the replaced tab reaches everyone
  await addCard(a1, 'After the clash');
  for (const p of [bo, a1, copy]) await expect(p.locator('article.card')).toHaveCount(1);
  await a1.getByTestId('replaced-notice').getByRole('button').click();
  await expect(a1.getByTestId('replaced-notice')).toBeHidden();

  for (const e of errors) expect(e).toEqual([]);
});
