/**
 * Helpers of the admission-by-capacity load tests (issue 29 item 1; test/integration/load/
 * capacity-pool-wait.test.ts, capacity-identity.test.ts): a governed gateway over fixed admission
 * settings with a slow-statement fixture and extra identities, one interlock_query call classified
 * by its answer, closed loops of calls.
 */
import { sourceQuery, startGovernedEnv, type GovernedEnv } from './governed';
import { createIdentity } from '../../src/control/identities';
import { createApiKey } from '../../src/control/keys';
import { grantRole } from '../../src/control/grants';
import { getSource, putSource } from '../../src/control/sources';
import { scanSource } from '../../src/control/scan';
import { DEMO_ROLE } from '../../src/demo/provision';
import type { ResolvedGatewayConfig } from '../../src/control/config';
import type { CapacityPermit } from '../../src/transport/capacity';

const MODERN = '2026-07-28';
export const INITIAL_LIMIT = 16;
export const POINT = 'SELECT track_id FROM track WHERE track_id = $1';
export const slow = (seconds: number) => `SELECT public.slow_count(${seconds}) AS n`;

export type Admission = Partial<NonNullable<ResolvedGatewayConfig['admission']>>;

/** A governed gateway with `admission` over fixed settings, the slow function, and `identities` more identities granted the demo role (their keys). */
export async function start(admission: Admission, identities: number): Promise<{ env: GovernedEnv; keys: string[] }> {
  const env = await startGovernedEnv({
    config: {
      // Limit from 16 (may fall to 2), a short queue; event-loop delay and the audit queue can not lower it here (the machine is shared).
      admission: { enabled: true, initial_limit: INITIAL_LIMIT, min_limit: 2, max_limit: 64, queue_size: 8, queue_timeout_ms: 250, tolerance: 2, max_event_loop_delay_ms: 60_000, max_audit_queue: 100_000, ...admission },
      client_limits: { streams_per_address: 100_000, streams_per_identity: 100_000, body_reads_per_address: 100_000 },
      rate_limits: { per_identity: { points: 1_000_000, window_seconds: 60 }, per_source: { points: 1_000_000, window_seconds: 60 } },
      cache: { ttl_ms: 0, max_bytes: 0 },
    },
  });
  // Its body calls pg_sleep, which agents may not call: InterLock refuses it as opaque unless the
  // source trusts it (task hfn), as an operator would for such a helper.
  await sourceQuery(env, "CREATE FUNCTION public.slow_count(seconds float8) RETURNS int LANGUAGE sql STABLE AS 'SELECT count(*)::int FROM pg_catalog.pg_sleep(seconds)'");
  const src = await getSource(env.db, 'chinook');
  if (!src || src.type !== 'postgres') throw new Error('no chinook source');
  await putSource(env.db, { id: src.id, type: src.type, name: src.name, description: src.description, enabled: true, settings: { ...src.settings, trusted_functions: ['public.slow_count'], pool_size: 4, max_concurrent_per_identity: 2, identity_wait_ms: 30_000, connect_timeout_ms: 30_000 } });
  await scanSource(env.db, 'chinook');
  const keys: string[] = [];
  for (let i = 0; i < identities; i++) {
    const who = await createIdentity(env.db, `agent-${i}`);
    await grantRole(env.db, { identityId: who.id, roleName: DEMO_ROLE.name, sourceId: 'chinook' });
    keys.push((await createApiKey(env.db, who.id)).secret);
  }
  return { env, keys };
}

/** What a call got: served with rows, refused by admission by capacity (rate_limited with Retry-After), or anything else (its code). */
export type Answer = 'served' | 'capacity' | string;

/** One interlock_query call in the modern dialect. */
export async function query(env: GovernedEnv, apiKey: string, sql: string, params: unknown[] = []): Promise<Answer> {
  const r = await fetch(env.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${apiKey}`, 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'interlock_query' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql, params }, _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} } } }),
  });
  const text = await r.text();
  const json = (r.headers.get('content-type') ?? '').startsWith('text/event-stream') ? text.split('\n').filter((l) => l.startsWith('data: ')).at(-1)!.slice(6) : text;
  const body = JSON.parse(json);
  if (r.status === 200 && Array.isArray(body.result?.structuredContent?.rows) && body.result.structuredContent.rows.length === 1) return 'served';
  // A refusal by admission by capacity carries Retry-After (whole seconds ≥ 1), else it is reported apart.
  if (r.status === 429 && body.error?.data?.code === 'rate_limited') return Number(r.headers.get('retry-after')) >= 1 ? 'capacity' : 'capacity without Retry-After';
  return String(body.error?.data?.code ?? body.result?.structuredContent?.code ?? r.status);
}

/** `workers` loops of `call` until `until` (epoch ms); every answer, in order of arrival. After a refusal a loop waits 50 ms. */
export async function loops(workers: number, until: number, call: (i: number) => Promise<Answer>): Promise<Answer[]> {
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
export async function warm(env: GovernedEnv, key: string): Promise<void> {
  for (let i = 1; i <= 30; i++) expect(await query(env, key, POINT, [i])).toBe('served');
}

export const count = (xs: Answer[], a: Answer) => xs.filter((x) => x === a).length;


/**
 * Holds the replica's only capacity slot (admission limit 1) and has the limiter refuse once, so it is
 * shedding (new connections start at the front door, src/transport/front-door.ts). Returns the held
 * permit (release it to free the slot). Throws when the slot was not free or no refusal followed.
 */
export function shed(env: GovernedEnv): CapacityPermit {
  const got = env.gateway.capacity!.acquire(undefined, 'someone-else');
  if (got instanceof Promise || 'retryAfterMs' in got) throw new Error('the slot was not free');
  const refused = env.gateway.capacity!.acquire(undefined, 'someone-else');
  if (refused instanceof Promise || !('retryAfterMs' in refused)) throw new Error('not refused');
  return got;
}
