/**
 * Admission by capacity sees the source pool's queue, not an identity's own (issue 29 item 1, h29q;
 * admission.sample_pool_wait): the limiter's latency sample keeps a call's wait for a connection of
 * the source's shared pool and leaves out the rest of its source time (its statements, and its wait
 * for its own identity's slot, max_concurrent_per_identity).
 *
 * The source: pool_size 4, max_concurrent_per_identity 2, long identity and pool waits (so nothing
 * is refused by the source: no drops). The slow statement is the test's own fixture, a STABLE SQL
 * function around pg_sleep created by the superuser (agents may not call pg_sleep). Cache off.
 *
 * - A hostile identity floods slow statements (12 at once, 0.3 s each; it runs 2, the rest wait for
 *   its own slots) beside two honest identities doing point reads one at a time: with
 *   sample_pool_wait every honest call is served, none refused by capacity, and the limit is not
 *   lowered; the flood alone does not lower it either, where counting all source time
 *   (sample_source_time) does. (Beside honest point reads even sample_source_time kept it here: the
 *   honest calls' fast samples outnumber the slow ones in the short average.)
 * - Four identities at their cap (2 each, 0.15 s statements) want 8 connections of the 4: the
 *   shared pool is saturated, calls wait for it, and with sample_pool_wait the limit falls; without
 *   it (the default) the limit does not see that queue.
 */
