/**
 * Red team rt49b: availability ("availability is security"). One hostile identity (or a client
 * without a key) beside an honest identity, on a real governed gateway (test/helpers/governed.ts:
 * loopback, the machine's PostgreSQL as source and control database); what the honest identity gets
 * is asserted as outcomes (codes, answered or not) and counts, never as times. Not repeated here
 * (covered elsewhere): unread answers (http/unread-answers), slow source statements against the
 * source pool's fair share (sources/fair-share*, load/capacity-*), the breaker counting only source
 * health (sources/breaker-health), huge values (sources/huge-values-gateway, load/abuse), lock
 * waits past lock_timeout (pipeline/lock-timeout), rate-limit fairness across replicas
 * (pipeline/rate-limit-fairness), approval queue caps (approvals/queue-bounds), keyless budgets
 * and body caps (http/client-limits, load/abuse).
 *
 * Findings (severity, state):
 *  D1 high, fixed: interlock_discover ranks the index in the control database, on the gateway's one
 *     control pool (10 connections), with no statement_timeout and no share per identity. A query
 *     ORing the common words of the corpus (web-search syntax, within the tool's 1,000 characters)
 *     ranks every document: about 2 s on 10,000 documents. One identity with 40 such searches in
 *     flight held all 10 control connections, and an honest identity's `SELECT 1` through
 *     interlock_query waited for one (for its rate-limit block, identity look-ups): answered after
 *     11 s and 24 s in the exploration run (before the fix, 2 of 2 answers; every call of every
 *     identity shares that pool). Now a search holds one of DISCOVERY_SEARCHES_PER_IDENTITY (2)
 *     slots of its identity and DISCOVERY_SEARCHES_TOTAL (4) of the process
 *     (src/discovery/search-slots.ts, also interlock_related_documents); beyond them it waits up to
 *     2 s and is refused concurrency_limited (retry_after_ms 1000). Shown failing without the fix:
 *     the control database ran 10 discovery statements at once (the whole pool), the test allows 4.
 *     Follow-up (low, fixed in lows49b): one search was not bounded in time (no statement_timeout
 *     on the control pool), so on a very large index a slot stayed held for as long as it ran. Now
 *     each search statement runs in its own read-only transaction under SET LOCAL statement_timeout
 *     (DISCOVERY_SEARCH_TIMEOUT_MS, 15 s; boundedQueryable in src/discovery/search-slots.ts) and a
 *     search it cuts is refused statement_timeout naming the limit. Shown failing without the fix:
 *     with a 100 ms limit the ~2 s whole-index search was answered 200:ok.
 *  D2 medium, fixed: the breaker counted class 53 (insufficient resources) raised by a running
 *     statement as the source's health. A read of a partitioned table with more partitions than the
 *     server's shared lock table holds entries for (max_locks_per_transaction × connections: a few
 *     thousand on default settings; here a cluster with 10 and 3,000 partitions) fails with ERROR
 *     53200 "out of shared memory", caused by the statement alone. One identity's concurrent reads of
 *     it opened the source's circuit for everyone (each read's hierarchy probe succeeds first and
 *     resets the count, so it needs as many reads at once as the threshold: pool_size 10 gives an
 *     identity 5, the default threshold). Shown failing without the fix: circuit_open for the hostile
 *     reads and for the honest `select 1`. Now class 53 counts only while connecting (53300) and as
 *     FATAL/PANIC (src/sources/postgres/health.ts); the agent still gets the opaque failure.
 *  D3 low, fixed: the admin API spent no keyless budget on a missing or unknown operator token, and
 *     every well-formed one cost a control-database look-up: 6,000 from one address were all answered
 *     401; the honest identity beside them was answered (slower). Now such a request spends the
 *     address's keyless budget (client_limits.keyless), and once it is spent requests are refused 429
 *     rate_limited before any look-up (src/admin/routes.ts; spec/openapi-v1.yaml AdminRateLimited),
 *     but for a token that resolved in the last 10 minutes (an operator at work behind the same proxy).
 *     Shown failing without the fix: 700 × 401, no 429. Follow-up (low, fixed in lows49b): the
 *     console's sign-in (POST /console/api/session) looked every token up; it now shares the same
 *     budget and exemption (src/admin/token-budget.ts, used by both routes; 429 in the ErrorBody the
 *     console shows). Shown failing without the fix: 30 × 401 past a budget of 20.
 *  D4 low, fixed: a plain-HTTP `interlock serve` (no listen.tls) installed no SIGHUP handler, so
 *     SIGHUP (systemctl reload, a log rotator's kill -HUP, a closed terminal) ended it at once by
 *     Node's default action: no drain, no audit flush. Now SIGHUP is logged and changes nothing
 *     without TLS (src/server.ts). Shown failing without the fix: the child ended by SIGHUP.
 *     Follow-up (low, fixed in lows49b): the shutdown removed the handler first, so a SIGHUP during
 *     the drain ended the process; now a closing gateway keeps a handler (logged, ignored) until it
 *     has drained and flushed the audit, and `serve`/`demo` ignore SIGHUP from the first
 *     SIGTERM/SIGINT until they exit (src/cli/main.ts). Shown failing without the fix: ended by SIGHUP.
 *
 * Held (seen in exploration runs or by reading; no test added):
 *  - a params array longer or shorter than the statement's $n (a Bind the server would refuse with
 *    08P01, a class that counts): refused invalid_arguments before anything is sent.
 *  - advisory locks (pg_advisory_xact_lock_shared in a loop also fills the lock table): refused by the
 *    function policy (deny-list).
 *  - without concurrency, one identity's reads of the many-partition table (D2) never opened the
 *    circuit: each read's hierarchy probe succeeds before its statement and resets the count.
 *  - audit writes: an event keeps the statement's fingerprint, not its text or parameters, so huge
 *    parameters (up to the 1 MiB body) do not make the audit's batches larger (by reading).
 *  - webhooks whose target hangs: each attempt has a 10 s timeout, deliveries run beside each other
 *    and hold no control connection while they wait (src/approvals/webhooks.ts, by reading); the
 *    events are bounded by the approval queue caps.
 */
