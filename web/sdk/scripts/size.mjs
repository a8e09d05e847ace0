// The size budget (issue 13): what an application's bundler makes of the SDK, minified and
// gzipped. The entry chunk is what every page loads; the snapshot codec is a separate chunk
// loaded on the first state transfer or checkpoint. `node scripts/size.mjs` prints the sizes
// and exits 1 over budget; test/size.test.ts runs the same check with the other unit tests.
//
// The issue asked for 10 kB; the entry is 12.5 kB today (docs/web.md, "Size"). The budget
// holds the line there until the 10 kB is reached.
import { build } from "esbuild";
import { gzipSync } from "node:zlib";
import { fileURLToPath } from "node:url";

// 12.5 kB since the request table, the reply matching and the refusal policy moved into the
// sans-I/O protocol (requests.ts), the shape the Python SDK has, so that both replay one fixture
// (tests/fixtures/protocol_cases.json). Trimming it back to 11.5 kB was tried: merging the
// client's duplicated helpers saved 1 B and folding lists into tables cost bytes (gzip already
// shares the repeats), so what grew is protocol logic, not duplication, and getting back means
// dropping behaviour. The budget is the measured entry (12,493 B: 12,446 B at the merge,
// +47 B for the parity fixes of tests/fixtures' leave and rejoin cases) with no headroom: the next
// growth has to pay for itself.
//
// 13,239 B (+739 B over 12,500) since users and instances (issue 29): the instance kept with the
// session, the duplicated-tab check over a BroadcastChannel (tabs.ts, ~300 B alone), the 4002
// policy (a new instance or `Replaced`) and presence by user (view.users, usersJoined/Left,
// userOf/usersOf: presence.ts, ~280 B alone). All of it is needed before the first hello or at
// every view, so none of it can move to a lazy chunk; the budget is raised to the measured entry,
// again with no headroom, and said so here and in docs/web.md ("Size"). 13,264 B (+25 B) since a
// clash fails the publishes still unanswered (sent again under the new instance, whose ids are
// new, one could be delivered twice).
//
// 14,507 B (+1,243 B) since catch-up from the log (issue 30: catchup.ts, the gap read with
// `history` pages while what comes behind it waits, as the Python SDK does). It runs when a
// `catchup_log` arrives, synchronously with the frames around it (the protocol must keep what
// comes behind the gap from that frame on), so it cannot be a lazy chunk. Trimmed before
// measuring, from +1,451 B (one view-event builder for installs and pages, one reset helper,
// ProtocolViolation in errors.ts so catchup.ts throws it directly, terse messages); the budget
// is the measured entry, again with no headroom. 14,563 B (+56 B) since a `reset` says how many
// messages retention dropped (`lost`, from the server's `offset_unavailable` or a page's `first`);
// 14,564 B (+1 B) since a gap whose pages are refused makes the client reconnect (GapUnreadable)
// instead of skipping it. Still 14,564 B since `caught-up` counts the messages read from the log
// (+33 B), paid for first by trimming the gap's code (-33 B, no behaviour changed: one seq check
// for a page and for what came behind it, a refusal calling #ask itself, the aborted offsets
// looked up in the page's list). 14,623 B (+59 B) since the server API's removal and
// disconnect (issue 31): a `removed` event says why the install removed the member (its
// `reason`), a resuming join refused `removed` ends the group instead of joining it afresh, and
// close 4007 (disconnected) closes a client that has no `getToken` for good. 14,667 B (+44 B)
// since view events carry the transitional set (`transitional` on `view` and `view-changing`:
// the members that moved together, EVS's transitional configuration, docs/semantics.md),
// computed where every install is built. 14,911 B (+244 B) since the client packs what it writes
// at once into `batch` messages for a server that takes them (issue 34: batching.ts, publishes
// written at the end of the caller's turn, sizes counted in UTF-8 against max_frame_bytes); it
// runs on every write, so it cannot be a lazy chunk.
export const BUDGET = 14_911; // bytes, min+gzip, entry chunk
export const TARGET = 10_240;

export async function measure() {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const out = await build({
    entryPoints: [`${root}/src/index.ts`],
    bundle: true,
    minify: true,
    splitting: true,
    format: "esm",
    write: false,
    outdir: "out",
    logLevel: "error",
  });
  const files = out.outputFiles.map((f) => ({
    name: f.path.split("/").pop(),
    min: f.contents.length,
    gzip: gzipSync(f.contents, { level: 9 }).length,
  }));
  const entry = files.find((f) => f.name === "index.js").gzip;
  return { files, entry, total: files.reduce((n, f) => n + f.gzip, 0) };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { files, entry, total } = await measure();
  for (const f of files) console.log(`${f.name.padEnd(24)} ${String(f.min).padStart(7)} B min  ${String(f.gzip).padStart(6)} B min+gzip`);
  console.log(`entry ${entry} B min+gzip (budget ${BUDGET}, target ${TARGET}), all chunks ${total} B`);
  if (entry > BUDGET) {
    console.error(`over budget by ${entry - BUDGET} B`);
    process.exit(1);
  }
}
