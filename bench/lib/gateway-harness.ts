/**
 * The governed gateway as `interlock serve` starts it (same configuration loading, control
 * database and startGovernedGateway), with one bench-only change for scenario 5: interlock_query's
 * row cap (the tool schema allows max_rows ≤ 10,000) and the pipeline's 4 MiB result byte cap are
 * lifted to BENCH_MAX_ROWS / BENCH_MAX_RESULT_BYTES, so that a 100,000-row read can come back
 * through the whole pipeline (authorization, policy, execution, redaction, audit). Everything
 * else — identity, argument validation, rate limit, cache, audit — is the production code.
 * Run under `node --expose-gc -r tsx/cjs`; prints "READY <url>"; answers IPC {cmd: 'gc'} with the
 * RSS after a full collection.
 */
import { createHmac } from 'node:crypto';
import { loadConfig } from '../../src/control/config';
import { getKeyPepper, openControlDb } from '../../src/control/db';
import { startGovernedGateway } from '../../src/gateway';
import { createLogger } from '../../src/observability/logger';
import { queryHandler } from '../../src/pipeline/query';
import { postgresRateLimiter } from '../../src/pipeline/05-rate-limit';
import type { PostgresSourceSettings } from '../../src/sources/postgres/connector';

async function main(): Promise<void> {
  const maxRows = Number(process.env.BENCH_MAX_ROWS ?? 100_000);
  const maxResultBytes = Number(process.env.BENCH_MAX_RESULT_BYTES ?? 256 * 1024 * 1024);
  const cfg = loadConfig({ env: process.env, overrides: { listen: { host: '127.0.0.1', port: 0 } } });
  const logger = createLogger(cfg.log_level);
  if (!cfg.database.url) throw new Error('INTERLOCK_DATABASE_URL is required');
  const db = await openControlDb(cfg.database.url, { keyPepper: cfg.key_pepper, poolSize: Math.min(cfg.database.pool_size, 10), logger });
  const gw = await startGovernedGateway({ db, config: cfg, logger });

  const binding = gw.gateway.deps.tools.get('interlock_query');
  if (!binding) throw new Error('interlock_query is not served');
  const rateLimiter = await postgresRateLimiter(db.pool, {
    perIdentity: { points: cfg.rate_limits.per_identity.points, windowSeconds: cfg.rate_limits.per_identity.window_seconds },
    perSource: { points: cfg.rate_limits.per_source.points, windowSeconds: cfg.rate_limits.per_source.window_seconds },
  });
  const maskSecret = createHmac('sha256', await getKeyPepper(db)).update('interlock-mask-v1').digest('hex');
  binding.handler = queryHandler({
    store: gw.store,
    connectors: { reader: (s) => gw.connectors.get(s.id, s.settings as unknown as PostgresSourceSettings) },
    rateLimiter,
    cache: gw.cache,
    catalog: (s) => gw.store.loadCatalog(s.id),
    maskSecret,
    maxResultBytes,
  });
  // Validate as the schema does, except that max_rows may go up to maxRows.
  const validate = binding.validate.bind(binding);
  binding.validate = (args: unknown) => {
    const a = args as Record<string, unknown> | null;
    if (a && typeof a === 'object' && typeof a.max_rows === 'number' && Number.isInteger(a.max_rows) && a.max_rows <= maxRows) return validate({ ...a, max_rows: Math.min(a.max_rows, 10_000) });
    return validate(args);
  };

  process.on('message', (m: { id: number; cmd: string }) => {
    if (m.cmd === 'gc') {
      const g = (globalThis as { gc?: () => void }).gc;
      g?.();
      g?.();
      process.send!({ id: m.id, gc: !!g, rssKiB: Math.round(process.memoryUsage().rss / 1024), heapUsedKiB: Math.round(process.memoryUsage().heapUsed / 1024) });
    } else process.send!({ id: m.id, error: `unknown command ${m.cmd}` });
  });
  process.on('disconnect', () => void gw.close(1000).then(() => db.close()).finally(() => process.exit(0)));
  process.on('SIGTERM', () => void gw.close(1000).then(() => db.close()).finally(() => process.exit(0)));
  process.stdout.write(`READY ${gw.url}\n`);
}

main().catch((err) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
