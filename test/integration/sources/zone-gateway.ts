/**
 * A second governed gateway process for the value matrix (value-matrix.test.ts): started by the test
 * with another TZ in its environment (a Jest worker cannot change its own process's zone), on the
 * same control database, so the same interlock_query reads run in a gateway whose host zone differs.
 * Prints `{"url": …}` on stdout when it listens; exits when stdin closes.
 */
import { openControlDb } from '../../../src/control/db';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from '../../../src/control/config';
import { startGovernedGateway } from '../../../src/gateway';
import { createLogger } from '../../../src/observability/logger';

async function main(): Promise<void> {
  const logger = createLogger('silent');
  const db = await openControlDb(process.argv[2], { logger, migrate: false });
  const config = structuredClone(DEFAULT_CONFIG as ResolvedGatewayConfig) as unknown as Record<string, unknown>;
  config.rate_limits = { ...(config.rate_limits as object), per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } };
  const gateway = await startGovernedGateway({ db, config: config as unknown as ResolvedGatewayConfig, host: '127.0.0.1', port: 0, logger });
  process.stdout.write(JSON.stringify({ url: gateway.url, hour: new Date(Date.UTC(2024, 0, 15, 12)).getHours() }) + '\n');
  process.stdin.resume();
  process.stdin.on('end', () => {
    void gateway.close(1000).then(() => db.close()).then(() => process.exit(0));
  });
}

void main().catch((err) => {
  process.stderr.write(String(err?.stack ?? err) + '\n');
  process.exit(1);
});
