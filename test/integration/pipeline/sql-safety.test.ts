/**
 * sql-safety.md through the WHOLE governed pipeline on real PostgreSQL: every class (with generated
 * variants) is refused or queued, nothing executes on the agent's call, and the database state is
 * read afterwards to prove nothing changed. The caller holds an allow-everything role here, so only
 * the SQL layers stand between it and the database.
 */
import fc from 'fast-check';
import pg from 'pg';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { CORPUS, DANGEROUS_CALLS, CALL_SCHEMA, HIDDEN_WRITES, LEGIT } from '../../unit/sql/corpus';
import { upsertRole } from '../../../src/control/roles';
import { grantRole } from '../../../src/control/grants';
import { scanSource } from '../../../src/control/scan';
import { removePolicy } from '../../../src/control/policies';

let env: GovernedEnv;
let admin: pg.Client;

async function stateChecksum(): Promise<string> {
  const r = await admin.query(`SELECT
    (SELECT coalesce(string_agg(a::text || ':' || coalesce(b, ''), ',' ORDER BY a, b), '') FROM t) AS t_rows,
    (SELECT last_value::text || is_called::text FROM s) AS seq,
    (SELECT count(*) FROM playlist)::text AS playlists,
    (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))::text AS advisory,
    (SELECT count(*) FROM pg_class WHERE relname IN ('newt', 'x'))::text AS created,
    (SELECT count(*) FROM pg_largeobject_metadata)::text AS lobs`);
  return JSON.stringify(r.rows[0]);
}

beforeAll(async () => {
  env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } } } });
  admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
  await admin.query(`CREATE TABLE t (a int, b text); INSERT INTO t VALUES (1, 'one'), (2, 'two');
    CREATE SEQUENCE s; CREATE TABLE sidefx_log (n int);
    CREATE FUNCTION sidefx() RETURNS int LANGUAGE sql VOLATILE AS 'INSERT INTO sidefx_log VALUES (1) RETURNING n';
    GRANT SELECT ON t, sidefx_log TO ${admin.escapeIdentifier(env.demo.readerRole)};
    GRANT USAGE, SELECT ON SEQUENCE s TO ${admin.escapeIdentifier(env.demo.readerRole)};
    GRANT SELECT, INSERT, UPDATE, DELETE ON t TO ${admin.escapeIdentifier(env.demo.writerRole)};
    CREATE SCHEMA s; CREATE TABLE s.t (x int, y text); CREATE TABLE s.only_in_s (z int);
    CREATE VIEW customer_view AS SELECT customer_id, email FROM customer;
    CREATE TABLE "MixedCase" ("Id" int, id int);
    GRANT USAGE ON SCHEMA s TO ${admin.escapeIdentifier(env.demo.readerRole)};
    GRANT SELECT ON ALL TABLES IN SCHEMA s, public TO ${admin.escapeIdentifier(env.demo.readerRole)}`);
  // This file tests the SQL layers alone: drop the demo's masking policies.
  for (const name of ['demo-mask-contact', 'demo-mask-contact-phone']) await removePolicy(env.db, name);
  await scanSource(env.db, 'chinook');
  await upsertRole(env.db, { name: 'attacker', statements: [{ effect: 'allow', action: '*', resource: '*.*' }] });
  await grantRole(env.db, { identityId: env.demo.identityId, roleName: 'attacker', sourceId: 'chinook' });
  env.gateway.store.invalidate('*');
}, 90_000);
afterAll(async () => {
  await admin?.end();
  await env?.close();
});

type Verdict = 'refused' | 'queued' | 'invalid' | 'rows';
async function verdict(sql: string): Promise<{ v: Verdict; body: any }> {
  const params = Array.from({ length: Math.max(0, ...[...sql.matchAll(/\$(\d+)/g)].map((m) => Number(m[1]))) }, (_, i) => i + 1);
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql, ...(params.length && !/\$\$|\$x\$/.test(sql) ? { params } : {}) }, env.apiKey);
  const res = r.body.result;
  if (!res) return { v: 'invalid', body: r.body };
  const sc = res.structuredContent ?? {};
  if (sc.status === 'queued') return { v: 'queued', body: res };
  if (res.isError && ['forbidden', 'unavailable', 'not_found'].includes(sc.status)) return { v: 'refused', body: res };
  if (res.isError) return { v: 'invalid', body: res };
  return { v: 'rows', body: res };
}