import pg from 'pg';
import { spawn, type ChildProcess } from 'node:child_process';
import { createConnection, type Socket } from 'node:net';
import { join } from 'node:path';
import { freshControlDb } from '../control/control-db';
import { freePort } from '../sources/cluster';
import { randomBytes } from 'node:crypto';
import { createOperatorToken } from '../../../src/admin/tokens';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { upsertRole } from '../../../src/control/roles';
import { grantRole } from '../../../src/control/grants';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { HANDBOOK_ROLE } from '../../../src/discovery/handbook';
import { indexGeneratedCorpus } from '../../../src/discovery/bench';
import { DEMO_ROLE } from '../../../src/demo/provision';
import { DISCOVERY_SEARCHES_TOTAL } from '../../../src/discovery/search-slots';
import { startCluster, type Cluster } from '../sources/cluster';
import { createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { openControlDb, type ControlDb } from '../../../src/control/db';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from '../../../src/control/config';
import { provisionDemo } from '../../../src/demo/provision';
import { getSource, putSource } from '../../../src/control/sources';
import { scanSource } from '../../../src/control/scan';
import { startGovernedGateway, type GovernedGateway } from '../../../src/gateway';
import { createLogger } from '../../../src/observability/logger';

jest.setTimeout(240_000);

/** The generated corpus's vocabulary (src/discovery/bench.ts), ORed: every document matches and is ranked. */
const WORDS = (
  'account alert api approval archive audit backup billing build cache certificate change checklist cluster config contract customer ' +
  'dashboard database deploy disk dns escalation export failover firewall incident invoice kubernetes latency ledger license login ' +
  'maintenance metric migration monitor network onboarding outage pager password patch payment payroll permission pipeline policy ' +
  'postgres privacy queue recovery refund release replica report restore retention review rollback rotation runbook schedule secret ' +
  'security server service session shipment storage subscription support ticket timeout token training'
).split(' ');
const HEAVY_QUERY = WORDS.join(' OR ').slice(0, 1000);

let env: GovernedEnv;
let honestKey: string;

beforeAll(async () => {
  // Rate limits out of the way: the attack is what the calls the budget admits can hold.
  env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100_000, window_seconds: 60 }, per_source: { points: 100_000, window_seconds: 60 } } } });
  await indexGeneratedCorpus(env.db, 'docs', 10_000);
  await upsertRole(env.db, HANDBOOK_ROLE);
  // The hostile identity is the demo agent: it may discover in `docs`.
  await grantRole(env.db, { identityId: env.demo.identityId, roleName: HANDBOOK_ROLE.name, sourceId: 'docs' });
  const honest = await createIdentity(env.db, 'rt49b-honest');
  await grantRole(env.db, { identityId: honest.id, roleName: DEMO_ROLE.name, sourceId: 'chinook' });
  honestKey = (await createApiKey(env.db, honest.id)).secret;
}, 120_000);
afterAll(async () => env?.close());

