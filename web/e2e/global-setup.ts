// Before any test: bundle what the test pages import into web/e2e/.build (served at /build/):
//   /build/yjs.js       yjs, one copy for the page and the SDK (the import map maps `yjs` here)
//   /build/sdk.js       web/sdk/src/index.ts, with `yjs` left to the import map
//   /build/sdk-yjs.js   web/sdk/src/yjs.ts (the Yjs provider), if it exists
// The SDK entries are skipped while web/sdk/src has no index.ts yet; a test that needs them calls
// `test.skip(!sdkBuilt(), ...)` (fixtures.ts). esbuild bundles from the sources, so the tests
// never run a stale dist/ and the SDK's own import style (with or without `.js`) does not matter.
import { build } from 'esbuild';
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { BUILD_DIR, WEB } from './paths.ts';

export default async function globalSetup(): Promise<void> {
  rmSync(BUILD_DIR, { recursive: true, force: true });
  mkdirSync(BUILD_DIR, { recursive: true });
  const common = {
    bundle: true,
    format: 'esm' as const,
    platform: 'browser' as const,
    target: 'es2022',
    sourcemap: 'inline' as const,
    logLevel: 'warning' as const,
    absWorkingDir: WEB,
  };
  await build({ ...common, entryPoints: { yjs: 'node_modules/yjs/dist/yjs.mjs' }, outdir: BUILD_DIR });
  const entries: Record<string, string> = {};
  if (existsSync(`${WEB}sdk/src/index.ts`)) entries['sdk'] = 'sdk/src/index.ts';
  if (existsSync(`${WEB}sdk/src/yjs.ts`)) entries['sdk-yjs'] = 'sdk/src/yjs.ts';
  if (Object.keys(entries).length > 0) {
    // splitting: the provider and the client share one copy of the client's code
    await build({ ...common, entryPoints: entries, outdir: BUILD_DIR, splitting: true,
                  external: ['yjs'], chunkNames: 'chunks/[name]-[hash]' });
  }
}