test('every corpus sample of classes 1–5 is refused or queued; the database does not change', async () => {
  const before = await stateChecksum();
  for (const sample of CORPUS) {
    const { v, body } = await verdict(sample.sql);
    const want = 'kind' in sample.expect ? 'queued' : sample.expect.code === 'invalid_sql' ? 'invalid' : 'refused';
    if (v !== want) throw new Error(`${JSON.stringify(sample.sql)} → ${v} (wanted ${want}): ${JSON.stringify(body).slice(0, 300)}`);
  }
  expect(await stateChecksum()).toBe(before);
  const sidefx = await admin.query('SELECT count(*)::int AS n FROM sidefx_log');
  expect(sidefx.rows[0].n).toBe(0);
}, 120_000);

test('generated variants (case, comments, quoting, qualification, nesting) are never run', async () => {
  const before = await stateChecksum();
  const spacer = fc.constantFrom(' ', '\n', '\t', ' /* x */ ', ' --c\n ');
  const caseVary = (s: string, flips: boolean[]) => s.replace(/[a-z]+/gi, (w, i) => (flips[i % flips.length] ? w.toUpperCase() : w.toLowerCase()));
  const callText = fc.tuple(fc.constantFrom(...DANGEROUS_CALLS), fc.constantFrom('plain', 'qualified', 'quoted')).map(([c, q]) => {
    const schema = CALL_SCHEMA[c.fn] ?? 'pg_catalog';
    const name = q === 'plain' ? c.fn : q === 'qualified' ? `${schema}.${c.fn}` : `"${schema}"."${c.fn}"`;
    return `${name}(${c.args})`;
  });
  const wrappers = [
    (x: string) => `SELECT ${x}`,
    (x: string) => `SELECT * FROM (SELECT ${x}) q`,
    (x: string) => `WITH c AS (SELECT ${x} AS v) SELECT v FROM c`,
    (x: string) => `SELECT a FROM t WHERE a = (SELECT ${x})`,
    (x: string) => `SELECT CASE WHEN a > 0 THEN ${x} END FROM t`,
    (x: string) => `SELECT 1 UNION ALL SELECT ${x}`,
    (x: string) => `SELECT coalesce(${x}, 0)`,
    (x: string) => `SELECT * FROM t, LATERAL (SELECT ${x}) l`,
  ];
  await fc.assert(
    fc.asyncProperty(callText, fc.integer({ min: 0, max: wrappers.length - 1 }), spacer, fc.array(fc.boolean(), { minLength: 1, maxLength: 4 }), async (call, w, sp, flips) => {
      const sql = caseVary(wrappers[w](call), flips).replace(/ /g, sp);
      const { v } = await verdict(sql);
      expect(['refused', 'invalid']).toContain(v);
    }),
    { numRuns: 60, seed: 1129 },
  );
  await fc.assert(
    fc.asyncProperty(fc.constantFrom(...HIDDEN_WRITES), fc.constantFrom('cte', 'explain', 'stacked'), async (write, how) => {
      const sql = how === 'cte' ? `WITH w AS (${write}) SELECT * FROM w` : how === 'explain' ? `EXPLAIN ANALYZE ${write}` : `SELECT 1; ${write}`;
      const { v } = await verdict(sql);
      expect(how === 'cte' ? ['queued', 'refused'] : ['refused']).toContain(v);
    }),
    { numRuns: 30, seed: 7 },
  );
  expect(await stateChecksum()).toBe(before);
}, 180_000);

test('the legitimate list runs (false positives are defects too)', async () => {
  const failures: string[] = [];
  for (const sql of LEGIT) {
    const { v, body } = await verdict(sql);
    if (v !== 'rows') failures.push(`${sql} → ${v}: ${JSON.stringify(body.structuredContent ?? body).slice(0, 200)}`);
  }
  expect(failures).toEqual([]);
}, 120_000);
