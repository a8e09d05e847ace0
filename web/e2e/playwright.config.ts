// Playwright for the browser tests: `./dev test-web` (or `./dev test`) runs
//   cd web && npx playwright test -c e2e/playwright.config.ts
// in Debian's chromium (`/usr/bin/chromium`, installed by ./dev through apt-get; never
// `playwright install`). Fixtures (a real notify server, the static pages, a Python observer):
// fixtures.ts. The JSON report feeds the closing line of ./dev test (web/scripts/summary.mjs).
import { defineConfig } from '@playwright/test';
import { fileURLToPath } from 'node:url';

const web = fileURLToPath(new URL('..', import.meta.url));

export const CHROMIUM = process.env.NOTIFY_CHROMIUM ?? '/usr/bin/chromium';

export default defineConfig({
  testDir: './tests',
  globalSetup: './global-setup.ts',
  outputDir: `${web}.reports/playwright-artifacts`,
  // Two cores: two files at a time, each worker with its own notify server; tests in one file
  // run in order in one worker and share that server (use a fresh group per test).
  workers: 2,
  fullyParallel: false,
  retries: 0,
  forbidOnly: !!process.env.CI,
  timeout: 60_000, // per test, fixtures included
  expect: { timeout: 10_000 },
  globalTimeout: 10 * 60_000, // a hung run cannot hang CI
  reporter: [['list'], ['json', { outputFile: `${web}.reports/playwright.json` }]],
  use: {
    browserName: 'chromium',
    headless: true,
    launchOptions: {
      executablePath: CHROMIUM,
      // Needed on this machine: without the background-networking flags chromium's own
      // connections (and then the page's) are refused.
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    },
    actionTimeout: 10_000,
    navigationTimeout: 15_000,
    trace: 'retain-on-failure',
  },
});
