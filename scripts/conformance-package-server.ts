/**
 * A live governed InterLock for scripts/conformance-package.sh: the test environment of
 * test/helpers/governed.ts (fresh control database, Chinook copy, reader and writer roles, the demo
 * identity and key) with rate limits raised for a full suite run, plus the sql-gateway fixture in the
 * source database (read grant to the reader, an `icf-reader` role, a full mask on
 * public.icf_people.email, a rescan). Writes one JSON line {url, apiKey, restrictedApiKey, pgUrl, sourceId} to
 * --out FILE when ready and keeps serving until SIGTERM or SIGINT, then removes everything.
 *
 * Run with tsx: node node_modules/tsx/dist/cli.mjs scripts/conformance-package-server.ts --out FILE
 */
import * as fs from 'node:fs';
import { startGovernedEnv } from '../test/helpers/governed';
import { provisionConformanceFixture } from '../test/helpers/sql-fixture';
import type { ResolvedGatewayConfig } from '../src/control/config';

async function main(): Promise<void> {
  const i = process.argv.indexOf('--out');
  const out = i >= 0 ? process.argv[i + 1] : undefined;
  if (!out) throw new Error('--out FILE is required');
  const unlimited = { points: 1_000_000, window_seconds: 60 };
  const env = await startGovernedEnv({ config: { rate_limits: { per_identity: unlimited, per_source: unlimited } } as Partial<ResolvedGatewayConfig> });
  const { restrictedApiKey } = await provisionConformanceFixture(env);
  let closing = false;
  const stop = async () => {
    if (closing) return;
    closing = true;
    await env.close().catch(() => undefined);
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop());
  process.on('SIGINT', () => void stop());
  fs.writeFileSync(`${out}.tmp`, JSON.stringify({ url: env.url, apiKey: env.apiKey, restrictedApiKey, pgUrl: env.sourceUrl, sourceId: env.demo.sourceId }) + '\n');
  fs.renameSync(`${out}.tmp`, out);
  process.stdout.write(`[conformance-package-server] ready at ${env.url}\n`);
}

main().catch((err) => {
  process.stderr.write(`[conformance-package-server] failed: ${err && (err as Error).stack ? (err as Error).stack : String(err)}\n`);
  process.exit(1);
});
