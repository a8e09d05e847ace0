// Handlers that call leave, join or close while the SDK is handing them a batch of events.
import { expect, test } from '../fixtures.ts';
import { join, publish, snap } from '../member.ts';

test('leave from a message handler, join again from the removed handler, close from a handler', async ({ newPage, notify, web, group }) => {
  const [a, b] = await Promise.all([newPage(), newPage()]);
  const errors: string[] = [];
  a.on('pageerror', (e) => errors.push(String(e)));
  await join(a, web.origin, { url: notify.url, member: 'ana', group });
  await join(b, web.origin, { url: notify.url, member: 'bo', group });
  await a.evaluate(() => {
    const h = (window as any).h;
    // in the handlers `h` is this page's member (window.h.m)
    h.m.handlers.message = 'if (ev.payload && ev.payload.leave && !h.leftOnce) { h.leftOnce = true; g.leave(); }';
    h.m.handlers.removed = 'if (!h.rejoined) { h.rejoined = true; g.join().then(() => { h.back = true; }); }';
  });
  // a burst: the leave lands in the middle of it
  await Promise.all([1, 2, 3, 4, 5].map((k) => publish(b, { k, leave: k === 2 }, { order: 'total' })));
  await expect.poll(() => a.evaluate(() => (window as any).h.m.back === true), { timeout: 10_000 }).toBe(true);
  const sa = await snap(a);
  expect(sa.events).toContain('removed');
  expect(sa.status).toBe('joined');
  await publish(b, { k: 6 }, { order: 'total' });
  await expect.poll(async () => (await snap(a)).total.some(([, , p]) => (p as any).k === 6)).toBe(true);
  // close from inside a handler: later events are not handed over, pending publishes reject
  await a.evaluate(() => {
    const h = (window as any).h;
    h.m.handlers.message = 'if (ev.payload && ev.payload.close) { h.pendingAtClose = g.publish({ x: 1 }).catch((e) => e.code); client.close(); }';
  });
  const before = (await snap(a)).messages.length;
  await Promise.all([7, 8, 9].map((k) => publish(b, { k, close: k === 7 }, { order: 'total' })));
  await expect.poll(async () => (await snap(a)).state).toBe('closed');
  await b.waitForTimeout(300);
  const after = await snap(a);
  expect(after.messages.length).toBe(before + 1); // the closing message, nothing after it
  expect(await a.evaluate(() => (window as any).h.m.pendingAtClose)).toBe('closed');
  expect(errors).toEqual([]);
});
