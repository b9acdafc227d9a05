/**
 * A live governed InterLock for scripts/conformance-package.sh: the test environment of
 * test/helpers/governed.ts (fresh control database, Chinook copy, reader and writer roles, the demo
 * identity and key) with rate limits raised for a full suite run, plus the sql-gateway fixture in the
 * source database (read grant to the reader, an `icf-reader` role, a full mask on
 * public.icf_people.email, a rescan). Writes one JSON line {url, apiKey, pgUrl, sourceId} to
 * --out FILE when ready and keeps serving until SIGTERM or SIGINT, then removes everything.
 *
 * Run with tsx: node node_modules/tsx/dist/cli.mjs scripts/conformance-package-server.ts --out FILE
 */
import * as fs from 'node:fs';
import pg from 'pg';
import { startGovernedEnv } from '../test/helpers/governed';
import { createFixture } from '../conformance/sql/fixture';
import { upsertRole } from '../src/control/roles';
import { grantRole } from '../src/control/grants';
import { addPolicies } from '../src/control/policies';
import { scanSource } from '../src/control/scan';
import type { ResolvedGatewayConfig } from '../src/control/config';

async function main(): Promise<void> {
  const i = process.argv.indexOf('--out');
  const out = i >= 0 ? process.argv[i + 1] : undefined;
  if (!out) throw new Error('--out FILE is required');
  const unlimited = { points: 1_000_000, window_seconds: 60 };
  const env = await startGovernedEnv({ config: { rate_limits: { per_identity: unlimited, per_source: unlimited } } as Partial<ResolvedGatewayConfig> });
  await createFixture(env.sourceUrl, new URL(env.sourceUrl).pathname.slice(1));
  const admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
  try {
    await admin.query(`GRANT SELECT ON icf_items, icf_people, icf_log TO "${env.demo.readerRole}"`);
  } finally {
    await admin.end();
  }
  await upsertRole(env.db, { name: 'icf-reader', description: 'conformance sql-gateway fixture', statements: ['icf_items', 'icf_people', 'icf_log'].map((t) => ({ effect: 'allow', action: 'read', resource: `public.${t}` })) });
  await grantRole(env.db, { identityId: env.demo.identityId, roleName: 'icf-reader', sourceId: env.demo.sourceId });
  await addPolicies(env.db, [{ name: 'icf-mask-email', description: 'conformance fixture', applies_to: {}, rule: { type: 'mask_columns', columns: ['public.icf_people.email'], method: 'full' } }]);
  await scanSource(env.db, env.demo.sourceId);
  let closing = false;
  const stop = async () => {
    if (closing) return;
    closing = true;
    await env.close().catch(() => undefined);
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop());
  process.on('SIGINT', () => void stop());
  fs.writeFileSync(`${out}.tmp`, JSON.stringify({ url: env.url, apiKey: env.apiKey, pgUrl: env.sourceUrl, sourceId: env.demo.sourceId }) + '\n');
  fs.renameSync(`${out}.tmp`, out);
  process.stdout.write(`[conformance-package-server] ready at ${env.url}\n`);
}

main().catch((err) => {
  process.stderr.write(`[conformance-package-server] failed: ${err && (err as Error).stack ? (err as Error).stack : String(err)}\n`);
  process.exit(1);
});
