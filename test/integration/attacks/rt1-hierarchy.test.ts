/**
 * Red team rt1 against issue 22 item 1 (relation hierarchy): rules written on a partitioned table or
 * an inheritance parent must govern every descendant, including ones attached after the scan.
 *
 * Setup (on the attack harness's Chinook copy), before the scan:
 * - `r1m` range-partitioned: `r1m_a` (public), `r1s.r1m_x` (another schema); `r1_late` and
 *   `r1_priv` ordinary tables attached as partitions only AFTER the scan (per test);
 * - views `r1_v_parent` over `r1m`; an inheritance chain `r1_d0` … `r1_d69` (70 levels);
 * - demo-agent gets `rt1-role`: read + write `public.*`, deny read `public.r1m.secret`, deny read
 *   `public.r1_priv`, deny write `public.r1m`; policy masks `public.r1m.reading` and `public.r1_d0.name`.
 *
 * Each test asserts the safe outcome; each RT1-n test failed on main at aa0a24e (the findings):
 * RT1-1 write into a partition attached after the scan under a write-denied parent was queued (fixed);
 * RT1-2 the approval re-check ignored the live hierarchy and executed it (fixed);
 * RT1-3 count(*) through a view over a parent counted a denied partition's rows (fixed: the view's lineage);
 * RT1-4 ancestors beyond depth 64 were dropped: a root mask did not reach the leaf (fixed);
 * RT1-5 describe_source named parents the caller may not describe (fixed);
 * RT1-6/7 discovery showed a mapped table (or a mapped view's base) attached under a masked parent
 *   after the scan in clear (fixed).
 */
import { startAttackEnv, query, callTool, type AttackEnv } from './harness';
import { upsertRole as upsertRoleChecked } from '../../../src/control/roles';
import { grantRole } from '../../../src/control/grants';
import { scanSource } from '../../../src/control/scan';
import { addPolicy as addPolicyChecked } from '../../../src/control/policies';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { listApprovals } from '../../../src/control/approvals';
import { approveAndExecute } from '../../../src/approvals/execute';
import type { ControlDb } from '../../../src/control/db';

// Task hnu4a: these roles and policies name tables created on the source after its last scan (the cases under test),
// which the catalogue check refuses unless intended.
const upsertRole = (db: ControlDb, role: unknown) => upsertRoleChecked(db, role, {}, { allowUnknownNames: true });
const addPolicy = (db: ControlDb, policy: unknown, o: { replace?: boolean } = {}) => addPolicyChecked(db, policy, { ...o, allowUnknownNames: true });

const DEPTH = 70;
let a: AttackEnv;

async function rescan(): Promise<void> {
  const reader = a.admin.escapeIdentifier(a.env.demo.readerRole);
  await a.admin.query(`GRANT USAGE ON SCHEMA r1s TO ${reader}; GRANT SELECT ON ALL TABLES IN SCHEMA public, r1s TO ${reader}`);
  // The writer may change the two tables, so an approved write is stopped only by governance.
  await a.admin.query(`GRANT SELECT, INSERT, UPDATE ON r1_late, r1_priv TO ${a.admin.escapeIdentifier(a.env.demo.writerRole)}`);
  await scanSource(a.env.db, 'chinook');
  a.env.gateway.store.invalidate('*');
}

