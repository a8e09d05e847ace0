// The closing line of the web tests, from the JSON reports of vitest and Playwright:
//
//   node web/scripts/summary.mjs VITEST_JSON PLAYWRIGHT_JSON
//
// prints one line per runner, then last `web tests: N passed, N failed`, and exits 1 if anything
// failed. A report that is missing or unreadable (the runner crashed, or its config did not
// load) counts as one failure: a run that proved nothing must not read as green. Skipped tests
// are neither passed nor failed (they are shown on the runner's line).
import { readFileSync } from 'node:fs';

function read(path) {
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    return { error: `${path}: ${e.code === 'ENOENT' ? 'no report (the runner did not finish)' : e.message}` };
  }
}

// vitest's json reporter (Jest's format): a test file that fails to load has status "failed"
// and no assertion results, and counts in no test total.
function vitest(r) {
  if (r.error) return { passed: 0, failed: 1, skipped: 0, notes: [r.error] };
  const broken = (r.testResults ?? []).filter(
    (f) => f.status === 'failed' && (f.assertionResults ?? []).length === 0);
  return {
    passed: r.numPassedTests ?? 0,
    failed: (r.numFailedTests ?? 0) + broken.length,
    skipped: (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0),
    notes: broken.map((f) => `${f.name}: ${(f.message || 'failed to load').split('\n')[0]}`),
  };
}

// Playwright's json reporter: stats.expected (passed), unexpected (failed), flaky (passed on a
// retry; there are none with retries 0), skipped; `errors` are failures outside any test
// (config, globalSetup, a worker fixture's teardown...).
function playwright(r) {
  if (r.error) return { passed: 0, failed: 1, skipped: 0, notes: [r.error] };
  const s = r.stats ?? {};
  const errors = r.errors ?? [];
  return {
    passed: (s.expected ?? 0) + (s.flaky ?? 0),
    failed: (s.unexpected ?? 0) + errors.length,
    skipped: s.skipped ?? 0,
    notes: errors.map((e) => (e.message ?? String(e)).split('\n')[0]),
  };
}

const [vitestPath, playwrightPath] = process.argv.slice(2);
if (!vitestPath || !playwrightPath) {
  console.error('usage: node summary.mjs VITEST_JSON PLAYWRIGHT_JSON');
  process.exit(2);
}
const parts = [['vitest', vitest(read(vitestPath))], ['playwright', playwright(read(playwrightPath))]];
let passed = 0;
let failed = 0;
for (const [name, c] of parts) {
  passed += c.passed;
  failed += c.failed;
  console.log(`  ${name}: ${c.passed} passed, ${c.failed} failed, ${c.skipped} skipped`);
  for (const n of c.notes) console.log(`    ${n}`);
}
console.log(`web tests: ${passed} passed, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);
