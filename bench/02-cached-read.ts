/**
 * Scenario 2: cached point read. As scenario 1, but the gateway's read cache is warm (64 hot ids
 * read once before timing), so the source is not queried; the baseline is still `pg` directly.
 * Run: `npx tsx bench/02-cached-read.ts`.
 */
import { pointReadScenario } from './lib/point-read';

pointReadScenario(true).then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
