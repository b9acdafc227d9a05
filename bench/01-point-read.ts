/**
 * Scenario 1: uncached point read. interlock_query of a Chinook primary-key lookup through POST
 * /mcp (raw keep-alive HTTP client, concurrency 1, 8, 32) vs the same parameterised statement with
 * `pg` directly. Every gateway read misses the cache. Run: `npx tsx bench/01-point-read.ts`.
 */
import { pointReadScenario } from './lib/point-read';

pointReadScenario(false).then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
