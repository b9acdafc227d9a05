/**
 * Task nu47fix items 2–4: what docs/operators.md and docs/row-rules.md say about masks in expressions,
 * the `discover` action on a SQL source's mapped `document_tables`, and re-indexing changed rows is
 * what the gateway does. Each test runs the behaviour and checks the docs say it (the docs said
 * otherwise before: a masked column in an expression "gets `full`"; `discover` only on documents
 * sources' category paths; nothing on re-indexing).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { upsertRole } from '../../../src/control/roles';
import { grantRole } from '../../../src/control/grants';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { getSource, putSource } from '../../../src/control/sources';
import { scanSource } from '../../../src/control/scan';
import { indexSource } from '../../../src/discovery/indexer';

jest.setTimeout(120_000);

let env: GovernedEnv;
const keys: Record<string, string> = {};
const doc = (name: string) => readFileSync(join(__dirname, '..', '..', '..', 'docs', name), 'utf8');
/** The text with line breaks and runs of spaces as one space (the docs are wrapped). */
const flat = (s: string) => s.replace(/\s+/g, ' ');
const sc = (r: { body: any }) => r.body.result.structuredContent;

async function source(sql: string) {
  const su = new pg.Client({ connectionString: env.sourceUrl });
  await su.connect();
  try {
    await su.query(sql);
  } finally {
    await su.end();
  }
}

beforeAll(async () => {
  env = await startGovernedEnv();
  await source(`CREATE TABLE nu_docs (id int PRIMARY KEY, title text, body text);
    INSERT INTO nu_docs VALUES (1, 'one', 'qzvold first'), (2, 'two', 'qzvold second');
    GRANT SELECT ON nu_docs TO "${env.demo.readerRole}";`);
  const s = (await getSource(env.db, 'chinook'))!;
  await putSource(env.db, { id: s.id, type: s.type, name: s.name, settings: { ...s.settings, document_tables: [{ table: 'public.nu_docs', id_column: 'id', title_column: 'title', body_column: 'body' }] } });
  await scanSource(env.db, 'chinook');
  await indexSource(env.db, 'chinook');
  const read = { effect: 'allow' as const, action: 'read' as const, resource: 'public.nu_docs' };
  await upsertRole(env.db, { name: 'nu-read', statements: [read] });
  await upsertRole(env.db, { name: 'nu-disc', statements: [read, { effect: 'allow', action: 'discover', resource: '*' }] });
  for (const [name, role] of [['nu-reader', 'nu-read'], ['nu-searcher', 'nu-disc']]) {
    const id = await createIdentity(env.db, name);
    await grantRole(env.db, { identityId: id.id, roleName: role, sourceId: 'chinook' });
    keys[name] = (await createApiKey(env.db, id.id)).secret;
  }
  env.gateway.store.invalidate('*');
}, 120_000);
afterAll(async () => env?.close());

const discover = (who: string, query: string) => callTool(env, 'interlock_discover', { source_id: 'chinook', query, limit: 50 }, keys[who]);
const hits = async (query: string) => (sc(await discover('nu-searcher', query)).hits as Array<{ asset_id: string }>).map((h) => h.asset_id).sort();

test('item 3: searching mapped document_tables needs discover on the SQL source; read alone is refused source_role_denied, and the docs give the line', async () => {
  const refused = await discover('nu-reader', 'qzvold');
  expect(refused.body.result.isError).toBe(true);
  expect(sc(refused)).toEqual({ status: 'forbidden', code: 'source_role_denied', message: "No role granted on source 'chinook' allows discover.", request_id: expect.stringMatching(/^req_/) });
  expect(await hits('qzvold')).toEqual(['chinook:public.nu_docs/1', 'chinook:public.nu_docs/2']);

  const line = '  - { effect: allow, action: discover, resource: "*" }';
  const ops = doc('operators.md');
  expect(ops).toContain(`\`\`\`yaml\n${line}\n\`\`\``);
  expect(flat(ops)).toContain("without it `interlock_discover` refuses `source_role_denied` (\"No role granted on source 'sales' allows discover.\")");
  expect(flat(ops)).toContain("and on a SQL source for the rows its `document_tables` map");
  const rr = doc('row-rules.md');
  expect(rr).toContain(`\`\`\`yaml\n${line}\n\`\`\``);
  expect(flat(rr)).toContain("Searching mapped rows needs a role on the source allowing `discover`");
});

