/**
 * Rate limits hold across replicas: two gateways sharing one control database (the limiter's state
 * lives in its rate_limits table) allow exactly `points` calls per identity per window between them.
 */
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { startGovernedGateway, type GovernedGateway } from '../../../src/gateway';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from '../../../src/control/config';
import { createLogger } from '../../../src/observability/logger';
import { PostgresRateBlockStore } from '../../../src/control/rate-store';

let env: GovernedEnv;
let second: GovernedGateway;
const limits = { per_identity: { points: 5, window_seconds: 60 }, per_source: { points: 1000, window_seconds: 60 } };

beforeAll(async () => {
  env = await startGovernedEnv({ config: { rate_limits: limits } });
  const config = { ...structuredClone(DEFAULT_CONFIG as ResolvedGatewayConfig), rate_limits: limits };
  second = await startGovernedGateway({ db: env.db, config, host: '127.0.0.1', port: 0, logger: createLogger('silent') });
}, 60_000);
afterAll(async () => {
  await second?.close(1000);
  await env?.close();
});

test('five calls per minute per identity across two replicas, then rate_limited with retry_after_ms', async () => {
  const outcomes: string[] = [];
  let retryAfter = 0;
  for (let i = 0; i < 10; i++) {
    const target = i % 2 === 0 ? env : second;
    const r = await callTool(target, 'interlock_query', { source_id: 'chinook', sql: 'SELECT count(*) FROM genre' }, env.apiKey);
    const sc = r.body.result.structuredContent;
    outcomes.push(r.body.result.isError ? sc.code : 'ok');
    if (sc.code === 'rate_limited') retryAfter = sc.retry_after_ms;
  }
  expect(outcomes).toEqual(['ok', 'ok', 'ok', 'ok', 'ok', 'rate_limited', 'rate_limited', 'rate_limited', 'rate_limited', 'rate_limited']);
  expect(retryAfter).toBeGreaterThan(50_000);
  expect(retryAfter).toBeLessThanOrEqual(60_000);
});

test('modern dialect: a rate-limited call is HTTP 429 with Retry-After', async () => {
  const r = await fetch(second.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${env.apiKey}`, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'interlock_list_sources' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {}, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } } }),
  });
  expect(r.status).toBe(429);
  expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
  const body = (await r.json()) as { error: { code: number; data: unknown } };
  expect(body.error.code).toBe(-32602);
  expect(body.error.data).toMatchObject({ status: 'rate_limited', code: 'rate_limited' });
});

test('the control-database store grants whole blocks atomically under concurrency and never past points', async () => {
  const store = new PostgresRateBlockStore(env.db.pool);
  const claims = await Promise.all(Array.from({ length: 40 }, () => store.claim('test:blocks', 3, 100, 60_000)));
  const granted = claims.reduce((n, c) => n + c.granted, 0);
  expect(granted).toBe(99);
  expect(claims.filter((c) => c.granted === 3)).toHaveLength(33);
  for (const c of claims.filter((x) => x.granted === 0)) expect(c).toMatchObject({ granted: 0, consumed: 99 });
  expect(await store.claim('test:blocks', 1, 100, 60_000)).toMatchObject({ granted: 1, consumed: 100 });
  const refused = await store.claim('test:blocks', 1, 100, 60_000);
  expect(refused).toMatchObject({ granted: 0, consumed: 100 });
  expect(refused.msLeft).toBeGreaterThan(50_000);
  expect(refused.msLeft).toBeLessThanOrEqual(60_000);
  // An ended window starts over.
  await env.db.pool.query("UPDATE rate_limits SET expire = expire - 120000 WHERE key = 'test:blocks'");
  expect(await store.claim('test:blocks', 3, 100, 60_000)).toMatchObject({ granted: 3, consumed: 3 });
});