beforeAll(async () => {
  a = await startAttackEnv();
  const chain = Array.from({ length: DEPTH - 1 }, (_, i) => `CREATE TABLE r1_d${i + 1} () INHERITS (r1_d${i});`).join('\n');
  await a.admin.query(`
    CREATE TABLE r1m (id int NOT NULL, region text NOT NULL, reading text, secret text) PARTITION BY RANGE (id);
    CREATE TABLE r1m_a PARTITION OF r1m FOR VALUES FROM (0) TO (100);
    CREATE SCHEMA r1s;
    CREATE TABLE r1s.r1m_x PARTITION OF r1m FOR VALUES FROM (100) TO (200);
    CREATE TABLE r1_late (id int NOT NULL, region text NOT NULL, reading text, secret text);
    CREATE TABLE r1_priv (id int NOT NULL, region text NOT NULL, reading text, secret text);
    INSERT INTO r1m VALUES (1, 'eu', 'READ-1', 'SEC-1'), (150, 'eu', 'READ-150', 'SEC-150');
    INSERT INTO r1_late VALUES (250, 'eu', 'READ-250', 'SEC-250');
    INSERT INTO r1_priv VALUES (350, 'eu', 'READ-350', 'SEC-350'), (351, 'eu', 'READ-351', 'SEC-351');
    CREATE VIEW r1_v_parent AS SELECT id, region FROM r1m;
    CREATE TABLE r1_d0 (id int, name text);
    ${chain}
    INSERT INTO r1_d${DEPTH - 1} VALUES (1, 'DEEP-NAME');`);
  await upsertRole(a.env.db, {
    name: 'rt1-role',
    statements: [
      { effect: 'allow', action: 'read', resource: 'public.*' },
      { effect: 'allow', action: 'read', resource: 'r1s.*' },
      { effect: 'deny', action: 'read', resource: 'public.r1m.secret' },
      { effect: 'deny', action: 'read', resource: 'public.r1_priv' },
      { effect: 'allow', action: 'write', resource: 'public.*' },
      { effect: 'deny', action: 'write', resource: 'public.r1m' },
    ],
  });
  await grantRole(a.env.db, { identityId: a.env.demo.identityId, roleName: 'rt1-role', sourceId: 'chinook' });
  await addPolicy(a.env.db, { name: 'rt1-mask', description: 'rt1', applies_to: { sources: ['chinook'] }, rule: { type: 'mask_columns', columns: ['public.r1m.reading', 'public.r1_d0.name'], method: 'full' } });
  await rescan();
}, 180_000);
afterAll(async () => a?.close());

/** Attaches `r1_late` and `r1_priv` under `r1m` (after the scan) for the duration of `fn`. */
async function attached(fn: () => Promise<void>): Promise<void> {
  await a.admin.query('ALTER TABLE r1m ATTACH PARTITION r1_late FOR VALUES FROM (200) TO (300)');
  await a.admin.query('ALTER TABLE r1m ATTACH PARTITION r1_priv FOR VALUES FROM (300) TO (400)');
  try {
    await fn();
  } finally {
    await a.admin.query('ALTER TABLE r1m DETACH PARTITION r1_late');
    await a.admin.query('ALTER TABLE r1m DETACH PARTITION r1_priv');
  }
}

test('RT1-1 a write into a partition attached after the scan is refused like a write into its write-denied parent', async () => {
  // Control: a partition the scan knows is refused.
  expect((await query(a, "UPDATE r1m_a SET region = 'eu' WHERE id = 1")).code).toBe('source_role_denied');
  await attached(async () => {
    for (const sql of ["UPDATE r1_late SET region = 'eu' WHERE id = 250", "UPDATE r1_late SET region = 'eu' WHERE secret = 'SEC-250' RETURNING reading, secret", "INSERT INTO r1_priv VALUES (399, 'x', 'y', 'z')"]) {
      const r = await query(a, sql);
      expect([sql, r.kind, r.code]).toEqual([sql, 'refused', 'source_role_denied']);
    }
  });
});

test('RT1-2 an approved write on a partition attached after the scan fails the re-check instead of running', async () => {
  // Queued while r1_late was a plain table (allowed), then attached under the write-denied r1m before approval.
  const q = await query(a, "UPDATE r1_late SET region = 'q2' WHERE id = 250");
  expect(q.kind).toBe('queued');
  await attached(async () => {
    const appr = (await listApprovals(a.env.db, { state: 'pending' })).find((x) => x.sql.includes("'q2'"))!;
    const ex = await approveAndExecute(a.env.db, appr.id, { operator: 'ops-reviewer', connectors: a.env.gateway.connectors });
    expect([ex.state, ex.errorCode]).toEqual(['failed', 'source_role_denied']);
  });
  const back = await a.admin.query('SELECT region FROM r1_late WHERE id = 250');
  expect(back.rows[0].region).toBe('eu');
});

