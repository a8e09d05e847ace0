// Fixtures of the browser tests: import `test` and `expect` from here instead of
// '@playwright/test'.
//
//   import { test, expect } from '../fixtures.ts';
//   test.use({ notifyOptions: { suspectTimeout: 1 } });   // this file's server: `notify serve` flags
//   test('...', async ({ notify, web, group, newPage, observe }) => { ... });
//
// Worker-scoped (one per test file and option set, shared by its tests; give each test its own
// group, the `group` fixture does):
//   web      a static HTTP server on 127.0.0.1 (node:http): the test pages (web/e2e/pages) at /,
//            the bundles of global-setup.ts at /build/, the demo's dist at /demo/, and
//            /config.json ({"url": <notify.url>}, as `./dev demo` serves it)
//   notify   a real `notify serve --store memory --host 127.0.0.1 --port 0` from the repository's
//            .venv, ready (/readyz 200) before the first test, stopped (and waited for) after the
//            last; only the `web` origin may open WebSockets from a browser (`--origin`)
// Test-scoped:
//   group        a group name no other test uses: `t-<test id>`
//   newPage      a page in a new browser context (its own sessionStorage, its own "device")
//                opened at web's test page; every context is closed at the end of the test
//   startNotify  another server with other options, stopped at the end of the test
//   observe      a Python SDK member (observer.py) that joins a group and records every event
//
// Nothing outlives the run: every process started here is stopped at teardown (SIGTERM, then
// SIGKILL after a bounded wait), and killed at once if the worker process itself exits.
import { test as base, expect, type Page } from '@playwright/test';
import { spawn, type ChildProcess } from 'node:child_process';
import { createReadStream, createWriteStream, existsSync, mkdirSync, mkdtempSync, rmSync,
         statSync, type WriteStream } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { extname, join, normalize, sep } from 'node:path';
import { createInterface } from 'node:readline';
import { BUILD_DIR, DEMO_DIST, E2E, LOG_DIR, NOTIFY_BIN, PAGES_DIR, PYTHON } from './paths.ts';

export { expect };

// -- options ---------------------------------------------------------------------------------------

/** `notify serve` flags, camelCase: `{ suspectTimeout: 1 }` is `--suspect-timeout 1`, `true` is
 * a bare flag (`authRequired: true` is `--auth-required`). The common ones are typed; any other
 * flag of `notify serve --help` works the same way. */
export interface NotifyOptions {
  suspectTimeout?: number;
  ackTimeout?: number;
  flushTimeout?: number;
  installHold?: number;
  heartbeatInterval?: number;
  heartbeatTimeout?: number;
  helloTimeout?: number;
  idleGroup?: number;
  maxFrameBytes?: number;
  maxOutboundFrames?: number;
  /** HS256 secret: the server then checks tokens (member = the token's `sub`) */
  authHs256Secret?: string;
  authAudience?: string;
  authIssuer?: string;
  authLeeway?: number;
  authRequired?: boolean;
  /** 'memory' (default) or 'sqlite' (a fresh data dir, kept across `restart()`) */
  store?: 'memory' | 'sqlite';
  /** allowed browser Origins: 'static' (default) allows only the `web` fixture's origin,
   * 'any' checks none, or a list */
  origins?: 'static' | 'any' | string[];
  /** more arguments, as they are */
  args?: string[];
  [flag: string]: string | number | boolean | string[] | undefined;
}

// -- the static server -----------------------------------------------------------------------------

export interface StaticServer {
  /** http://127.0.0.1:PORT */
  origin: string;
  port: number;
  /** an absolute URL on this server: `web.url('/index.html?x=1')` */
  url(path?: string): string;
  /** served at /config.json; the `notify` fixture sets `url` to its WebSocket URL */
  config: Record<string, unknown>;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.map': 'application/json',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.wasm': 'application/wasm',
  '.txt': 'text/plain; charset=utf-8',
};