import { sourceQuery, startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { grantRole } from '../../../src/control/grants';
import { getSource, putSource } from '../../../src/control/sources';
import { scanSource } from '../../../src/control/scan';
import { DEMO_ROLE } from '../../../src/demo/provision';
import type { ResolvedGatewayConfig } from '../../../src/control/config';

jest.setTimeout(120_000);

const MODERN = '2026-07-28';
const INITIAL_LIMIT = 16;
const POINT = 'SELECT track_id FROM track WHERE track_id = $1';
const slow = (seconds: number) => `SELECT public.slow_count(${seconds}) AS n`;

type Admission = Partial<NonNullable<ResolvedGatewayConfig['admission']>>;

/** A governed gateway with `admission` over fixed settings, the slow function, and `identities` more identities granted the demo role (their keys). */
async function start(admission: Admission, identities: number): Promise<{ env: GovernedEnv; keys: string[] }> {
  const env = await startGovernedEnv({
    config: {
      // Limit from 16 (may fall to 2), a short queue; event-loop delay and the audit queue can not lower it here (the machine is shared).
      admission: { enabled: true, initial_limit: INITIAL_LIMIT, min_limit: 2, max_limit: 64, queue_size: 8, queue_timeout_ms: 250, tolerance: 2, max_event_loop_delay_ms: 60_000, max_audit_queue: 100_000, ...admission },
      client_limits: { streams_per_address: 100_000, streams_per_identity: 100_000, body_reads_per_address: 100_000 },
      rate_limits: { per_identity: { points: 1_000_000, window_seconds: 60 }, per_source: { points: 1_000_000, window_seconds: 60 } },
      cache: { ttl_ms: 0, max_bytes: 0 },
    },
  });
  await sourceQuery(env, "CREATE FUNCTION public.slow_count(seconds float8) RETURNS int LANGUAGE sql STABLE AS 'SELECT count(*)::int FROM pg_catalog.pg_sleep(seconds)'");
  const src = await getSource(env.db, 'chinook');
  if (!src || src.type !== 'postgres') throw new Error('no chinook source');
  await putSource(env.db, { id: src.id, type: src.type, name: src.name, description: src.description, enabled: true, settings: { ...src.settings, pool_size: 4, max_concurrent_per_identity: 2, identity_wait_ms: 30_000, connect_timeout_ms: 30_000 } });
  await scanSource(env.db, 'chinook');
  const keys: string[] = [];
  for (let i = 0; i < identities; i++) {
    const who = await createIdentity(env.db, `agent-${i}`);
    await grantRole(env.db, { identityId: who.id, roleName: DEMO_ROLE.name, sourceId: 'chinook' });
    keys.push((await createApiKey(env.db, who.id)).secret);
  }
  return { env, keys };
}

/** What a call got: served with rows, refused by admission by capacity (rate_limited), or anything else (its code). */
type Answer = 'served' | 'capacity' | string;

/** One interlock_query call in the modern dialect. */
async function query(env: GovernedEnv, apiKey: string, sql: string, params: unknown[] = []): Promise<Answer> {
  const r = await fetch(env.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${apiKey}`, 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'interlock_query' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql, params }, _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} } } }),
  });
  const text = await r.text();
  const json = (r.headers.get('content-type') ?? '').startsWith('text/event-stream') ? text.split('\n').filter((l) => l.startsWith('data: ')).at(-1)!.slice(6) : text;
  const body = JSON.parse(json);
  if (r.status === 200 && Array.isArray(body.result?.structuredContent?.rows) && body.result.structuredContent.rows.length === 1) return 'served';
  if (r.status === 429 && body.error?.data?.code === 'rate_limited') return 'capacity';
  return String(body.error?.data?.code ?? body.result?.structuredContent?.code ?? r.status);
}

/** `workers` loops of `call` until `until` (epoch ms); every answer, in order of arrival. After a refusal a loop waits 50 ms. */
async function loops(workers: number, until: number, call: (i: number) => Promise<Answer>): Promise<Answer[]> {
  const out: Answer[] = [];
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      while (Date.now() < until) {
        const a = await call(w);
        out.push(a);
        if (a !== 'served') await new Promise((r) => setTimeout(r, 50));
      }
    }),
  );
  return out;
}

/** 30 point reads one after another: the limiter's long-term latency is a point read's. */
async function warm(env: GovernedEnv, key: string): Promise<void> {
  for (let i = 1; i <= 30; i++) expect(await query(env, key, POINT, [i])).toBe('served');
}

const count = (xs: Answer[], a: Answer) => xs.filter((x) => x === a).length;

/** The hostile identity's slow flood, 4 s, beside `honestWorkers` honest identities' point reads (one at a time each, from 0.3 s); the honest answers, the hostile's and the limit at the end. */
async function hostileBesideHonest(admission: Admission, honestWorkers = 2): Promise<{ honest: Answer[]; hostile: Answer[]; limit: number }> {
  const { env, keys } = await start(admission, 3);
  try {
    const [hostileKey, ...honestKeys] = keys;
    await warm(env, honestKeys[0]);
    const until = Date.now() + 4000;
    const hostile = loops(12, until, () => query(env, hostileKey, slow(0.3)));
    await new Promise((r) => setTimeout(r, 300));
    const honest = await loops(honestWorkers, until, (w) => query(env, honestKeys[w], POINT, [1 + Math.floor(Math.random() * 3000)]));
    await hostile;
    const limit = env.gateway.capacity!.snapshot().limit;
    return { honest, hostile: await hostile, limit };
  } finally {
    await env.close();
  }
}

/** Four identities at their cap of slow statements (8 wanting the pool's 4 connections), 3 s; the answers and the limit at the end. */
async function saturatedPool(admission: Admission): Promise<{ answers: Answer[]; limit: number; poolWait: number }> {
  const { env, keys } = await start(admission, 4);
  try {
    await warm(env, keys[0]);
    const answers = await loops(8, Date.now() + 3000, (w) => query(env, keys[w % 4], slow(0.15)));
    const s = env.gateway.capacity!.snapshot();
    return { answers, limit: s.limit, poolWait: s.shortPoolWait };
  } finally {
    await env.close();
  }
}

test('sample_pool_wait: a hostile identity flooding slow statements does not lower the limit, and honest point reads beside it are never refused by capacity', async () => {
  const { honest, hostile, limit } = await hostileBesideHonest({ sample_pool_wait: true });
  // eslint-disable-next-line no-console
  console.log(`pool wait counted: honest ${count(honest, 'served')}/${honest.length} served; hostile ${count(hostile, 'served')} served, ${count(hostile, 'capacity')} refused by capacity; limit ${limit}`);
  expect(honest.length).toBeGreaterThanOrEqual(10);
  expect(honest.filter((a) => a !== 'served')).toEqual([]);
  expect(count(hostile, 'served')).toBeGreaterThan(0);
  expect(limit).toBeGreaterThanOrEqual(INITIAL_LIMIT);
});

test('the hostile flood alone: sample_pool_wait leaves its statements and its own slot wait out (the limit holds); counting all source time (sample_source_time) lowers the limit', async () => {
  const alone = await hostileBesideHonest({ sample_pool_wait: true }, 0);
  const counted = await hostileBesideHonest({ sample_source_time: true }, 0);
  // eslint-disable-next-line no-console
  console.log(`hostile alone: pool wait counted: ${count(alone.hostile, 'served')} served, limit ${alone.limit}; all source time counted: ${count(counted.hostile, 'served')} served, ${count(counted.hostile, 'capacity')} refused by capacity, limit ${counted.limit}`);
  expect(count(alone.hostile, 'served')).toBeGreaterThan(0);
  expect(alone.limit).toBeGreaterThanOrEqual(INITIAL_LIMIT);
  expect(counted.limit).toBeLessThan(INITIAL_LIMIT * 0.9);
});

test('sample_pool_wait: a saturated shared pool (four identities at their cap, 8 statements for 4 connections) lowers the limit', async () => {
  const { answers, limit, poolWait } = await saturatedPool({ sample_pool_wait: true });
  // eslint-disable-next-line no-console
  console.log(`pool wait counted: ${count(answers, 'served')}/${answers.length} served, ${count(answers, 'capacity')} refused by capacity; limit ${limit}; pool wait (fast average) ${poolWait} ms`);
  expect(count(answers, 'served')).toBeGreaterThan(0);
  expect(answers.filter((a) => a !== 'served' && a !== 'capacity')).toEqual([]);
  expect(poolWait).toBeGreaterThan(20);
  expect(limit).toBeLessThan(INITIAL_LIMIT * 0.9);
});

test('without sample_pool_wait (the default) the same saturated pool is invisible to the limit', async () => {
  const { answers, limit, poolWait } = await saturatedPool({});
  // eslint-disable-next-line no-console
  console.log(`pool wait left out: ${count(answers, 'served')}/${answers.length} served; limit ${limit}; pool wait (fast average) ${poolWait} ms`);
  expect(answers.filter((a) => a !== 'served')).toEqual([]);
  expect(poolWait).toBeGreaterThan(20);
  expect(limit).toBeGreaterThanOrEqual(INITIAL_LIMIT);
});
