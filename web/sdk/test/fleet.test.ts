/**
 * A fleet of SDK clients in Node (`ws` as WebSocket) against a REAL notify server on 127.0.0.1:
 * total order across 100 members, then the server killed (SIGKILL) and started again on the
 * same port: every client must come back on its own, within the backoff cap, and hear what is
 * published after the restart. The only test here that opens sockets; it takes a few seconds.
 *
 * Needs the repo's venv: `python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'` at the
 * repo root; skipped (with that message) without it.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { WebSocket } from "ws";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, type ConnectionState, createClient, type WebSocketConstructor } from "../src/client.js";
import type { Message, ResetEvent, ViewEvent } from "../src/events.js";
import type { Group } from "../src/group.js";

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, "../../..");
const notifyBin = resolve(repoRoot, ".venv/bin/notify");
const haveServer = existsSync(notifyBin);
if (!haveServer) {
  console.warn(
    `fleet.test.ts skipped: ${notifyBin} is missing. Make it with: cd ${repoRoot} && python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'`,
  );
}

const CLIENTS = 100;
const MESSAGES = 50;
const BACKOFF = { baseMs: 100, capMs: 1_000, stableMs: 30_000 };
const GROUP = "fleet";

async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr !== null ? addr.port : 0;
      srv.close(() => resolvePort(port));
    });
  });
}

/** Poll `cond` every 20 ms until it holds; fail with `what` after `ms`. */
async function until(what: string, ms: number, cond: () => boolean): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

interface Member {
  client: Client;
  group: Group;
  messages: Message[];
  views: ViewEvent[];
  resets: ResetEvent[];
  states: ConnectionState[];
}

describe.skipIf(!haveServer)("fleet against a real server", () => {
  let port = 0;
  let server: ChildProcess | null = null;
  let serverLog = "";
  const fleet: Member[] = [];

  async function startServer(): Promise<void> {
    const proc = spawn(
      notifyBin,
      ["serve", "--store", "memory", "--host", "127.0.0.1", "--port", String(port), "--log-level", "warning"],
      { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"] },
    );
    server = proc;
    proc.stdout?.on("data", (d: Buffer) => (serverLog += d.toString()));
    proc.stderr?.on("data", (d: Buffer) => (serverLog += d.toString()));
    const end = Date.now() + 15_000;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`the server exited (${proc.exitCode}):\n${serverLog.slice(-2000)}`);
      try {
        const r = await fetch(`http://127.0.0.1:${port}/readyz`);
        if (r.ok) return;
      } catch {
        /* not listening yet */
      }
      if (Date.now() > end) throw new Error(`the server was not ready within 15 s:\n${serverLog.slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async function killServer(): Promise<void> {
    const proc = server;
    server = null;
    if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return;
    const gone = new Promise<void>((r) => proc.once("exit", () => r()));
    proc.kill("SIGKILL");
    await gone;
  }

  beforeAll(async () => {
    port = await freePort();
    await startServer();
  });

  afterAll(async () => {
    for (const m of fleet) m.client.close();
    await killServer();
  });

  it(`${CLIENTS} clients get the same total order; after a SIGKILL and restart all come back`, async () => {
    const url = `ws://127.0.0.1:${port}`;
    for (let i = 0; i < CLIENTS; i++) {
      const client = createClient(url, {
        WebSocket: WebSocket as unknown as WebSocketConstructor,
        storage: null,
        lifecycle: false,
        member: `m${String(i).padStart(3, "0")}`,
        backoff: BACKOFF,
        requestTimeoutMs: 20_000,
      });
      const m: Member = { client, group: client.group(GROUP), messages: [], views: [], resets: [], states: [] };
      client.on("state", (s) => m.states.push(s.to));
      m.group.on("message", (msg) => m.messages.push(msg));
      m.group.on("view", (v) => m.views.push(v));
      m.group.on("reset", (r) => m.resets.push(r));
      fleet.push(m);
    }
    await Promise.all(fleet.map((m) => m.group.join()));
    await until("every member sees the full view", 20_000, () =>
      fleet.every((m) => m.group.view?.members.length === CLIENTS),
    );

    // -- total order: one publisher, N messages, everybody the same sequence ----------------
    const sender = fleet[0]!;
    const results = await Promise.all(
      Array.from({ length: MESSAGES }, (_, k) => sender.group.publish({ k }, { order: "total" })),
    );
    expect(new Set(results.map((r) => r.offset)).size).toBe(MESSAGES);
    await until(`every member has ${MESSAGES} messages`, 20_000, () => fleet.every((m) => m.messages.length >= MESSAGES));
    const reference = sender.messages.map((msg) => `${msg.stream}/${msg.seq}/${msg.offset}/${JSON.stringify(msg.payload)}`);
    expect(reference).toHaveLength(MESSAGES);
    expect(sender.messages.map((msg) => msg.seq)).toEqual(Array.from({ length: MESSAGES }, (_, k) => k + 1));
    expect(sender.messages.every((msg) => msg.stream === "total")).toBe(true);
    for (const m of fleet) {
      expect(m.messages.map((msg) => `${msg.stream}/${msg.seq}/${msg.offset}/${JSON.stringify(msg.payload)}`)).toEqual(reference);
    }

    // -- SIGKILL, restart on the same port ----------------------------------------------------
    for (const m of fleet) m.states.length = 0;
    const viewsBefore = fleet.map((m) => m.views.length);
    await killServer();
    await until("every client noticed the loss", 10_000, () => fleet.every((m) => m.client.state !== "connected"));
    await startServer();
    const restartedAt = Date.now();
    // Every client retries within the backoff cap once the server listens; allow the handshake
    // and the rejoin of 100 members on top.
    await until("every client connected again", BACKOFF.capMs + 2_000, () =>
      fleet.every((m) => m.client.state === "connected"),
    );
    const reconnectMs = Date.now() - restartedAt;
    expect(fleet.filter((m) => m.states.includes("closed"))).toEqual([]);
    expect(fleet.every((m) => m.client.failure === null)).toBe(true);

    // The memory store lost the group: each member is in it again through a new view (with a
    // `reset` first where its resume point was refused), and the group ends up whole.
    await until("every member sees the full view again", 20_000, () =>
      fleet.every((m) => m.group.status === "joined" && m.group.view?.members.length === CLIENTS),
    );
    fleet.forEach((m, i) => {
      expect(m.views.length, `${m.client.member}: a view after the restart`).toBeGreaterThan(viewsBefore[i]!);
    });

    // -- a message published after the restart reaches all -----------------------------------
    const before = fleet.map((m) => m.messages.length);
    const after = await fleet[CLIENTS - 1]!.group.publish({ after: "restart" }, { order: "total" });
    await until("every member has the message published after the restart", 10_000, () =>
      fleet.every((m, i) => m.messages.length > before[i]!),
    );
    for (const [i, m] of fleet.entries()) {
      const fresh = m.messages.slice(before[i]!);
      expect(fresh.map((msg) => msg.payload)).toEqual([{ after: "restart" }]);
      expect(fresh[0]!.offset).toBe(after.offset);
    }
    const resets = fleet.filter((m) => m.resets.length > 0).length;
    console.info(`fleet: all ${CLIENTS} reconnected ${reconnectMs} ms after the restart; ${resets} saw a reset`);
  }, 90_000);
});