/** Serve `/config.json`, `/build/*`, `/demo/*` and the test pages on 127.0.0.1, a free port. */
export async function startStaticServer(): Promise<StaticServer & { close(): Promise<void> }> {
  const roots: [string, string][] = [['/build/', BUILD_DIR], ['/demo/', DEMO_DIST], ['/', PAGES_DIR]];
  const state = { config: {} as Record<string, unknown> };
  const server: Server = createServer((req, res) => {
    const path = decodeURIComponent((req.url ?? '/').split('?', 1)[0]!);
    const headers = { 'Cache-Control': 'no-store' };
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, headers).end();
      return;
    }
    if (path === '/favicon.ico') { // chromium asks for it now and then: not a test's error
      res.writeHead(204, headers).end();
      return;
    }
    if (path === '/config.json') {
      res.writeHead(200, { ...headers, 'Content-Type': 'application/json' })
        .end(JSON.stringify(state.config));
      return;
    }
    for (const [prefix, dir] of roots) {
      if (!path.startsWith(prefix)) continue;
      let file = normalize(join(dir, path.slice(prefix.length)));
      if (file !== dir && !file.startsWith(dir + sep)) break; // no way out of the root
      if (existsSync(file) && statSync(file).isDirectory()) file = join(file, 'index.html');
      if (!existsSync(file)) break;
      res.writeHead(200, { ...headers, 'Content-Type': TYPES[extname(file)] ?? 'application/octet-stream' });
      if (req.method === 'HEAD') res.end();
      else createReadStream(file).pipe(res);
      return;
    }
    res.writeHead(404, { ...headers, 'Content-Type': 'text/plain' }).end(`not found: ${path}\n`);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const port = (server.address() as AddressInfo).port;
  const origin = `http://127.0.0.1:${port}`;
  return {
    origin,
    port,
    url: (path = '/') => origin + path,
    get config() { return state.config; },
    set config(c) { state.config = c; },
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

// -- processes -------------------------------------------------------------------------------------

const children = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of children) c.kill('SIGKILL'); // the worker died: leave nothing behind
});

let logCounter = 0;
function logFile(kind: string): { path: string; stream: WriteStream } {
  mkdirSync(LOG_DIR, { recursive: true });
  const worker = process.env.TEST_WORKER_INDEX ?? '0';
  const path = join(LOG_DIR, `${kind}-w${worker}-${process.pid}-${++logCounter}.log`);
  return { path, stream: createWriteStream(path, { flags: 'a' }) };
}

function childEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith('NOTIFY_')) env[k] = v; // no stray NOTIFY_* configuration
  }
  env.PYTHONUNBUFFERED = '1';
  return env;
}

