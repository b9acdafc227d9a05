import { startGovernedEnv, callTool, sourceQuery as sourceQueryOn, type GovernedEnv } from '../../helpers/governed';
import { approveAndExecute } from '../../../src/approvals/execute';
import { listApprovals } from '../../../src/control/approvals';
import { searchAudit } from '../../../src/audit/writer';

let env: GovernedEnv;
beforeAll(async () => {
  env = await startGovernedEnv();
}, 60_000);
afterAll(async () => env?.close());

const q = (sql: string, extra: Record<string, unknown> = {}) => callTool(env, 'interlock_query', { source_id: 'chinook', sql, ...extra }, env.apiKey);
const sc = (r: { body: any }) => r.body.result.structuredContent;

const sourceQuery = <T = any>(sql: string, params: unknown[] = []) => sourceQueryOn<T>(env, sql, params);

test('list_sources and describe_access name the granted source only', async () => {
  const list = await callTool(env, 'interlock_list_sources', {}, env.apiKey);
  expect(Object.keys(sc(list))).toEqual(['chinook', 'handbook']);
  const access = await callTool(env, 'interlock_describe_access', {}, env.apiKey);
  const entry = sc(access).chinook;
  expect(entry.roles).toEqual(['demo-analyst']);
  expect(entry.resources.enforced).toBe(true);
  expect(entry.resources.catalogued).toBe(true);
  const tables = entry.resources.tables.map((t: { table: string }) => t.table);
  expect(tables).toContain('public.customer');
  expect(tables).not.toContain('public.employee');
  const customer = entry.resources.tables.find((t: { table: string }) => t.table === 'public.customer');
  expect([...customer.masked_columns].sort()).toEqual(['email', 'fax', 'phone']);
  expect(sc(access).handbook.resources).toEqual({ enforced: false });
  const none = await callTool(env, 'interlock_describe_access', { source_id: 'nope' }, env.apiKey);
  expect(sc(none)).toEqual({});
});

test('describe_source lists the describable columns (the demo role may describe public.*)', async () => {
  const r = await callTool(env, 'interlock_describe_source', { source_id: 'chinook' }, env.apiKey);
  const rows = JSON.parse(r.body.result.content[0].text) as Array<{ table_name: string; column_name: string }>;
  const all = await sourceQuery("SELECT count(*)::int AS n FROM information_schema.columns WHERE table_schema = 'public'");
  expect(rows.length).toBe(all[0].n);
  expect(rows.find((x) => x.table_name === 'album' && x.column_name === 'title')).toEqual({ table_schema: 'public', table_name: 'album', column_name: 'title', data_type: 'character varying(160)', is_nullable: false, column_default: null, is_identity: false, identity_generation: null, is_generated: false, is_serial: false, primary_key: false, unique: false, table_kind: 'table', type_kind: 'base', value_form: 'text' });
});

test('a read returns rows; the second identical read comes from the cache', async () => {
  const a = await q('SELECT album_id, title FROM album WHERE album_id = $1', { params: [1] });
  expect(sc(a)).toEqual({ rows: [{ album_id: 1, title: 'For Those About To Rock We Salute You' }], row_count: 1, truncated: false, cached: false });
  const b = await q('SELECT album_id, title FROM album WHERE album_id = $1', { params: [1] });
  expect(sc(b).cached).toBe(true);
});

test('max_rows truncates through the portal', async () => {
  const r = await q('SELECT track_id FROM track ORDER BY track_id', { max_rows: 5 });
  expect(sc(r).rows).toEqual([1, 2, 3, 4, 5].map((track_id) => ({ track_id })));
  expect(sc(r).truncated).toBe(true);
});

test('masked columns are masked as outputs (also through sub-selects); any other use is refused', async () => {
  const direct = await q('SELECT customer_id, email, phone FROM customer WHERE customer_id = 1');
  const row = sc(direct).rows[0];
  const real = (await sourceQuery('SELECT email, phone FROM customer WHERE customer_id = 1'))[0];
  expect(row.email).not.toBe(real.email);
  expect(row.phone).not.toBe(real.phone);
  expect(sc(direct).masked_columns).toEqual(['email', 'phone']);
  const through = await q('SELECT e AS mail FROM (SELECT email AS e FROM customer WHERE customer_id < 4) s');
  expect(through.body.result.isError).toBeFalsy();
  expect(sc(through).rows).toHaveLength(3);
  for (const r of sc(through).rows) expect(String(r.mail)).not.toContain(real.email.split('@')[0]);
  // Any other use of a masked column could reveal it by inference: refused, not masked.
  for (const sql of ["SELECT upper(email) AS e FROM customer", "SELECT c.phone || '' AS p FROM customer c", 'SELECT max(email) AS m FROM customer']) {
    expect(sc(await q(sql))).toMatchObject({ status: 'forbidden', code: 'policy_denied' });
  }
  const counted = await q('SELECT count(email) AS n FROM customer');
  expect(counted.body.result.isError).toBeFalsy();
  const filtered = await q("SELECT customer_id FROM customer WHERE email LIKE 'a%'");
  expect(sc(filtered)).toMatchObject({ status: 'forbidden', code: 'policy_denied' });
});

