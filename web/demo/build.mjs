// Build the demo into dist/: index.html, app.js, style.css. `node build.mjs [--watch]`.
// "@notify/client" is resolved to the SDK's sources, so the demo builds without building the SDK.
import * as esbuild from "esbuild";
import { copyFile, mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "dist");
const sdkSources = {
  "@notify/client": join(here, "../sdk/src/index.ts"),
  "@notify/client/yjs": join(here, "../sdk/src/yjs.ts"),
};

/** @type {esbuild.Plugin} */
const sdkFromSource = {
  name: "sdk-from-source",
  setup(build) {
    build.onResolve({ filter: /^@notify\/client(\/yjs)?$/ }, (args) => ({ path: sdkSources[args.path] }));
  },
};

await mkdir(out, { recursive: true });
const options = {
  entryPoints: [join(here, "src/app.ts")],
  bundle: true,
  format: "esm",
  target: "es2022",
  sourcemap: true,
  minify: process.argv.includes("--minify"),
  outfile: join(out, "app.js"),
  plugins: [sdkFromSource],
  logLevel: "warning",
};
await Promise.all([copyFile(join(here, "index.html"), join(out, "index.html")), copyFile(join(here, "style.css"), join(out, "style.css"))]);
if (process.argv.includes("--watch")) {
  const ctx = await esbuild.context(options);
  await ctx.watch();
  console.log(`watching; serving nothing: point a static server at ${out}`);
} else {
  const r = await esbuild.build({ ...options, metafile: true });
  const bytes = Object.values(r.metafile.outputs).reduce((n, o) => n + o.bytes, 0);
  console.log(`web/demo/dist: index.html, style.css, app.js (${(bytes / 1024).toFixed(0)} kB with its map)`);
}