test('item 4: rows changed after an index run are searched as indexed until interlock index runs again, as the docs say', async () => {
  await source(`UPDATE nu_docs SET body = 'qzvnew first' WHERE id = 1; DELETE FROM nu_docs WHERE id = 2; INSERT INTO nu_docs VALUES (3, 'three', 'qzvnew third');`);
  expect(await hits('qzvnew')).toEqual([]);
  expect(await hits('qzvold')).toEqual(['chinook:public.nu_docs/1', 'chinook:public.nu_docs/2']);
  await indexSource(env.db, 'chinook');
  expect(await hits('qzvnew')).toEqual(['chinook:public.nu_docs/1', 'chinook:public.nu_docs/3']);
  expect(await hits('qzvold')).toEqual([]);

  expect(flat(doc('operators.md'))).toContain(
    'a row inserted, changed or deleted on the source afterwards is searched and shown as it was indexed (a new row is not found, a changed row is found by its old text, a deleted row is still found) until `interlock index sales` runs again',
  );
  expect(doc('operators.md')).toContain('*/15 * * * * cd /opt/interlock && node bin/interlock.js --config /etc/interlock/interlock.yaml index sales');
});

test('item 2: a masked column in an expression is refused policy_denied, not masked; a sub-select of it answers the full mask; the docs say so', async () => {
  const q = async (sql: string) => sc(await callTool(env, 'interlock_query', { source_id: 'chinook', sql }, env.apiKey));
  const refusal = 'Column public.customer.email is masked by policy: it can only be selected as it is, not used in conditions, expressions, joins, grouping, ordering, set operations, aggregates other than count, or writes;';
  for (const expr of ['upper(email)', "email || ''", 'email::varchar', 'CASE WHEN customer_id > 0 THEN email END']) {
    const r = await q(`SELECT ${expr} AS u FROM customer WHERE customer_id = 1`);
    expect(r).toMatchObject({ status: 'forbidden', code: 'policy_denied' });
    expect(r.message.startsWith(refusal)).toBe(true);
  }
  const one = async (sql: string) => (await q(sql)).rows;
  expect(await one('SELECT email AS u FROM customer WHERE customer_id = 1')).toEqual([{ u: 'l***@***.br' }]);
  expect(await one('SELECT x AS u FROM (SELECT email FROM customer WHERE customer_id = 1) s(x)')).toEqual([{ u: 'l***@***.br' }]);
  expect(await one('SELECT t.e AS u FROM customer c, LATERAL (SELECT c.email AS e) t WHERE c.customer_id = 1')).toEqual([{ u: 'l***@***.br' }]);
  expect(await one('SELECT (SELECT email FROM customer c2 WHERE c2.customer_id = c.customer_id) AS u FROM customer c WHERE customer_id = 1')).toEqual([{ u: '***' }]);
  expect(await one('SELECT t.e AS u FROM customer c, LATERAL (SELECT c2.email AS e FROM customer c2 WHERE c2.customer_id = c.customer_id) t WHERE c.customer_id = 1')).toEqual([{ u: '***' }]);

  const ops = flat(doc('operators.md'));
  expect(ops).not.toContain('a value computed from it gets `full`');
  expect(ops).toContain(`Any other use of it is refused \`policy_denied\` ("${refusal} …")`);
  expect(ops).toContain("a function or operator over it (`upper(email)`, `email || ''`, `email::varchar`, `CASE … THEN email END`)");
  expect(ops).toContain('answers `***` where `SELECT email` answers `l***@***.br`');
});
