// Users and instances in a real browser (issue 29; docs/protocol.md, "Users and instances"): one
// user in two browser contexts is two members of a group, shown as one user with two instances;
// a duplicated tab (a copy of sessionStorage, as window.open makes in Chromium) takes a new
// instance before it connects, so nobody is replaced (no 4002) and the group sees one join.
import type { Page } from '@playwright/test';
import { expect, test } from '../fixtures.ts';
import { gapFree, join, publish, snap, type Snapshot } from '../member.ts';

/** The payloads of `sender`'s FIFO messages, in the order `s` got them. */
const fifoOf = (s: Snapshot, sender: string): unknown[] =>
  s.messages.filter((m) => m.stream === `fifo:${sender}`).map((m) => m.payload);

test('two contexts of one user: one user with two instances, every message once and in order, present until the last one goes', async ({ newPage, notify, web, group }) => {
  const [cy, a1, a2] = await Promise.all([newPage(), newPage(), newPage()]);
  await join(cy, web.origin, { url: notify.url, member: 'cy', group });
  const i1 = await join(a1, web.origin, { url: notify.url, member: 'ana', group });
  const i2 = await join(a2, web.origin, { url: notify.url, member: 'ana', group });
  expect(i1).toMatch(/^ana#[A-Za-z0-9_-]+$/);
  expect(i2).toMatch(/^ana#[A-Za-z0-9_-]+$/);
  expect(i1).not.toBe(i2);
  const pages: Page[] = [cy, a1, a2];
  // settled: everyone sees cy and ana, ana with both instances
  for (const p of pages) {
    await expect.poll(async () => (await snap(p)).view?.users).toEqual({ cy: [expect.stringMatching(/^cy#/)], ana: [i1, i2] });
  }
  const settled = await Promise.all(pages.map(async (p) => (await snap(p)).views.length));
  // cy saw ana arrive once (with the first instance), not with the second
  const cyViews = (await snap(cy)).views;
  expect(cyViews.flatMap((v) => v.usersJoined)).toEqual(['cy', 'ana']);

  // Both instances and cy publish at once, FIFO and total interleaved.
  const N = 12;
  await Promise.all(
    [a1, a2, cy].map((p, j) =>
      p.evaluate(
        async ([n, j]) => {
          const h = (window as any).h;
          const sent = [];
          for (let k = 0; k < n; k++) sent.push(h.publish({ j, k }, { order: k % 3 === 2 ? 'total' : 'fifo' }));
          await Promise.all(sent);
        },
        [N, j] as const,
      ),
    ),
  );
  for (const p of pages) await expect.poll(async () => (await snap(p)).messages.length, { timeout: 15_000 }).toBe(3 * N);
  const snaps = await Promise.all(pages.map(snap));
  for (const [i, s] of snaps.entries()) {
    expect(gapFree(s), `page ${i}`).toBeNull();
    expect(new Set(s.messages.map((m) => m.offset)).size).toBe(3 * N); // each once
    expect(s.hash).toBe(snaps[0]!.hash); // the same total order and streams everywhere
    expect(s.views.length - settled[i]!).toBeLessThanOrEqual(1); // at most one view change after settling
    expect(s.replaced).toEqual([]);
  }
  // each instance's publishes reach the other in its FIFO order
  const want = (j: number) => Array.from({ length: N }, (_, k) => ({ j, k })).filter((_, k) => k % 3 !== 2);
  expect(fifoOf(snaps[2]!, i1)).toEqual(want(0));
  expect(fifoOf(snaps[1]!, i2)).toEqual(want(1));

  // One instance goes: ana is still here, through the other (no departure for anyone).
  await a1.evaluate(async () => {
    await (window as any).h.m.group.leave();
    (window as any).h.m.client.close();
  });
  for (const p of [cy, a2]) {
    await expect.poll(async () => (await snap(p)).view?.members.length).toBe(2);
    const s = await snap(p);
    expect(s.view?.users.ana).toEqual([i2]);
    const last = s.views[s.views.length - 1]!;
    expect(last.left).toEqual([i1]);
    expect(last.usersLeft).toEqual([]);
  }
  // and the last one going is ana leaving
  await a2.evaluate(() => (window as any).h.m.group.leave());
  await expect.poll(async () => (await snap(cy)).views.at(-1)?.usersLeft).toEqual(['ana']);
  expect((await snap(cy)).view?.users).toEqual({ cy: [expect.stringMatching(/^cy#/)] });
});

test('a duplicated tab takes a new instance before connecting: nobody is replaced, one join', async ({ newPage, notify, web, group }) => {
  const [cy, a] = await Promise.all([newPage(), newPage()]);
  await join(cy, web.origin, { url: notify.url, member: 'cy', group });
  const original = await join(a, web.origin, { url: notify.url, member: 'ana', group });
  await expect.poll(async () => Object.keys((await snap(cy)).view?.users ?? {})).toEqual(['cy', 'ana']);
  const cyViews = (await snap(cy)).views.length;
  const aViews = (await snap(a)).views.length;

  // window.open of the same page: Chromium gives the new tab a copy of this tab's
  // sessionStorage (the harness's options, and the SDK's saved instance and session), so it
  // starts as a duplicate of this one.
  const [dup] = await Promise.all([a.context().waitForEvent('page'), a.evaluate(() => void window.open(location.href))]);
  const copied = await dup.evaluate(() => sessionStorage.length);
  expect(copied).toBeGreaterThan(1); // it is a copy (the harness's options and the SDK's session)
  await dup.waitForFunction(() => (window as any).h?.reloaded !== undefined);
  await dup.evaluate(() => (window as any).h.reloaded);
  const sd = await snap(dup);
  expect(sd.member).toMatch(/^ana#/);
  expect(sd.member).not.toBe(original); // a new instance...
  expect(sd.states).toEqual(['connected']); // ...taken before connecting: no reconnect
  expect(sd.replaced).toEqual([]);
  for (const p of [cy, a]) {
    await expect.poll(async () => (await snap(p)).view?.users.ana).toEqual([original, sd.member]);
  }
  const [sc, sa] = await Promise.all([snap(cy), snap(a)]);
  // the original was never replaced: still connected, same instance, no 4002
  expect(sa.member).toBe(original);
  expect(sa.states).toEqual(['connected']);
  expect(sa.replaced).toEqual([]);
  // one view change each: the duplicate's join, no removal of anyone
  expect(sc.views.length).toBe(cyViews + 1);
  expect(sa.views.length).toBe(aViews + 1);
  expect(sc.views.at(-1)).toMatchObject({ joined: [sd.member], left: [], usersJoined: [], usersLeft: [] });
  // it works as a member of its own: its messages reach the original
  await publish(dup, { from: 'dup' });
  await expect.poll(async () => fifoOf(await snap(a), sd.member)).toEqual([{ from: 'dup' }]);
});
