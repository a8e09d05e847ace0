// The size budget (issue 13): what an application's bundler makes of the SDK, minified and
// gzipped. The entry chunk is what every page loads; the snapshot codec is a separate chunk
// loaded on the first state transfer or checkpoint. Exits 1 over budget.
import { build } from "esbuild";
import { gzipSync } from "node:zlib";
import { fileURLToPath } from "node:url";

const BUDGET = 10 * 1024; // bytes, min+gzip, entry chunk
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
let entry = 0;
let total = 0;
for (const f of out.outputFiles) {
  const gz = gzipSync(f.contents, { level: 9 }).length;
  total += gz;
  const name = f.path.split("/").pop();
  if (name === "index.js") entry = gz;
  console.log(`${name.padEnd(24)} ${String(f.contents.length).padStart(7)} B min  ${String(gz).padStart(6)} B min+gzip`);
}
console.log(`entry ${entry} B min+gzip (budget ${BUDGET}), all chunks ${total} B`);
if (entry > BUDGET) {
  console.error(`over budget by ${entry - BUDGET} B`);
  process.exit(1);
}
