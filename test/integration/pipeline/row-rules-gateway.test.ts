/**
 * Row rules through the real gateway (issue 27): an operator sets identity attributes and a role
 * with a row rule on Chinook's customer; the agent's API key then reads only its customers over
 * MCP. The row views are created by the source's writer role: while it may not create them the
 * ruled table is refused row_rules_unavailable (never read unfiltered), and once it may the same
 * call answers.
 */
import pg from 'pg';
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { upsertRole } from '../../../src/control/roles';
import { grantRole } from '../../../src/control/grants';
import { createIdentity, setIdentityAttributes } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { ValidationError } from '../../../src/control/errors';
import { scanSource } from '../../../src/control/scan';

let env: GovernedEnv;
let apiKey: string;

beforeAll(async () => {
  env = await startGovernedEnv();
  const rep = await createIdentity(env.db, 'rep-agent');
  apiKey = (await createApiKey(env.db, rep.id)).secret;
  await upsertRole(env.db, { name: 'support-rep', statements: [{ effect: 'allow', action: 'read', resource: 'public.customer', rows: 'support_rep_id = identity.employee_id' }] });
  await grantRole(env.db, { identityId: rep.id, roleName: 'support-rep', sourceId: 'chinook' });
}, 120_000);
afterAll(async () => env?.close());

async function query(sql: string): Promise<{ code?: string; rows?: Array<Record<string, unknown>> }> {
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql }, apiKey);
  expect(r.status).toBe(200);
  const res = r.body.result;
  return res.isError ? { code: res.structuredContent?.code } : { rows: res.structuredContent.rows };
}

/** Retries until the gateway has seen the control change (its caches clear on NOTIFY), at most ~3 s. */
async function eventually<T>(fn: () => Promise<T>, ok: (t: T) => boolean): Promise<T> {
  let last = await fn();
  for (let i = 0; i < 30 && !ok(last); i++) {
    await new Promise((r) => setTimeout(r, 100));
    last = await fn();
  }
  return last;
}

test('identity attributes are validated and stored', async () => {
  await expect(setIdentityAttributes(env.db, 'rep-agent', { 'Bad-Name': 1 })).rejects.toThrow(ValidationError);
  await expect(setIdentityAttributes(env.db, 'rep-agent', { x: { nested: true } })).rejects.toThrow(ValidationError);
  const r = await setIdentityAttributes(env.db, 'rep-agent', { employee_id: 3, tmp: 'x' });
  expect(r.attributes).toEqual({ employee_id: 3, tmp: 'x' });
  expect((await setIdentityAttributes(env.db, 'rep-agent', { tmp: null })).attributes).toEqual({ employee_id: 3 });
});

test('a ruled table is refused while the row views cannot be created, and read through them once they can', async () => {
  // The demo gives its writer role schema interlock_rows; without that schema (and with no CREATE on
  // the database) the writer cannot make the views.
  const owner = await sourceQuery<{ owner: string }>(env, "SELECT pg_get_userbyid(nspowner) AS owner FROM pg_namespace WHERE nspname = 'interlock_rows'");
  expect(owner).toEqual([{ owner: env.demo.writerRole }]);
  const admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
  try {
    await admin.query('DROP SCHEMA interlock_rows CASCADE');
  } finally {
    await admin.end();
  }
  await setIdentityAttributes(env.db, 'rep-agent', { employee_id: 3 });
  const refused = await eventually(() => query('SELECT customer_id FROM customer ORDER BY customer_id'), (x) => x.code === 'row_rules_unavailable');
  expect(refused.code).toBe('row_rules_unavailable');
  // The operator gives the writer role InterLock's schema (no CREATE on the database needed).
  const su = new pg.Client({ connectionString: env.sourceUrl });
  await su.connect();
  try {
    const can = await su.query<{ c: boolean }>('SELECT has_database_privilege($1, current_database(), $2) AS c', [env.demo.writerRole, 'CREATE']);
    expect(can.rows).toEqual([{ c: false }]);
    await su.query(`CREATE SCHEMA interlock_rows AUTHORIZATION "${env.demo.writerRole}"`);
  } finally {
    await su.end();
  }
  const expected = await sourceQuery<{ customer_id: number }>(env, 'SELECT customer_id FROM customer WHERE support_rep_id = 3 ORDER BY customer_id');
  expect(expected.length).toBeGreaterThan(0);
  const ok = await query('SELECT customer_id FROM customer ORDER BY customer_id');
  expect(ok.rows).toEqual(expected.map((x) => ({ customer_id: x.customer_id })));
  const total = await query('SELECT count(*)::int AS n FROM customer');
  expect(total.rows).toEqual([{ n: expected.length }]);
});

