// Helpers of the SDK browser tests: a page that is one member (pages/member.html + harness.js).
import type { Page } from '@playwright/test';
import { createHmac } from 'node:crypto';

export interface Snapshot {
  hash: string;
  total: [number, string, unknown][];
  fifo: Record<string, unknown[]>;
  messages: { offset: number; stream: string; seq: number; sender: string; payload: unknown; replayed: boolean }[];
  views: { view: number; members: string[]; joined: string[]; left: string[]; users: string[]; usersJoined: string[]; usersLeft: string[] }[];
  states: string[];
  events: string[];
  errors: string[];
  /** the group's `caught-up` events */
  caughtUp: { offset: number; count: number }[];
  restored: number;
  state: string;
  status: string;
  /** `users`: user → its instances (member ids) */
  view: { version: number; members: string[]; users: Record<string, string[]> } | null;
  member: string;
  instance: string | null;
  /** the client's `replaced` events */
  replaced: { old: string; new: string | null }[];
  pending: number;
  tokenCalls: number;
}

export interface StartOptions {
  url: string;
  member: string;
  group: string;
  wantState?: boolean;
  tokens?: boolean;
  storage?: boolean;
  backoff?: { baseMs?: number; capMs?: number };
  requestTimeoutMs?: number;
  /** the client's `instance` option (default: the SDK picks one) */
  instance?: string | null;
}

/** Open the member page in `page` and join; resolves with the member id. */
export async function join(page: Page, origin: string, o: StartOptions): Promise<string> {
  await page.goto(`${origin}/member.html`);
  await page.waitForFunction(() => (window as unknown as { h?: unknown }).h !== undefined);
  return page.evaluate((opts) => (window as any).h.start(opts), o);
}

export function snap(page: Page): Promise<Snapshot> {
  return page.evaluate(() => (window as any).h.snapshot());
}

export function publish(page: Page, payload: unknown, opts: Record<string, unknown> = {}): Promise<any> {
  return page.evaluate(([p, o]) => (window as any).h.publish(p, o), [payload, opts] as const);
}

/** Every stream of `s`'s messages is gap-free from its first seq, with no duplicates. */
export function gapFree(s: Snapshot): string | null {
  const last = new Map<string, number>();
  for (const m of s.messages) {
    const prev = last.get(m.stream);
    if (prev !== undefined && m.seq !== prev + 1) return `${m.stream}: seq ${m.seq} after ${prev}`;
    last.set(m.stream, m.seq);
  }
  return null;
}

/** An HS256 JWT for `sub`, valid `seconds` from now (the server checks it with `secret`). */
export function mintToken(secret: string, sub: string, seconds: number): string {
  const b64 = (x: unknown) => Buffer.from(JSON.stringify(x)).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  const body = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub, iat: now, exp: now + seconds })}`;
  return `${body}.${createHmac('sha256', secret).update(body).digest('base64url')}`;
}

/** The network as `page` sees it: while `blocked`, every connection attempt fails at once
 * (Playwright's `setOffline` does not touch WebSockets, so the route stands in for it). */
export async function network(page: Page): Promise<{ blocked: boolean }> {
  const net = { blocked: false };
  await page.routeWebSocket(/.*/, (ws) => {
    if (net.blocked) ws.close();
    else ws.connectToServer();
  });
  return net;
}