test('ungranted relations and unknown ones get the same refusal; system catalogs are refused', async () => {
  const a = await q('SELECT * FROM employee');
  const b = await q('SELECT * FROM no_such_table');
  expect(sc(a)).toMatchObject({ status: 'forbidden', code: 'source_role_denied' });
  expect(sc(b)).toMatchObject({ status: 'forbidden', code: 'source_role_denied' });
  expect(sc(await q('SELECT usename FROM pg_catalog.pg_user'))).toMatchObject({ status: 'forbidden' });
});

test('unknown source is not_found; invalid SQL is an invalid call', async () => {
  const r = await callTool(env, 'interlock_query', { source_id: 'other', sql: 'SELECT 1' }, env.apiKey);
  expect(sc(r)).toMatchObject({ status: 'not_found', code: 'unknown_source' });
  const bad = await q('SELEC 1');
  expect(bad.body.result.isError).toBe(true);
  expect(sc(bad).code).toBe('invalid_sql');
});

test('a write is queued, never executed on the call; approval runs it exactly once', async () => {
  const before = await sourceQuery('SELECT count(*)::int AS n FROM playlist');
  const r = await q("INSERT INTO playlist (playlist_id, name) VALUES (9001, 'Approved mix')");
  expect(r.body.result.isError).toBe(false);
  expect(sc(r)).toMatchObject({ status: 'queued', approval_state: 'pending' });
  const id = sc(r).approval_id as string;
  expect(await sourceQuery('SELECT count(*)::int AS n FROM playlist')).toEqual(before);
  await expect(approveAndExecute(env.db, id, { operator: 'demo-agent' })).rejects.toThrow(/self_approval_forbidden/);
  const results = await Promise.allSettled(Array.from({ length: 50 }, () => approveAndExecute(env.db, id, { operator: 'ops-alice' })));
  const executed = results.filter((x) => x.status === 'fulfilled');
  expect(executed).toHaveLength(1);
  expect((executed[0] as PromiseFulfilledResult<{ state: string; rowCount?: number }>).value).toMatchObject({ state: 'executed', rowCount: 1 });
  expect(await sourceQuery("SELECT name FROM playlist WHERE playlist_id = 9001")).toEqual([{ name: 'Approved mix' }]);
  const [appr] = (await listApprovals(env.db, {})).filter((a) => a.id === id);
  expect(appr.state).toBe('executed');
  const audit = await searchAudit(env.db, { limit: 200 });
  const kinds = audit.events.filter((e) => e.approvalId === id && e.kind === 'approval').map((e) => e.decision).sort();
  expect(kinds).toEqual(['approved', 'executed', 'queued']);
  expect(audit.events.filter((e) => e.approvalId === id && e.kind === 'tool_call').map((e) => e.decision)).toEqual(['queued']);
});

test('an executed write invalidates the source\'s cached reads (NOTIFY on every replica)', async () => {
  const read = () => q('SELECT count(*)::int AS n FROM playlist');
  await read();
  expect(sc(await read()).cached).toBe(true);
  const w = await q("INSERT INTO playlist (playlist_id, name) VALUES (9002, 'Invalidates the cache')");
  const before = sc(await read()).rows[0].n;
  await approveAndExecute(env.db, sc(w).approval_id, { operator: 'ops-bob' });
  let after: any = null;
  for (let i = 0; i < 40; i++) {
    after = sc(await read());
    if (!after.cached) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  expect(after.cached).toBe(false);
  expect(after.rows[0].n).toBe(before + 1);
});

test('the audit has one tool_call event per call, with no key and no masked value', async () => {
  await new Promise((res) => setTimeout(res, 300)); // let earlier calls' audit writes land
  const before = (await searchAudit(env.db, { limit: 1000 })).events.filter((e) => e.kind === 'tool_call').length;
  await q('SELECT email FROM customer WHERE customer_id = 2');
  await new Promise((res) => setTimeout(res, 100));
  const events = (await searchAudit(env.db, { limit: 1000 })).events.filter((e) => e.kind === 'tool_call');
  expect(events.length).toBe(before + 1);
  const text = JSON.stringify(events);
  expect(text).not.toContain(env.apiKey);
  const realEmail = (await sourceQuery('SELECT email FROM customer WHERE customer_id = 2'))[0].email;
  expect(text).not.toContain(realEmail);
});
