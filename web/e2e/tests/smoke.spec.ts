// The harness itself, before any SDK: chromium runs, the page is on an http:// origin, a real
// notify server answers a raw WebSocket from it, and the origin allow-list lets it in.
import { expect, startStaticServer, test } from '../fixtures.ts';

test('a raw WebSocket from the page gets pong for ping (before hello)', async ({ newPage, notify }) => {
  const page = await newPage();
  expect(new URL(page.url()).protocol).toBe('http:');
  const reply = await page.evaluate((url) => new Promise<unknown>((resolve, reject) => {
    const ws = new WebSocket(url);
    const timer = setTimeout(() => reject(new Error('no pong in 5 s')), 5_000);
    ws.onopen = () => ws.send(JSON.stringify({ type: 'ping', req: 1 }));
    ws.onerror = () => reject(new Error('WebSocket error'));
    ws.onmessage = (ev) => {
      clearTimeout(timer);
      ws.close();
      resolve(JSON.parse(String(ev.data)));
    };
  }), notify.url);
  expect(reply).toEqual({ type: 'pong', req: 1 });
});

test('the page has what the SDK needs, and one yjs through the import map', async ({ newPage, web, notify }) => {
  const page = await newPage();
  const got = await page.evaluate(async () => {
    const Y = await import('yjs');
    const doc = new Y.Doc();
    doc.getText('t').insert(0, 'hi');
    return {
      text: doc.getText('t').toString(),
      secure: window.isSecureContext,
      session: typeof sessionStorage.setItem,
      decompress: typeof DecompressionStream,
      subtle: typeof crypto.subtle?.digest,
      config: await (await fetch('/config.json')).json(),
    };
  });
  expect(got).toEqual({ text: 'hi', secure: true, session: 'function', decompress: 'function',
                        subtle: 'function', config: { url: notify.url } });
  expect(web.config).toEqual({ url: notify.url });
});

test('a page on another origin is refused (the allow-list is on)', async ({ newPage, notify }) => {
  const other = await startStaticServer(); // same pages, another port: another origin
  try {
    const page = await newPage();
    await page.goto(other.url('/'));
    const outcome = await page.evaluate((url) => new Promise<string>((resolve) => {
      const ws = new WebSocket(url);
      ws.onopen = () => resolve('open');
      ws.onerror = () => resolve('refused');
    }), notify.url);
    expect(outcome).toBe('refused');
  } finally {
    await other.close();
  }
});

test('the Python observer sees what another member publishes', async ({ observe, group }) => {
  const a = await observe({ group, member: 'py-a' });
  const b = await observe({ group, member: 'py-b' });
  const published = await b.publish({ n: 1 }, { order: 'total' });
  expect(published.kind).toBe('published');
  const [m] = await a.waitForMessages(1);
  expect(m).toMatchObject({ kind: 'message', sender: expect.stringMatching(/^py-b#/), stream: 'total', seq: 1, payload: { n: 1 } });
  await expect.poll(() => a.events.some((e) => e.kind === 'view' && (e.members as string[]).length === 2))
    .toBe(true);
});
