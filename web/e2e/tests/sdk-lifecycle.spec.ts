// The page lifecycle: a tab frozen by the browser (CDP Page.setWebLifecycleState), hidden tabs.
import { expect, test } from '../fixtures.ts';
import { gapFree, join, publish, snap } from '../member.ts';

test('a frozen then resumed tab misses nothing and causes no view change', async ({ newPage, notify, web, group }) => {
  const [a, b] = await Promise.all([newPage(), newPage()]);
  await join(a, web.origin, { url: notify.url, member: 'ana', group });
  await join(b, web.origin, { url: notify.url, member: 'bo', group });
  const viewsBefore = (await snap(b)).views.length;
  const cdp = await a.context().newCDPSession(a);
  await cdp.send('Page.setWebLifecycleState', { state: 'frozen' });
  for (let k = 0; k < 5; k++) await publish(b, { k }, { order: 'total' });
  await b.waitForTimeout(1_000);
  await cdp.send('Page.setWebLifecycleState', { state: 'active' });
  await expect.poll(async () => (await snap(a)).total.length, { timeout: 15_000 }).toBe(5);
  const [sa, sb] = await Promise.all([snap(a), snap(b)]);
  expect(gapFree(sa)).toBeNull();
  expect(sa.hash).toBe(sb.hash);
  // frozen for ~1 s: within suspect_timeout, whatever the page did on `freeze`
  expect(sb.views.length).toBe(viewsBefore);
});

test('a hidden page keeps its link: no heartbeat false alarm', async ({ newPage, notify, web, group }) => {
  const [a, b] = await Promise.all([newPage(), newPage()]);
  await join(a, web.origin, { url: notify.url, member: 'ana', group });
  await join(b, web.origin, { url: notify.url, member: 'bo', group });
  await a.evaluate(() => {
    Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => 'hidden' });
    document.dispatchEvent(new Event('visibilitychange'));
  });
  await a.waitForTimeout(6_000); // more than the heartbeat interval, quiet group
  await publish(b, { k: 1 }, { order: 'total' });
  await expect.poll(async () => (await snap(a)).total.length).toBe(1);
  expect((await snap(a)).states).toEqual(['connected']);
});
