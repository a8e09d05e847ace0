// Atomic publishes from a browser: committed everywhere, or aborted and delivered nowhere (G5).
import { expect, test } from '../fixtures.ts';
import { join, publish, snap } from '../member.ts';

test.use({ notifyOptions: { ackTimeout: 1, flushTimeout: 10 } });

test('an atomic publish commits when every member ACKs, and is handed over once confirmed', async ({ newPage, notify, web, group }) => {
  const pages = await Promise.all([newPage(), newPage(), newPage()]);
  for (const [i, p] of pages.entries()) await join(p, web.origin, { url: notify.url, member: `m${i}`, group });
  const r = await publish(pages[0]!, { claim: 7 }, { order: 'total', atomic: true });
  expect(r.committed).toBe(true);
  for (const p of pages) await expect.poll(async () => (await snap(p)).total.map(([, , x]) => x)).toEqual([{ claim: 7 }]);
});

test('a frozen peer past ack_timeout aborts it: rolled back, delivered to no one', async ({ newPage, notify, web, group }) => {
  const pages = await Promise.all([newPage(), newPage(), newPage()]);
  for (const [i, p] of pages.entries()) await join(p, web.origin, { url: notify.url, member: `m${i}`, group });
  await pages[2]!.evaluate(() => (window as any).h.m.client.freeze(2_500)); // reads nothing, ACKs nothing
  const r = await publish(pages[0]!, { claim: 9 }, { order: 'total', atomic: true });
  expect(r.committed).toBe(false);
  expect(r.reason).toBeTruthy();
  // The member that did not ACK in time is the failed one: the group removes it (view change
  // with reason ack_timeout). Behind the aborted message in the total order, a plain message
  // reaches the others; nobody, the frozen member included, ever handed over the claim.
  await publish(pages[1]!, { after: 1 }, { order: 'total' });
  for (const p of pages.slice(0, 2)) {
    await expect.poll(async () => (await snap(p)).total.map(([, , x]) => x), { timeout: 15_000 }).toEqual([{ after: 1 }]);
    expect(Object.keys((await snap(p)).view?.users ?? {})).toEqual(['m0', 'm1']);
  }
  await expect.poll(async () => (await snap(pages[2]!)).status, { timeout: 15_000 }).toBe('removed');
  expect((await snap(pages[2]!)).total).toEqual([]);
});
