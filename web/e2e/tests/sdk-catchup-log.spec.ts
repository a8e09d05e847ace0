// Catch-up from the log in the browser (issue 30, G8): a page away while more was published than
// the server keeps in memory (`--window-messages 20`) is told `catchup_log` when it resumes and
// reads the gap with `history` pages (web/sdk/src/catchup.ts). It must hand the page every
// message once, in order, with no reset; the server's /metrics shows the pages were read, so a
// gap served from memory (or skipped) fails here.
import { expect, test } from '../fixtures.ts';
import { gapFree, join, network, snap } from '../member.ts';

const WINDOW = 20;
const MISSED = 200;

// suspectTimeout: the page comes back as the same member (a resume, no view change), however
// long the publishes take
test.use({ notifyOptions: { windowMessages: WINDOW, suspectTimeout: 30 } });

/** `notify_history_pages_total` of the server's /metrics. */
function historyPages(metrics: string): number {
  const line = metrics.split('\n').find((l) => l.startsWith('notify_history_pages_total '));
  if (line === undefined) throw new Error('/metrics has no notify_history_pages_total');
  return Number(line.split(' ')[1]);
}

test('away past the in-memory window: the gap is read from the log, every message once, in order, no reset', async ({ newPage, notify, web, group, observe }) => {
  const pub = await observe({ group, member: 'py-pub' });
  const a = await newPage();
  const net = await network(a);
  await join(a, web.origin, { url: notify.url, member: 'ana', group, backoff: { baseMs: 100, capMs: 800 } });
  // (members are instances: `ana#...`)
  await pub.waitFor((e) => e.kind === 'view' && (e.members as string[]).some((m) => m.startsWith('ana#')));
  const pagesBefore = historyPages(await notify.metrics());
  const eventsBefore = (await snap(a)).events.length;

  net.blocked = true;
  await a.evaluate(() => (window as any).h.m.client.dropLink('test: away past the window'));
  await expect.poll(async () => (await snap(a)).state).toBe('reconnecting');
  const published = await Promise.all(Array.from({ length: MISSED }, (_, k) => pub.publish({ k })));
  expect(published.filter((r) => r.kind !== 'published')).toEqual([]);
  const sent = await pub.waitForMessages(MISSED, 15_000); // the publisher's own copy: the order to meet
  expect(historyPages(await notify.metrics())).toBe(pagesBefore); // nothing read from the log yet

  net.blocked = false;
  await expect.poll(async () => (await snap(a)).caughtUp.length, { timeout: 20_000 }).toBe(1);
  const s = await snap(a);
  // every message once, in the log's order, each a replay
  expect(s.messages.map((m) => [m.offset, m.stream, m.seq, m.payload]))
    .toEqual(sent.map((m) => [m.offset, m.stream, m.seq, m.payload]));
  expect(s.messages.map((m) => (m.payload as { k: number }).k).sort((x, y) => x - y))
    .toEqual(Array.from({ length: MISSED }, (_, k) => k));
  expect(s.messages.every((m) => m.replayed)).toBe(true);
  expect(gapFree(s)).toBeNull();
  // resumed (no view change, no reset), then `caught-up` after the last message, counting them all
  const since = s.events.slice(eventsBefore);
  expect(since).not.toContain('reset');
  expect(since).not.toContain('view');
  expect(since).not.toContain('view-changing');
  expect(since.filter((e) => e !== 'message')).toEqual(['view-resumed', 'caught-up']);
  expect(since.at(-1)).toBe('caught-up');
  expect(s.caughtUp).toEqual([{ offset: sent.at(-1)!.offset, count: MISSED }]);
  expect(s.states).toEqual(['connected', 'reconnecting', 'connected']);
  expect(s.errors).toEqual([]);
  // the gap came from the log: more than the window was missed, and history pages were read
  expect(MISSED).toBeGreaterThan(WINDOW);
  expect(historyPages(await notify.metrics())).toBeGreaterThan(pagesBefore);
  // and it stays in step: a message published now is handed over live, once
  await pub.publish({ k: MISSED });
  await expect.poll(async () => (await snap(a)).messages.length).toBe(MISSED + 1);
  const after = await snap(a);
  expect(after.messages.at(-1)).toMatchObject({ payload: { k: MISSED }, replayed: false });
  expect(gapFree(after)).toBeNull();
});
