// Tokens that expire while connected: getToken is asked ahead of `exp` and the refresh is in
// force before the server would close with 4005.
import { expect, test } from '../fixtures.ts';
import { join, mintToken, publish, snap } from '../member.ts';

const SECRET = 'e2e-secret-for-token-refresh-tests-0123456789';
test.use({ notifyOptions: { authHs256Secret: SECRET, authLeeway: 0 } });

test('token refresh: a 4 s token renewed again and again, never closed 4005', async ({ newPage, notify, web, group }) => {
  const [a, b] = await Promise.all([newPage(), newPage()]);
  for (const p of [a, b]) await p.exposeFunction('mintToken', (sub: string) => mintToken(SECRET, sub, 4));
  await join(a, web.origin, { url: notify.url, member: 'ana', group, tokens: true });
  await join(b, web.origin, { url: notify.url, member: 'bo', group, tokens: true });
  await a.waitForTimeout(9_000); // more than two lifetimes of a token
  await publish(a, { still: 'here' }, { order: 'total' });
  await expect.poll(async () => (await snap(b)).total.length).toBe(1);
  const sa = await snap(a);
  expect(sa.states).toEqual(['connected']); // never dropped
  expect(sa.tokenCalls).toBeGreaterThanOrEqual(3); // the hello's, then refreshes
  expect(sa.errors).toEqual([]);
});