test('a changed attribute changes the rows (no stale cache), a removed one makes the table unreadable', async () => {
  await setIdentityAttributes(env.db, 'rep-agent', { employee_id: 4 });
  const four = await sourceQuery<{ n: number }>(env, 'SELECT count(*)::int AS n FROM customer WHERE support_rep_id = 4');
  const r = await eventually(() => query('SELECT count(*)::int AS n FROM customer'), (x) => x.rows?.[0]?.n === four[0].n);
  expect(r.rows).toEqual([{ n: four[0].n }]);
  await setIdentityAttributes(env.db, 'rep-agent', { employee_id: null });
  const gone = await eventually(() => query('SELECT count(*)::int AS n FROM customer'), (x) => x.code === 'row_rule_attribute_missing');
  expect(gone.code).toBe('row_rule_attribute_missing');
});

// Red team rt48c K3: a view's copy that would now resolve an insider's function is not made and the
// read is refused row_rules_unavailable; a rescan prints the name qualified. The gateway starts that
// rescan itself (at most once a minute per source), so ruled reads come back without an operator.
// Shown failing before: row_rules_unavailable again after the gateway's rescans were idle.
test('a view copy refused for resolving a function created since the scan makes the gateway rescan: the next read answers', async () => {
  const insider = `il_rrg_ins_${Math.random().toString(36).slice(2, 8)}`;
  const su = new pg.Client({ connectionString: env.sourceUrl });
  await su.connect();
  try {
    await su.query(`CREATE VIEW rrg_lens AS SELECT customer_id, array_length(ARRAY[customer_id, 0], 1) AS n FROM customer; GRANT SELECT ON rrg_lens TO "${env.demo.readerRole}"`);
    await scanSource(env.db, 'chinook');
    await upsertRole(env.db, { name: 'support-rep', statements: [{ effect: 'allow', action: 'read', resource: 'public.customer', rows: 'support_rep_id = identity.employee_id' }, { effect: 'allow', action: 'read', resource: 'public.rrg_lens' }] });
    await setIdentityAttributes(env.db, 'rep-agent', { employee_id: 3 });
    const expected = (await sourceQuery<{ customer_id: number }>(env, 'SELECT customer_id FROM customer WHERE support_rep_id = 3 ORDER BY customer_id')).map((x) => ({ customer_id: x.customer_id, n: 2 }));
    expect(expected.length).toBeGreaterThan(0);
    await su.query(`CREATE ROLE ${insider}; GRANT CREATE ON SCHEMA public TO ${insider}; SET ROLE ${insider}; CREATE FUNCTION public.array_length(a integer[], b integer) RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT 42'; RESET ROLE`);
    const refused = await eventually(() => query('SELECT customer_id, n FROM rrg_lens ORDER BY 1'), (x) => x.code === 'row_rules_unavailable');
    expect(refused).toEqual({ code: 'row_rules_unavailable' });
    await env.gateway.rescansIdle();
    expect(await query('SELECT customer_id, n FROM rrg_lens ORDER BY 1')).toEqual({ rows: expected });
  } finally {
    await su.query(`RESET ROLE; DROP FUNCTION IF EXISTS public.array_length(integer[], integer); DROP VIEW IF EXISTS rrg_lens; DROP OWNED BY ${insider}`).catch(() => undefined);
    await su.query(`DROP ROLE IF EXISTS ${insider}`).catch(() => undefined);
    await su.end();
  }
});