// Fixed (issue 27 item 1): a view's base relations come from the server's lineage (pg_depend, recorded
// by the scan), so a count(*) through a view consults them and their live trees even when no column is used.
test('RT1-3 count(*) through a view over a parent does not count the rows of a denied partition', async () => {
  // r1_v_parent's rows include r1_priv's once it is attached: `SELECT id` is refused, the count must be too.
  await attached(async () => {
    expect((await query(a, 'SELECT id FROM r1_v_parent')).code).toBe('source_role_denied');
    const r = await query(a, 'SELECT count(*) AS n FROM r1_v_parent');
    expect([r.kind, r.code, r.rows]).toEqual(['refused', 'source_role_denied', []]);
  });
});

test('RT1-4 a mask on the root of an inheritance chain deeper than 64 levels masks the deepest child', async () => {
  const r = await query(a, `SELECT name FROM r1_d${DEPTH - 1}`);
  expect(r.raw).not.toContain('DEEP-NAME');
  expect(r.kind === 'refused' || r.rows.every((x) => x.name === '***')).toBe(true);
});

test('RT1-5 describe_source does not name a parent the caller may not describe (partition_of / inherits)', async () => {
  const identity = await createIdentity(a.env.db, 'rt1-narrow');
  await upsertRole(a.env.db, {
    name: 'rt1-narrow-role',
    statements: [
      { effect: 'allow', action: 'read', resource: 'public.r1m_a' },
      { effect: 'allow', action: 'describe', resource: 'public.r1m_a' },
      { effect: 'allow', action: 'describe', resource: 'public.r1_d1' },
    ],
  });
  await grantRole(a.env.db, { identityId: identity.id, roleName: 'rt1-narrow-role', sourceId: 'chinook' });
  const key = await createApiKey(a.env.db, identity.id);
  a.env.gateway.store.invalidate('*');
  const r = await callTool(a.env, 'interlock_describe_source', { source_id: 'chinook' }, key.secret);
  const rows = r.body.result.structuredContent.rows as Array<Record<string, unknown>>;
  expect(rows.some((x) => x.table_name === 'r1m_a')).toBe(true);
  const raw = JSON.stringify(r.body);
  expect(raw).not.toContain('public.r1m"');
  expect(raw).not.toContain('public.r1_d0');
});

test('held: reads through partitions (other schema, attached late, views, CTEs, inheritance added late) stay masked and denied', async () => {
  expect((await query(a, 'SELECT reading FROM r1s.r1m_x')).rows).toEqual([{ reading: '***' }]);
  await attached(async () => {
    expect((await query(a, 'SELECT id, reading FROM r1_late')).rows).toEqual([{ id: 250, reading: '***' }]);
    expect((await query(a, 'WITH c AS (SELECT reading FROM r1_late) SELECT * FROM c')).rows).toEqual([{ reading: '***' }]);
    expect((await query(a, "SELECT id FROM r1_late WHERE secret = 'SEC-250'")).code).toBe('source_role_denied');
    expect((await query(a, 'SELECT count(*) FROM r1m')).code).toBe('source_role_denied');
    expect((await query(a, 'SELECT id FROM ONLY r1m')).code).toBe('source_role_denied');
    expect((await query(a, "SELECT query_to_xml('select reading from r1_late', true, false, '')")).code).toBe('function_not_allowed');
    expect((await query(a, 'SELECT tableoid::regclass AS t FROM r1_late')).code).toBe('function_not_allowed');
  });
});

