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
 *     Left open (low): one search is not bounded in time (no statement_timeout on the control
 *     pool), so on a very large index a slot may stay held for long; it holds at most 4 of the 10.
 */
import pg from 'pg';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { upsertRole } from '../../../src/control/roles';
import { grantRole } from '../../../src/control/grants';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { HANDBOOK_ROLE } from '../../../src/discovery/handbook';
import { indexGeneratedCorpus } from '../../../src/discovery/bench';
import { DEMO_ROLE } from '../../../src/demo/provision';
import { DISCOVERY_SEARCHES_TOTAL } from '../../../src/discovery/search-slots';

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