function exited(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

/** SIGTERM (after SIGCONT, in case it was paused), SIGKILL if it is not gone within `graceMs`. */
async function terminate(child: ChildProcess, graceMs = 10_000): Promise<number | null> {
  const done = exited(child);
  if (child.exitCode === null && child.signalCode === null) {
    child.kill('SIGCONT');
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    try {
      return await done;
    } finally {
      clearTimeout(timer);
      children.delete(child);
    }
  }
  children.delete(child);
  return done;
}

function flagsOf(opts: NotifyOptions, staticOrigin: string | undefined): string[] {
  const args: string[] = [];
  for (const [key, value] of Object.entries(opts)) {
    if (value === undefined || key === 'store' || key === 'origins' || key === 'args') continue;
    const flag = '--' + key.replace(/[A-Z]/g, (m) => '-' + m.toLowerCase()); // authHs256Secret: --auth-hs256-secret
    if (value === true) args.push(flag);
    else if (value === false) continue;
    else if (Array.isArray(value)) for (const v of value) args.push(flag, v);
    else args.push(flag, String(value));
  }
  const origins = opts.origins ?? 'static';
  if (origins === 'static') {
    if (staticOrigin) args.push('--origin', staticOrigin, '--origin', staticOrigin.replace('127.0.0.1', 'localhost'));
  } else if (origins !== 'any') {
    for (const o of origins) args.push('--origin', o);
  }
  return [...args, ...(opts.args ?? [])];
}

// -- the notify server -----------------------------------------------------------------------------

export interface NotifyServer {
  /** ws://127.0.0.1:PORT */
  url: string;
  /** http://127.0.0.1:PORT (/readyz, /healthz, /metrics) */
  httpUrl: string;
  port: number;
  /** of the current process (changes on restart) */
  pid: number;
  /** its stdout and stderr (JSON log lines) */
  logPath: string;
  /** the `notify serve` arguments it runs with */
  args: string[];
  /** SIGTERM (graceful: clients are told 4003), wait; the exit status */
  stop(): Promise<number | null>;
  /** SIGKILL (a crash), wait */
  kill(): Promise<void>;
  /** start again on the same port and data dir (after stop or kill; stops it first if running) */
  restart(): Promise<void>;
  /** SIGSTOP / SIGCONT: a server that hangs (connections stay open, nothing answers) */
  pause(): void;
  resume(): void;
  /** GET /metrics, as text */
  metrics(): Promise<string>;
}

/** Start `notify serve` (memory store, 127.0.0.1, a free port, JSON logs) and wait until
 * /readyz answers 200. `staticOrigin` is the origin `origins: 'static'` allows. */
export async function startNotify(opts: NotifyOptions = {},
                                  staticOrigin?: string): Promise<NotifyServer & { dispose(): Promise<void> }> {
  if (!existsSync(NOTIFY_BIN)) {
    throw new Error(`${NOTIFY_BIN} is missing: run ./dev setup (or set NOTIFY_BIN)`);
  }
  const dataDir = mkdtempSync(join(tmpdir(), 'notify-e2e-'));
  const log = logFile('notify');
  const base = ['serve', '--store', opts.store ?? 'memory', '--host', '127.0.0.1',
                '--data-dir', dataDir, '--log-format', 'json', '--shutdown-grace', '1',
                ...flagsOf(opts, staticOrigin)];
  let port = 0;
  let child: ChildProcess;

  const launch = async (): Promise<void> => {
    const args = [...base, '--port', String(port)];
    log.stream.write(`\n# ${NOTIFY_BIN} ${args.join(' ')}\n`);
    child = spawn(NOTIFY_BIN, args, { env: childEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    child.stderr!.pipe(log.stream, { end: false });
    const listening = new Promise<string>((resolve, reject) => {
      const lines = createInterface({ input: child.stdout! });
      let found = false;
      lines.on('line', (line) => {
        log.stream.write(line + '\n');
        if (found) return;
        try {
          const rec = JSON.parse(line) as { event?: string; url?: string };
          if (rec.event === 'listening' && rec.url) {
            found = true;
            resolve(rec.url);
          }
        } catch { /* not JSON: a traceback, say; it is in the log */ }
      });
      child.once('exit', (code, signal) => {
        if (!found) reject(new Error(`notify serve exited (${code ?? signal}) before listening; log: ${log.path}`));
      });
    });
    const deadline = Date.now() + 20_000;
    const timeout = new Promise<never>((_, reject) => setTimeout(
      () => reject(new Error(`notify serve not listening after 20 s; log: ${log.path}`)), 20_000).unref());
    const url = await Promise.race([listening, timeout]);
    port = Number(new URL(url).port);
    while (true) { // ready: not just listening
      try {
        const r = await fetch(`http://127.0.0.1:${port}/readyz`);
        if (r.status === 200) break;
      } catch { /* not yet */ }
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`notify serve exited before it was ready; log: ${log.path}`);
      }
      if (Date.now() > deadline) throw new Error(`/readyz not 200 after 20 s; log: ${log.path}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  try {
    await launch();
  } catch (e) {
    if (child!) await terminate(child, 2_000);
    throw e;
  }
  const server = {
    get url() { return `ws://127.0.0.1:${port}`; },
    get httpUrl() { return `http://127.0.0.1:${port}`; },
    get port() { return port; },
    get pid() { return child.pid!; },
    logPath: log.path,
    get args() { return [...base, '--port', String(port)]; },
    stop: () => terminate(child),
    kill: async () => {
      child.kill('SIGKILL');
      await exited(child);
      children.delete(child);
    },
    restart: async () => {
      await terminate(child);
      await launch();
    },
    pause: () => { child.kill('SIGSTOP'); },
    resume: () => { child.kill('SIGCONT'); },
    metrics: async () => (await fetch(`http://127.0.0.1:${port}/metrics`)).text(),
    dispose: async () => {
      await terminate(child);
      await new Promise<void>((resolve) => log.stream.end(resolve));
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return server;
}

// -- the Python observer ---------------------------------------------------------------------------

export interface ObserverOptions {
  group: string;
  /** default: `py-<random>` */
  member?: string;
  /** default: the `notify` fixture's URL */
  url?: string;
  token?: string;
  acceptFrom?: 'members' | 'any';
}

/** One line of observer.py: `kind` is `ready`, `message`, `view`, `view_changing`, `resumed`,
 * `caught_up`, `state`, `removed`, `reset`, `connection`, `published`, `error`. A message has
 * `offset, stream, seq, sender, view, atomic, payload`; a view `view, members, joined, left,
 * offset`; `published` answers `publish()` (`offset, committed, reason`). */
export interface ObserverEvent {
  kind: string;
  [field: string]: unknown;
}

export interface Observer {
  member: string;
  group: string;
  /** every event so far, in order (grows as they come) */
  events: ObserverEvent[];
  /** the `message` events so far */
  messages(): ObserverEvent[];
  /** the first event (from the start) for which `pred` holds; rejects after `timeoutMs` */
  waitFor(pred: (e: ObserverEvent) => boolean, timeoutMs?: number): Promise<ObserverEvent>;
  /** until at least `n` messages came; returns them */
  waitForMessages(n: number, timeoutMs?: number): Promise<ObserverEvent[]>;
  /** publish through the Python SDK; resolves with its `published` event */
  publish(payload: unknown, opts?: { order?: 'fifo' | 'total'; atomic?: boolean; sameView?: boolean }): Promise<ObserverEvent>;
  /** leave the group and exit (SIGTERM; SIGKILL after 10 s) */
  stop(): Promise<void>;
  logPath: string;
}

export async function startObserver(opts: ObserverOptions & { url: string }): Promise<Observer> {
  const member = opts.member ?? `py-${Math.random().toString(36).slice(2, 8)}`;
  const log = logFile('observer');
  const args = [join(E2E, 'observer.py'), '--url', opts.url, '--group', opts.group, '--member', member,
                '--accept-from', opts.acceptFrom ?? 'members'];
  const env = childEnv();
  if (opts.token) env.NOTIFY_TOKEN = opts.token; // not in argv: `ps` shows argv
  const child = spawn(PYTHON, args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
  children.add(child);
  child.stderr!.pipe(log.stream, { end: false });
  const events: ObserverEvent[] = [];
  const waiters = new Set<() => void>();
  createInterface({ input: child.stdout! }).on('line', (line) => {
    log.stream.write(line + '\n');
    try {
      events.push(JSON.parse(line) as ObserverEvent);
    } catch {
      return;
    }
    for (const w of [...waiters]) w();
  });
  let exitNote = '';
  child.once('exit', (code, signal) => {
    exitNote = `observer ${member} exited (${code ?? signal}); log: ${log.path}`;
    for (const w of [...waiters]) w();
  });
  const waitFor = (pred: (e: ObserverEvent) => boolean, timeoutMs = 10_000): Promise<ObserverEvent> =>
    new Promise((resolve, reject) => {
      const check = () => {
        const hit = events.find(pred);
        if (hit) done(() => resolve(hit));
        else if (exitNote) done(() => reject(new Error(exitNote)));
      };
      const timer = setTimeout(() => done(() => reject(new Error(
        `observer ${member}: nothing matched in ${timeoutMs} ms (${events.length} events); log: ${log.path}`))),
        timeoutMs);
      const done = (f: () => void) => {
        clearTimeout(timer);
        waiters.delete(check);
        f();
      };
      waiters.add(check);
      check();
    });
  let nextReq = 0;
  const observer: Observer = {
    member,
    group: opts.group,
    events,
    logPath: log.path,
    messages: () => events.filter((e) => e.kind === 'message'),
    waitFor,
    waitForMessages: async (n, timeoutMs = 10_000) => {
      await waitFor(() => observer.messages().length >= n, timeoutMs);
      return observer.messages();
    },
    publish: async (payload, o = {}) => {
      const req = ++nextReq;
      child.stdin!.write(JSON.stringify({ op: 'publish', req, payload, order: o.order ?? 'fifo',
                                          atomic: o.atomic ?? false, same_view: o.sameView ?? false }) + '\n');
      return waitFor((e) => (e.kind === 'published' || e.kind === 'error') && e.req === req);
    },
    stop: async () => {
      await terminate(child);
      await new Promise<void>((resolve) => log.stream.end(resolve));
    },
  };
  await waitFor((e) => e.kind === 'ready', 20_000);
  return observer;
}

// -- the fixtures ----------------------------------------------------------------------------------

type WorkerFixtures = {
  notifyOptions: NotifyOptions;
  web: StaticServer;
  notify: NotifyServer;
};

type TestFixtures = {
  group: string;
  newPage: () => Promise<Page>;
  startNotify: (opts?: NotifyOptions) => Promise<NotifyServer>;
  observe: (opts: ObserverOptions) => Promise<Observer>;
};

export const test = base.extend<TestFixtures, WorkerFixtures>({
  notifyOptions: [{}, { scope: 'worker', option: true }],

  web: [async ({}, use) => {
    const server = await startStaticServer();
    await use(server);
    await server.close();
  }, { scope: 'worker', timeout: 10_000 }],

  notify: [async ({ notifyOptions, web }, use) => {
    const server = await startNotify(notifyOptions, web.origin);
    web.config = { url: server.url };
    await use(server);
    await server.dispose();
  }, { scope: 'worker', timeout: 40_000 }],

  group: async ({}, use, testInfo) => {
    await use(`t-${testInfo.testId}-${testInfo.repeatEachIndex}`);
  },

  newPage: async ({ browser, web }, use) => {
    const contexts: Awaited<ReturnType<typeof browser.newContext>>[] = [];
    await use(async () => {
      const context = await browser.newContext();
      contexts.push(context);
      const page = await context.newPage();
      await page.goto(web.url('/'));
      return page;
    });
    for (const c of contexts) await c.close();
  },

  startNotify: async ({ web }, use) => {
    const started: Awaited<ReturnType<typeof startNotify>>[] = [];
    await use(async (opts = {}) => {
      const s = await startNotify(opts, web.origin);
      started.push(s);
      return s;
    });
    for (const s of started) await s.dispose();
  },

  observe: async ({ notify }, use) => {
    const started: Observer[] = [];
    await use(async (opts) => {
      const o = await startObserver({ url: notify.url, ...opts });
      started.push(o);
      return o;
    });
    for (const o of started) await o.stop();
  },
});

/** Whether global-setup.ts bundled the SDK (web/sdk/src/index.ts exists): `test.skip(!sdkBuilt())`. */
export function sdkBuilt(): boolean {
  return existsSync(join(BUILD_DIR, 'sdk.js'));
}