test('RT1-6 discovery: a mapped table attached after the scan under a masked parent does not show or match its masked values', async () => {
  const { getSource, putSource } = await import('../../../src/control/sources');
  const { indexSource } = await import('../../../src/discovery/indexer');
  await a.admin.query(`
    CREATE TABLE r1_docs (id int NOT NULL, title text, body text) PARTITION BY RANGE (id);
    CREATE TABLE r1_docs_a PARTITION OF r1_docs FOR VALUES FROM (0) TO (100);
    CREATE TABLE r1_doc (id int NOT NULL, title text, body text);
    INSERT INTO r1_doc VALUES (500, 'Quarterly zqx', 'DOCSECRET zqxbody 7731');`);
  const s = (await getSource(a.env.db, 'chinook'))!;
  await putSource(a.env.db, { id: s.id, type: s.type, name: s.name, settings: { ...s.settings, document_tables: [{ table: 'public.r1_doc', id_column: 'id', title_column: 'title', body_column: 'body' }] } });
  await upsertRole(a.env.db, { name: 'rt1-disc', statements: [{ effect: 'allow', action: 'discover', resource: '*' }, { effect: 'allow', action: 'read', resource: 'public.*' }] });
  await grantRole(a.env.db, { identityId: a.env.demo.identityId, roleName: 'rt1-disc', sourceId: 'chinook' });
  await addPolicy(a.env.db, { name: 'rt1-doc-mask', description: 'rt1', applies_to: { sources: ['chinook'] }, rule: { type: 'mask_columns', columns: ['public.r1_docs.body', 'public.r1_docs.title'], method: 'full' } });
  await rescan();
  await indexSource(a.env.db, 'chinook');
  a.env.gateway.store.invalidate('*');
  // Then the operator attaches the mapped table under the masked parent (no rescan, no reindex).
  await a.admin.query('ALTER TABLE r1_docs ATTACH PARTITION r1_doc FOR VALUES FROM (500) TO (600)');
  // interlock_query masks it on the next read ...
  expect((await query(a, 'SELECT body FROM r1_doc')).rows).toEqual([{ body: '***' }]);
  // ... discovery must not show or confirm it either.
  const r = await callTool(a.env, 'interlock_discover', { source_id: 'chinook', query: 'zqxbody', limit: 20 }, a.env.apiKey);
  const raw = JSON.stringify(r.body);
  expect(raw).not.toContain('DOCSECRET');
  expect(raw).not.toContain('r1_doc/500');
}, 120_000);

test('RT1-7 discovery: a mapped VIEW over a table attached after the scan under a masked parent does not show its masked values', async () => {
  const { getSource, putSource } = await import('../../../src/control/sources');
  const { indexSource } = await import('../../../src/discovery/indexer');
  await a.admin.query(`
    CREATE TABLE r1_doc2 (id int NOT NULL, title text, body text);
    INSERT INTO r1_doc2 VALUES (700, 'Annual qpw', 'VIEWSECRET qpwbody 8842');
    CREATE VIEW r1_doc2_v AS SELECT id, title, body FROM r1_doc2;`);
  const s = (await getSource(a.env.db, 'chinook'))!;
  await putSource(a.env.db, { id: s.id, type: s.type, name: s.name, settings: { ...s.settings, document_tables: [{ table: 'public.r1_doc2_v', id_column: 'id', title_column: 'title', body_column: 'body' }] } });
  await rescan();
  await indexSource(a.env.db, 'chinook');
  a.env.gateway.store.invalidate('*');
  await a.admin.query('ALTER TABLE r1_docs ATTACH PARTITION r1_doc2 FOR VALUES FROM (700) TO (800)');
  expect((await query(a, 'SELECT body FROM r1_doc2_v')).rows).toEqual([{ body: '***' }]);
  const r = await callTool(a.env, 'interlock_discover', { source_id: 'chinook', query: 'qpwbody', limit: 20 }, a.env.apiKey);
  expect(JSON.stringify(r.body)).not.toContain('VIEWSECRET');
}, 120_000);
