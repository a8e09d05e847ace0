// Where things are, for the config, the global setup and the fixtures.
import { fileURLToPath } from 'node:url';

/** web/ (with a trailing slash) */
export const WEB = fileURLToPath(new URL('..', import.meta.url));
/** the repository (with a trailing slash) */
export const REPO = fileURLToPath(new URL('../..', import.meta.url));
/** web/e2e/ */
export const E2E = fileURLToPath(new URL('.', import.meta.url));
/** bundles for the pages, written by global-setup.ts, served at /build/ */
export const BUILD_DIR = `${E2E}.build`;
/** test pages, served at / */
export const PAGES_DIR = `${E2E}pages`;
/** the demo board's build, served at /demo/ */
export const DEMO_DIST = `${WEB}demo/dist`;
/** logs of the servers and observers the fixtures start */
export const LOG_DIR = `${WEB}.reports/logs`;
/** the Python of the repository's .venv (`./dev setup`), or $NOTIFY_PYTHON */
export const PYTHON = process.env.NOTIFY_PYTHON ?? `${REPO}.venv/bin/python`;
/** the `notify` command of that .venv, or $NOTIFY_BIN */
export const NOTIFY_BIN = process.env.NOTIFY_BIN ?? `${REPO}.venv/bin/notify`;