/** A call's outcome as `status:code` (`ok` for a result without isError; the modern error's data code otherwise). */
function outcomeOf(r: { status: number; body: any }): string {
  const sc = r.body?.result?.structuredContent;
  if (r.body?.result && !r.body.result.isError) return `${r.status}:ok`;
  return `${r.status}:${sc?.code ?? r.body?.error?.data?.code ?? 'unknown'}`;
}

/** Waits (bounded) until `fn` holds. */
async function until(fn: () => boolean | Promise<boolean>, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('D1 (high, fixed): discovery searches kept to a share of the control pool', () => {
  test('a flood of whole-index searches holds at most DISCOVERY_SEARCHES_TOTAL control connections; an honest read is answered; refusals are concurrency_limited', async () => {
    const watcher = new pg.Client({ connectionString: env.controlUrl });
    await watcher.connect();
    let maxActive = 0;
    let sampling = true;
    const activeSearches = async () =>
      (await watcher.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND query LIKE '%ts_rank_cd%' AND pid <> pg_backend_pid()")).rows[0].n;
    const sampler = (async () => {
      while (sampling) {
        maxActive = Math.max(maxActive, await activeSearches());
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    try {
      const hostile: string[] = [];
      const refusals: any[] = [];
      // 24 searches at once, each loop three in a row: bounded in count.
      const flood = Promise.all(
        Array.from({ length: 24 }, async () => {
          for (let i = 0; i < 3; i++) {
            const r = await callTool(env, 'interlock_discover', { source_id: 'docs', query: HEAVY_QUERY, limit: 50 }, env.apiKey);
            const o = outcomeOf(r);
            hostile.push(o);
            if (o === '200:concurrency_limited') refusals.push(r.body.result.structuredContent);
          }
        }),
      );
      await until(async () => maxActive >= 1);
      const honest: string[] = [];
      for (let i = 0; i < 3; i++) honest.push(outcomeOf(await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'select 1 as one' }, honestKey)));
      await flood;
      sampling = false;
      await sampler;
      expect(honest).toEqual(['200:ok', '200:ok', '200:ok']);
      // Before the fix: 10 (the whole control pool).
      expect(maxActive).toBeLessThanOrEqual(DISCOVERY_SEARCHES_TOTAL);
      expect(maxActive).toBeGreaterThanOrEqual(1);
      // The hostile identity's searches: served, refused for its share, or refused at capacity.
      expect(new Set(hostile).size).toBeGreaterThan(0);
      for (const o of hostile) expect(['200:ok', '200:concurrency_limited', '200:rate_limited']).toContain(o);
      expect(hostile).toContain('200:ok');
      expect(hostile).toContain('200:concurrency_limited');
      for (const s of refusals) {
        expect(s).toEqual({ status: 'rate_limited', code: 'concurrency_limited', message: expect.any(String), retry_after_ms: 1000, request_id: expect.stringMatching(/^req_/) });
      }
    } finally {
      sampling = false;
      await sampler.catch(() => undefined);
      await watcher.end();
    }
  });
});

describe('D1 follow-up (low, fixed in lows49b): one discovery search statement is bounded in time', () => {
  // Before: the ranking statement ran with no statement_timeout (the control pool sets none), so on a
  // very large index a search held its slot, and a control connection, for as long as it ran. Now
  // each statement of a search runs in its own read-only transaction under SET LOCAL
  // statement_timeout (DISCOVERY_SEARCH_TIMEOUT_MS, 15 s; here 100 ms against a ~2 s whole-index
  // ranking): cut, refused statement_timeout, and the connection is free again.
  let gw: GovernedGateway;
  beforeAll(async () => {
    const config = structuredClone(DEFAULT_CONFIG as ResolvedGatewayConfig);
    config.rate_limits = { ...config.rate_limits, per_identity: { points: 100_000, window_seconds: 60 }, per_source: { points: 100_000, window_seconds: 60 } };
    gw = await startGovernedGateway({ db: env.db, config, host: '127.0.0.1', port: 0, logger: createLogger('silent'), catalogRescanMs: 0, discoverySearchTimeoutMs: 100 });
  });
  afterAll(async () => gw?.close(1000));

  test('a whole-index search past the bound is refused statement_timeout and its statement no longer runs; a narrow search is answered', async () => {
    const heavy = await callTool(gw, 'interlock_discover', { source_id: 'docs', query: HEAVY_QUERY, limit: 50 }, env.apiKey);
    // Before the fix: 200:ok after the whole ranking (about 2 s).
    expect(outcomeOf(heavy)).toBe('200:statement_timeout');
    expect(heavy.body.result.structuredContent).toEqual({ status: 'unavailable', code: 'statement_timeout', message: 'The search ran longer than the discovery search limit (100 ms) and was cancelled; narrow the query (fewer OR terms, a filter) and try again.', request_id: expect.stringMatching(/^req_/) });
    const watcher = new pg.Client({ connectionString: env.controlUrl });
    await watcher.connect();
    try {
      const r = await watcher.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND query LIKE '%ts_rank_cd%' AND pid <> pg_backend_pid()");
      expect(r.rows[0].n).toBe(0);
    } finally {
      await watcher.end();
    }
    const narrow = await callTool(gw, 'interlock_discover', { source_id: 'docs', query: 'zzqxjv', limit: 5 }, env.apiKey);
    expect(narrow.body.result.structuredContent).toEqual({ hits: [], truncated: false });
  });
});

describe('D2 (medium, fixed): one identity opened the source circuit with reads that fill the server lock table', () => {
  // A source whose server's shared lock table is small for its partitions: a throwaway cluster with
  // max_locks_per_transaction 10 (about 400 lock entries for 40 connections) and a table of 3,000
  // partitions, so that reading the parent asks for more locks than the table holds: PostgreSQL
  // raises ERROR 53200 "out of shared memory" (class 53). The same happens on default settings
  // (64 per connection) with a few thousand partitions, or several such reads at once.
  let cluster: Cluster;
  let control: TempDatabase;
  let db: ControlDb;
  let gw: GovernedGateway;
  let hostileKey: string;
  let honest: string;
  beforeAll(async () => {
    cluster = await startCluster();
    const admin = new pg.Client({ connectionString: cluster.url() });
    await admin.connect();
    await admin.query('ALTER SYSTEM SET max_locks_per_transaction = 10');
    await admin.end();
    await cluster.stop();
    await cluster.start();
    control = await createTempDatabase('rt49b_control');
    const logger = createLogger('silent');
    db = await openControlDb(control.url, { logger });
    const demo = await provisionDemo({ adminUrl: cluster.url(), controlDb: db, databaseName: 'chinook_rt49b', rolePrefix: 'il_rt49b', sourceId: 'locks', identityName: 'rt49b-hostile', logger });
    const owner = new pg.Client({ connectionString: cluster.url('chinook_rt49b') });
    await owner.connect();
    try {
      await owner.query('CREATE TABLE big (id int, k int) PARTITION BY LIST (k)');
      // One partition per transaction: a single transaction creating them all runs out of locks itself.
      for (let i = 0; i < 3000; i++) await owner.query(`CREATE TABLE big_${i} PARTITION OF big FOR VALUES IN (${i})`);
      await owner.query(`GRANT SELECT ON big TO "${demo.readerRole}"`);
    } finally {
      await owner.end();
    }
    const src = (await getSource(db, 'locks'))!;
    // pool_size 10 (max_concurrent_per_identity then 5) and the default threshold 5; a long reset keeps an opened circuit open.
    await putSource(db, { id: src.id, type: 'postgres', name: src.name, description: src.description, settings: { ...src.settings, pool_size: 10, breaker: { failure_threshold: 5, reset_timeout_ms: 120_000 } } });
    await scanSource(db, 'locks');
    await upsertRole(db, { name: 'rt49b-big', statements: [{ effect: 'allow', action: 'read', resource: 'public.big' }] });
    await grantRole(db, { identityId: demo.identityId, roleName: 'rt49b-big', sourceId: 'locks' });
    hostileKey = demo.apiKey;
    const h = await createIdentity(db, 'rt49b-honest-locks');
    await grantRole(db, { identityId: h.id, roleName: DEMO_ROLE.name, sourceId: 'locks' });
    honest = (await createApiKey(db, h.id)).secret;
    const config: ResolvedGatewayConfig = { ...structuredClone(DEFAULT_CONFIG as ResolvedGatewayConfig), cache: { ttl_ms: 0, max_bytes: 1024 * 1024 } };
    gw = await startGovernedGateway({ db, config, host: '127.0.0.1', port: 0, logger: createLogger((process.env.RT_LOG as any) ?? 'silent'), catalogRescanMs: 0 });
  }, 180_000);
  afterAll(async () => {
    await gw?.close(1000);
    await db?.close();
    await control?.drop();
    await cluster?.destroy();
  });

  test('three rounds of five concurrent reads of the 3,000-partition parent fail (53200, opaque to the agent) without opening the circuit; the honest identity is answered', async () => {
    const hostile: any[] = [];
    for (let round = 0; round < 3; round++) {
      const results = await Promise.all(Array.from({ length: 5 }, () => callTool(gw, 'interlock_query', { source_id: 'locks', sql: 'SELECT count(*) AS n FROM big' }, hostileKey)));
      hostile.push(...results.map((r) => r.body.result.structuredContent));
    }
    // Before the fix: the reads' own failures (each read's hierarchy probe succeeds first and resets the
    // count, so only concurrent reads line up five failures) opened the circuit: circuit_open for the
    // rest, and for the honest read. Class 53 is not among the SQLSTATE classes an agent is told
    // (spec/errors-v1.json statementSqlstates): the failure stays opaque.
    for (const s of hostile) expect(s).toEqual({ code: 'tool_execution_failed', message: 'tool execution failed', request_id: expect.stringMatching(/^req_/) });
    const r = await callTool(gw, 'interlock_query', { source_id: 'locks', sql: 'select 1 as one' }, honest);
    expect(r.body.result.structuredContent).toEqual({ rows: [{ one: 1 }], row_count: 1, truncated: false, cached: false });
  });
});

/**
 * A gateway of its own on the shared control database whose keyless budget is 20 an hour, started
 * before the describe's tests and closed after: no token comes back while a test runs.
 */
function withKeylessBudgetOf20AnHour(): () => GovernedGateway {
  let gw: GovernedGateway;
  beforeAll(async () => {
    const config = structuredClone(DEFAULT_CONFIG as ResolvedGatewayConfig);
    config.client_limits = { ...config.client_limits, keyless: { points: 20, window_seconds: 3600 } };
    gw = await startGovernedGateway({ db: env.db, config, host: '127.0.0.1', port: 0, logger: createLogger('silent'), catalogRescanMs: 0 });
  });
  afterAll(async () => gw?.close(1000));
  return () => gw;
}

describe('D3 (low, fixed): the admin API spends the keyless budget on missing and unknown operator tokens', () => {
  // Before: a request to /admin/v1 whose operator token is missing or does not resolve spent nothing,
  // and each well-formed one (ilo_ and 43 base64url characters) cost a control-database look-up
  // (resolveOperatorToken, not cached). 6,000 such requests from one address, 64 at once, were all
  // answered 401; the honest identity's `select 1` beside them was answered every time (first call
  // ~2 s, then ~0.2–0.3 s, against a few ms when quiet). Agents' keys had the address's keyless
  // budget (client_limits.keyless) and a bound on look-ups of unknown keys; the admin API neither.
  // A gateway of its own with a budget of 20 an hour, so no token comes back while the test runs (with
  // the default 600 a minute, refilled continuously, a slow clean-clone CI got one back before the
  // check "while the budget is spent" and was answered 401).
  const gateway = withKeylessBudgetOf20AnHour();

  test('past the keyless budget of its address, unknown operator tokens are refused 429 rate_limited before any look-up; an operator token in use is still served', async () => {
    const origin = new URL(gateway().url).origin;
    const operator = await createOperatorToken(env.db, 'rt49b-operator');
    const whoami = (token: string) => fetch(`${origin}/admin/v1/whoami`, { headers: { authorization: `Bearer ${token}` } });
    expect((await whoami(operator.secret)).status).toBe(200);
    const fake = () => 'ilo_' + randomBytes(32).toString('base64url');
    const statuses: number[] = [];
    const limited: Array<{ body: unknown; retryAfter: string | null }> = [];
    for (let i = 0; i < 30; i++) {
      const r = await whoami(fake());
      statuses.push(r.status);
      const body = await r.json();
      if (r.status === 429) limited.push({ body, retryAfter: r.headers.get('retry-after') });
    }
    // Before the fix: 30 × 401.
    expect(statuses).toEqual([...Array(20).fill(401), ...Array(10).fill(429)]);
    expect(limited[0].body).toEqual({ error: 'rate_limited', code: 'rate_limited', message: expect.stringMatching(/^Too many requests without a valid operator token from this address; wait \d+ ms before trying again\.$/), retry_after_ms: expect.any(Number) });
    expect(limited[0].retryAfter).toMatch(/^[0-9]+$/);
    // While the budget is spent: no token and unknown tokens 429, the operator token in use 200.
    expect((await fetch(`${origin}/admin/v1/whoami`)).status).toBe(429);
    expect((await whoami(fake())).status).toBe(429);
    const ok = await whoami(operator.secret);
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ operator: 'rt49b-operator', tokenId: operator.tokenId });
  });
});

describe('D3 follow-up (low, fixed in lows49b): the console sign-in spends the same keyless budget', () => {
  // Before: POST /console/api/session looked every token up (resolveOperatorToken) and answered 401,
  // however many came from one address. Now it shares /admin/v1's budget code
  // (src/admin/token-budget.ts). A gateway of its own with a budget of 20 an hour, so no token comes
  // back while the test runs.
  const gateway = withKeylessBudgetOf20AnHour();

  test('past the budget, sign-ins with no, unknown or not-lately-used tokens are refused 429 rate_limited before any look-up; a token that signed in lately still signs in', async () => {
    const origin = new URL(gateway().url).origin;
    const signIn = (body: unknown) => fetch(`${origin}/console/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const operator = await createOperatorToken(env.db, 'lows49b-console');
    const idle = await createOperatorToken(env.db, 'lows49b-console-idle');
    expect((await signIn({ token: operator.secret })).status).toBe(200);
    const fake = () => 'ilo_' + randomBytes(32).toString('base64url');
    const statuses: number[] = [];
    let limited: { body: unknown; retryAfter: string | null } | null = null;
    for (let i = 0; i < 30; i++) {
      const r = await signIn({ token: fake() });
      statuses.push(r.status);
      const body = await r.json();
      if (r.status === 429 && !limited) limited = { body, retryAfter: r.headers.get('retry-after') };
    }
    // Before the fix: 30 × 401.
    expect(statuses).toEqual([...Array(20).fill(401), ...Array(10).fill(429)]);
    expect(limited!.body).toEqual({ error: 'rate_limited', code: 'rate_limited', message: expect.stringMatching(/^Too many requests without a valid operator token from this address; wait \d+ ms before trying again\.$/), retry_after_ms: expect.any(Number) });
    expect(limited!.retryAfter).toMatch(/^[0-9]+$/);
    // While the budget is spent: no token, an unknown token and a valid token not used lately are
    // refused before any look-up (the last would have signed in); the token that signed in does.
    expect((await signIn({})).status).toBe(429);
    expect((await signIn({ token: fake() })).status).toBe(429);
    const idleR = await signIn({ token: idle.secret });
    expect(idleR.status).toBe(429);
    expect(idleR.headers.get('set-cookie')).toBeNull();
    const ok = await signIn({ token: operator.secret });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ operator: 'lows49b-console', csrfToken: expect.any(String) });
    expect(ok.headers.get('set-cookie')).toMatch(/^interlock_console=/);
  });
});

/** A real `interlock serve` (plain HTTP, log level info) on a fresh control database, its stdout and stderr gathered. */
async function startServe(dbName: string) {
  const t = await freshControlDb(dbName);
  const bin = join(__dirname, '..', '..', '..', 'bin', 'interlock.js');
  const port = await freePort();
  let out = '';
  const child: ChildProcess = spawn(process.execPath, [bin, '--database-url', t.db.url, 'serve', '--port', String(port)], { env: { ...process.env, INTERLOCK_LOG_LEVEL: 'info' }, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout!.setEncoding('utf8').on('data', (c: string) => (out += c));
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (out += c));
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const ended = () => child.exitCode !== null || child.signalCode !== null;
  const serve = {
    child,
    port,
    exited,
    output: () => out,
    /** Kills the child if it still runs and drops its database. */
    async cleanup() {
      if (!ended()) child.kill('SIGKILL');
      await t.cleanup();
    },
  };
  try {
    await until(() => out.includes(`InterLock listening on http://127.0.0.1:${port}/mcp`) || ended());
  } catch (err) {
    await serve.cleanup();
    throw err;
  }
  return serve;
}

describe('D4 (low, fixed): SIGHUP ended a plain-HTTP `interlock serve` at once', () => {
  // Before: only a gateway with listen.tls handled SIGHUP (its certificate reload); without TLS
  // Node's default action for SIGHUP ended the process at once: no drain of in-flight calls, no
  // audit flush, every agent cut off. `systemctl reload`, log rotators (postrotate kill -HUP) and a
  // closed terminal send it. Shown failing without the fix: the child ended by signal SIGHUP.
  test('a plain-HTTP serve logs two SIGHUPs, keeps answering /healthz, and stops in order on SIGTERM', async () => {
    const serve = await startServe('ctl_rt49b_hup');
    const { child, port } = serve;
    try {
      const health = async () => (await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => null))?.status ?? 0;
      expect(await health()).toBe(200);
      child.kill('SIGHUP');
      await until(() => serve.output().includes('SIGHUP received: nothing to reload') || child.signalCode !== null);
      child.kill('SIGHUP');
      await until(() => serve.output().split('SIGHUP received: nothing to reload').length === 3 || child.signalCode !== null);
      expect(child.signalCode).toBeNull();
      expect(await health()).toBe(200);
      child.kill('SIGTERM');
      expect(await serve.exited).toEqual({ code: 0, signal: null });
      expect(serve.output()).toContain('InterLock stopped.');
    } finally {
      await serve.cleanup();
    }
  });
  // Follow-up (low, fixed in lows49b): the shutdown removed the SIGHUP handler first, so a SIGHUP
  // during the drain (up to 10 s while calls finish) ended the process by Node's default: the drain
  // and the audit flush cut short. Now the closing gateway keeps a handler until it has drained, and
  // the CLI ignores SIGHUP from the first SIGTERM until it exits. Shown failing without the fix: the
  // child ended by signal SIGHUP.
  test('a SIGHUP while the serve drains (SIGTERM with a request still in flight) is logged and ignored; the process still stops in order', async () => {
    const serve = await startServe('ctl_rt49b_hup2');
    const { child, port } = serve;
    let sock: Socket | null = null;
    try {
      // A request in flight: its headers and part of its body sent, the rest never, so the drain waits.
      const s = createConnection({ host: '127.0.0.1', port });
      sock = s;
      s.on('error', () => undefined);
      await new Promise<void>((resolve) => s.once('connect', () => resolve()));
      s.write(`POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{"jsonrpc":`);
      await new Promise((r) => setTimeout(r, 200));
      child.kill('SIGTERM');
      await until(() => serve.output().includes('SIGTERM: shutting down') || child.signalCode !== null);
      child.kill('SIGHUP');
      // Before the fix: { code: null, signal: 'SIGHUP' }.
      expect(await serve.exited).toEqual({ code: 0, signal: null });
      expect(serve.output()).toContain('SIGHUP received while shutting down: ignored; the drain goes on');
      expect(serve.output()).toContain('InterLock stopped.');
    } finally {
      sock?.destroy();
      await serve.cleanup();
    }
  });
});
