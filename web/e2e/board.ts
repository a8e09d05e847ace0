// Helpers of the demo board tests (tests/demo-board*.spec.ts): a page that is one member of the
// board (web/demo/dist, served by the `web` fixture at /demo/), and what its `window.board` says.
import type { Page } from '@playwright/test';

export interface Card {
  id: string;
  title: string;
  column: 'todo' | 'doing' | 'done';
  by: string;
  claimedBy: string | null;
}

export type LogEntry =
  /** `sender`: the instance (`user#instance`) that sent it; `user`: its user */
  | { kind: 'op'; offset: number; seq: number; sender: string; user: string; op: { op: string; id: string; [k: string]: unknown } }
  | { kind: 'view'; version: number; members: string[]; users: string[]; usersJoined: string[]; usersLeft: string[] }
  | { kind: 'state'; offset: number; reason: string | null }
  | { kind: 'removed'; group: string; reason: string | null }
  | { kind: 'replaced'; old: string; new: string | null };

export interface BoardOptions {
  /** the notify server, ws://… */
  ws: string;
  /** the static server's origin (the demo is at /demo/) */
  origin: string;
  member: string;
  board: string;
  /** the tab check's wait (the SDK's `tabCheckMs`; the demo's default is the SDK's 100 ms) */
  tabCheckMs?: number;
}

/** Open the demo board in `page` as `member` and wait until it has joined both of its groups
 * (`body[data-ready]`). Page errors and console errors are collected in the returned list. */
export async function openBoard(page: Page, o: BoardOptions): Promise<string[]> {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(`${o.member} pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(`${o.member} console.error: ${m.text()}`);
  });
  const q = new URLSearchParams({ ws: o.ws, member: o.member, board: o.board });
  if (o.tabCheckMs !== undefined) q.set('tabCheckMs', String(o.tabCheckMs));
  await page.goto(`${o.origin}/demo/?${q}`);
  await page.waitForSelector('body[data-ready="true"]', { timeout: 15_000 });
  return errors;
}

export const hashOf = (p: Page): Promise<string> => p.evaluate(() => (window as any).board.hash());
export const cardsOf = (p: Page): Promise<Card[]> => p.evaluate(() => (window as any).board.state().cards);
export const logOf = (p: Page): Promise<LogEntry[]> => p.evaluate(() => (window as any).board.log);
export const opsOf = async (p: Page) =>
  (await logOf(p)).filter((e): e is Extract<LogEntry, { kind: 'op' }> => e.kind === 'op');
/** The view's members: instances, `user#instance` (the demo uses the SDK's default instances). */
export const viewMembers = (p: Page): Promise<string[] | null> =>
  p.evaluate(() => (window as any).board.group.view?.members ?? null);
/** The view's users, in the seniority of their first instance. */
export const viewUsers = (p: Page): Promise<string[] | null> =>
  p.evaluate(() => { const v = (window as any).board.group.view; return v ? [...v.users.keys()] : null; });
/** The view's users with their instances, as an object. */
export const viewUsersMap = (p: Page): Promise<Record<string, string[]> | null> =>
  p.evaluate(() => { const v = (window as any).board.group.view; return v ? Object.fromEntries(v.users) : null; });
/** This page's member id (`user#instance`). */
export const memberOf = (p: Page): Promise<string> => p.evaluate(() => (window as any).board.member);
/** The text of a card's note (Y.Text `card:<id>` of the page's Y.Doc). */
export const noteOf = (p: Page, id: string): Promise<string> =>
  p.evaluate((k) => (window as any).board.doc.getText(`card:${k}`).toString(), id);

/** Add a card through the form, as a user would. */
export async function addCard(p: Page, title: string): Promise<void> {
  await p.getByTestId('add-card-input').fill(title);
  await p.getByTestId('add-card-button').click();
}

/** What a page shows of its cards: title, column (the column element the card is in) and the
 * claim state, read from the DOM. */
export function shownCards(p: Page): Promise<{ id: string; title: string; column: string; claim: string; owner: string }[]> {
  return p.evaluate(() =>
    [...document.querySelectorAll<HTMLElement>('article.card')].map((el) => {
      const id = el.dataset.testid!.slice('card-'.length);
      return {
        id,
        title: el.querySelector(`[data-testid="title-${id}"]`)?.textContent ?? '',
        column: el.closest('.column')?.id.replace(/^col-/, '') ?? '',
        claim: el.dataset.claim ?? '',
        owner: el.querySelector(`[data-testid="owner-${id}"]`)?.textContent ?? '',
      };
    }).sort((a, b) => a.id.localeCompare(b.id)));
}

/** Three (or more) members, each in its own context, with their board open and in every view:
 * their pages and the errors each page collects. */
export async function openBoards(
  newPage: () => Promise<Page>,
  members: readonly string[],
  o: { ws: string; origin: string; board: string },
): Promise<{ pages: Page[]; errors: string[][] }> {
  const pages = await Promise.all(members.map(() => newPage()));
  const errors: string[][] = [];
  for (const [i, p] of pages.entries()) errors.push(await openBoard(p, { ...o, member: members[i]! }));
  return { pages, errors };
}
