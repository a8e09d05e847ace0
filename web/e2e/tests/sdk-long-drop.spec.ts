// Away longer than the server's suspect_timeout: removed, then back with durable catch-up (G8).
import { expect, test } from '../fixtures.ts';
import { gapFree, join, network, publish, snap } from '../member.ts';

test.use({ notifyOptions: { suspectTimeout: 1 } });

test('a long drop: two view changes, caught-up, every message exactly once', async ({ newPage, notify, web, group }) => {
  const [a, b] = await Promise.all([newPage(), newPage()]);
  const net = await network(a);
  await join(a, web.origin, { url: notify.url, member: 'ana', group, backoff: { baseMs: 100, capMs: 800 } });
  await join(b, web.origin, { url: notify.url, member: 'bo', group });
  await publish(b, { k: 0 }, { order: 'total' });
  await expect.poll(async () => (await snap(a)).total.length).toBe(1);
  net.blocked = true;
  await a.evaluate(() => (window as any).h.m.client.dropLink('test: long drop'));
  // b sees ana removed, then keeps publishing
  await expect.poll(async () => Object.keys((await snap(b)).view?.users ?? {}), { timeout: 10_000 }).toEqual(['bo']);
  for (let k = 1; k <= 6; k++) await publish(b, { k }, { order: k % 2 ? 'total' : 'fifo' });
  await expect.poll(async () => (await snap(a)).states.includes('suspended')).toBe(true);
  net.blocked = false;
  await expect.poll(async () => Object.keys((await snap(b)).view?.users ?? {}), { timeout: 15_000 }).toEqual(['bo', 'ana']);
  await expect.poll(async () => (await snap(a)).messages.length, { timeout: 10_000 }).toBe(7);
  const [sa, sb] = await Promise.all([snap(a), snap(b)]);
  const memberships = sb.views.map((v) => v.users.join(','));
  expect(memberships.slice(-2)).toEqual(['bo', 'bo,ana']); // removed, then rejoined: two changes
  expect(sa.events).toContain('caught-up');
  expect(sa.messages.filter((m) => m.replayed).length).toBe(6); // what it missed, replayed
  expect(gapFree(sa)).toBeNull();
  expect(sa.hash).toBe(sb.hash);
  expect(sa.states).toEqual(['connected', 'reconnecting', 'suspended', 'connected']);
});
