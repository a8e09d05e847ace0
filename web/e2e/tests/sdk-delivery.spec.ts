// The browser SDK against a real server, in Debian's chromium: what a web app is promised.
// Each page is its own browser context (its own device and sessionStorage).
import { expect, test } from '../fixtures.ts';
import { gapFree, join, network, publish, snap } from '../member.ts';

test('three browsers and a Python observer converge: same total order, same state hash', async ({ newPage, notify, web, group, observe }) => {
  const obs = await observe({ group, member: 'py-obs' });
  const pages = await Promise.all([newPage(), newPage(), newPage()]);
  const names = ['ana', 'bo', 'cy'];
  for (const [i, p] of pages.entries()) await join(p, web.origin, { url: notify.url, member: names[i]!, group });
  // Interleaved publishes from all three: total order and per-sender FIFO.
  await Promise.all(pages.map((p, i) => p.evaluate(async ([me, n]) => {
    const h = (window as any).h;
    const sent = [];
    for (let k = 0; k < n; k++) sent.push(h.publish({ from: me, k }, { order: k % 2 ? 'fifo' : 'total' }));
    return Promise.all(sent);
  }, [names[i]!, 20] as const)));
  await expect.poll(async () => (await Promise.all(pages.map(snap))).map((s) => s.messages.length), { timeout: 15_000 })
    .toEqual([60, 60, 60]);
  const snaps = await Promise.all(pages.map(snap));
  expect(new Set(snaps.map((s) => s.hash)).size).toBe(1);
  for (const s of snaps) expect(gapFree(s)).toBeNull();
  // The Python SDK saw the same total order.
  const pyMessages = await obs.waitForMessages(60, 15_000);
  const pyTotal = pyMessages.filter((m) => m.stream === 'total').map((m) => [m.offset, m.sender, m.payload]);
  expect(pyTotal).toEqual(snaps[0]!.total);
  expect(snaps[0]!.total.length).toBe(30);
});

test('a short drop resumes with no view change and no gap', async ({ newPage, notify, web, group }) => {
  const [a, b] = await Promise.all([newPage(), newPage()]);
  await join(a, web.origin, { url: notify.url, member: 'ana', group });
  await join(b, web.origin, { url: notify.url, member: 'bo', group });
  await publish(b, { before: 1 }, { order: 'total' });
  const viewsBefore = (await snap(b)).views.length;
  const eventsBefore = (await snap(a)).events.length;
  await a.evaluate(() => (window as any).h.m.client.dropLink('test: short drop'));
  for (let k = 0; k < 10; k++) await publish(b, { during: k }, { order: k % 2 ? 'total' : 'fifo' });
  await expect.poll(async () => (await snap(a)).messages.length, { timeout: 10_000 }).toBe(11);
  const [sa, sb] = await Promise.all([snap(a), snap(b)]);
  expect(sa.states).toEqual(['connected', 'reconnecting', 'connected']);
  expect(sb.views.length).toBe(viewsBefore); // nobody saw a view change
  expect(sa.events.slice(eventsBefore)).not.toContain('view-changing');
  expect(sa.events.slice(eventsBefore)).not.toContain('view');
  expect(sa.events.slice(eventsBefore)).toContain('view-resumed');
  expect(gapFree(sa)).toBeNull();
  expect(sa.hash).toBe(sb.hash);
});

test('publishes made offline are sent once when back, never twice', async ({ newPage, notify, web, group }) => {
  const [a, b] = await Promise.all([newPage(), newPage()]);
  const net = await network(a);
  await join(a, web.origin, { url: notify.url, member: 'ana', group });
  await join(b, web.origin, { url: notify.url, member: 'bo', group });
  net.blocked = true;
  await a.evaluate(() => (window as any).h.m.client.dropLink('test: offline'));
  await a.evaluate(() => (window as any).h.publishLater([1, 2, 3, 4, 5].map((n) => ({ offline: n })), { order: 'total' }));
  await a.waitForTimeout(700);
  expect((await snap(a)).pending).toBe(5);
  net.blocked = false;
  await expect.poll(() => a.evaluate(() => (window as any).h.results.length), { timeout: 15_000 }).toBe(5);
  const results = await a.evaluate(() => (window as any).h.results);
  expect(results.every((r: any) => typeof r.offset === 'number' && r.offset > 0)).toBe(true);
  await expect.poll(async () => (await snap(b)).total.length, { timeout: 10_000 }).toBe(5);
  const sb = await snap(b);
  expect(sb.total.map(([, , p]) => p)).toEqual([1, 2, 3, 4, 5].map((n) => ({ offline: n })));
  await expect.poll(async () => (await snap(a)).hash).toBe(sb.hash);
});

test('a late joiner gets the state, then only later messages', async ({ newPage, notify, web, group }) => {
  const [a, b, c] = await Promise.all([newPage(), newPage(), newPage()]);
  await join(a, web.origin, { url: notify.url, member: 'ana', group, wantState: true });
  await join(b, web.origin, { url: notify.url, member: 'bo', group, wantState: true });
  for (let k = 0; k < 15; k++) await publish(k % 2 ? a : b, { k }, { order: k % 3 ? 'total' : 'fifo' });
  await join(c, web.origin, { url: notify.url, member: 'cy', group, wantState: true });
  await publish(a, { after: 1 }, { order: 'total' });
  await expect.poll(async () => (await snap(c)).total.length, { timeout: 10_000 }).toBe(11);
  const [sa, sc] = await Promise.all([snap(a), snap(c)]);
  expect(sc.events).toContain('state-received');
  expect(sc.restored).toBe(15); // the state came whole in the snapshot...
  expect(sc.messages.length).toBe(1); // ...and only the later message as a message
  expect(sc.hash).toBe(sa.hash);
});

test('a reload resumes from sessionStorage: only what was missed arrives, no view change', async ({ newPage, notify, web, group }) => {
  const [a, b] = await Promise.all([newPage(), newPage()]);
  await join(a, web.origin, { url: notify.url, member: 'ana', group, wantState: true });
  await join(b, web.origin, { url: notify.url, member: 'bo', group, wantState: true });
  for (let k = 0; k < 8; k++) await publish(b, { k }, { order: 'total' });
  await expect.poll(async () => (await snap(a)).total.length).toBe(8);
  const viewsBefore = (await snap(b)).views.length;
  const reloading = a.reload();
  for (let k = 8; k < 12; k++) await publish(b, { k }, { order: 'total' });
  await reloading;
  await a.waitForFunction(() => (window as any).h?.reloaded !== undefined);
  await a.evaluate(() => (window as any).h.reloaded);
  await expect.poll(async () => (await snap(a)).total.length, { timeout: 10_000 }).toBe(12);
  const [sa, sb] = await Promise.all([snap(a), snap(b)]);
  expect(sa.restored).toBeGreaterThanOrEqual(8); // the saved state...
  expect(sa.restored + sa.messages.length).toBe(12); // ...plus exactly what it lacked
  expect(sa.hash).toBe(sb.hash);
  expect(sb.views.length).toBe(viewsBefore);
  expect(gapFree(sa)).toBeNull();
});
