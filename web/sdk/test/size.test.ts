// The size budget, with the unit tests: a change that makes every page load more fails here.
import { expect, it } from "vitest";
// @ts-expect-error -- a plain .mjs script without types
import { BUDGET, measure } from "../scripts/size.mjs";

it("the SDK's entry chunk stays within its min+gzip budget", async () => {
  const { entry } = (await measure()) as { entry: number };
  expect(entry).toBeGreaterThan(1_000); // it measured the real bundle
  expect(entry).toBeLessThanOrEqual(BUDGET as number);
}, 30_000);
