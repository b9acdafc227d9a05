/**
 * Discovery honours interlock_query's decisions on mapped tables (issue 12, item 2), on real
 * PostgreSQL: a source database with two mapped tables is indexed as its reader; the index records
 * each relation and the columns feeding each field; then interlock_discover,
 * interlock_related_documents and get_document (the connector-request hook) answer per caller:
 * a table denied for read (role deny, no read grant, deny_relations policy) is invisible; a denied
 * column's field is neither searchable nor shown; a masked column's field is not searchable and is
 * shown masked (interlock_query's masking, hash keyed by the mask secret); decisions made from a
 * lineage a re-index has changed since show no mapped row.
 */
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import type { Policy } from '../../../generated/policy-v1';
import type { RoleStatement, SourceRole } from '../../../generated/role-v1';
import { validateDiscoverHit, validateDocumentContent, validateRelatedDocument } from '../../../generated/validators';
import { openControlDb, type ControlDb } from '../../../src/control/db';
import { putSource } from '../../../src/control/sources';
import { MemoryGovernanceStore } from '../../../src/governance/store';
import { AccessEvaluator } from '../../../src/governance/evaluator';
import { memoryRateLimiter } from '../../../src/pipeline/05-rate-limit';
import { applyMask } from '../../../src/sql/redaction';
import { discoverHandler } from '../../../src/tools/handlers/discover';
import { relatedDocumentsHandler } from '../../../src/tools/handlers/related';
import { documentsConnectorRequest } from '../../../src/tools/handlers/documents-request';
import { indexSource } from '../../../src/discovery/indexer';
import { resolveScope } from '../../../src/discovery/access';
import { getDocument, searchAssets } from '../../../src/discovery/search';
import type { Identity, ToolCallContext, ToolOutcome } from '../../../src/tools/types';
import { ADMIN_URL, createTempDatabase, urlFor, type TempDatabase } from '../../helpers/pg';

const AGENT: Identity = { id: 'idn_00000000000000000aaa', name: 'agent', keyId: 'key_00000000000000000aaa' };
const SECRET = 'mask-secret-for-tests';
const NOTES1 = 'salary review pending for ledger team';

let control: TempDatabase;
let source: TempDatabase;
let db: ControlDb;
const reader = `il_lin_rd_${randomBytes(4).toString('hex')}`;

beforeAll(async () => {
  control = await createTempDatabase('disc_lineage');
  source = await createTempDatabase('disc_lineage_src');
  db = await openControlDb(control.url);
  const c = new pg.Client({ connectionString: source.url });
  await c.connect();
  try {
    await c.query(`CREATE ROLE ${reader} LOGIN PASSWORD 'reader-pw'`);
    await c.query(`
      CREATE TABLE staff (id int PRIMARY KEY, name text, notes text, kind text, tags text[], hired timestamp, ents jsonb, refs text[]);
      INSERT INTO staff VALUES
        (1, 'Zebulon Quark', '${NOTES1}', 'employee', ARRAY['hr','people'], '2025-01-02 00:00', '[{"type":"team","value":"ledger"}]', ARRAY['2']),
        (2, 'Mirabel Oswin', 'onboarding ledger access', 'contractor', ARRAY['hr'], '2025-02-03 00:00', '[{"type":"team","value":"ledger"}]', NULL);
      CREATE TABLE wiki (id int PRIMARY KEY, title text, body text);
      INSERT INTO wiki VALUES (1, 'Ledger runbook', 'how to restart the ledger team service');
    `);
    await c.query(`GRANT USAGE ON SCHEMA public TO ${reader}; GRANT SELECT ON staff, wiki TO ${reader}`);
  } finally {
    await c.end();
  }
  const u = new URL(urlFor(source.name));
  await putSource(db, {
    id: 'hr',
    type: 'postgres',
    name: 'HR',
    settings: {
      host: u.hostname,
      port: Number(u.port || 5432),
      database: source.name,
      reader: { user: reader, password: 'reader-pw' },
      tls: { mode: 'off' },
      document_tables: [
        { table: 'public.staff', id_column: 'id', title_column: 'name', body_column: 'notes', type_column: 'kind', category_column: 'tags', time_column: 'hired', entities_column: 'ents', links_column: 'refs' },
        { table: 'public.wiki', id_column: 'id', title_column: 'title', body_column: 'body' },
      ],
    },
  });
  await indexSource(db, 'hr');
}, 60_000);
afterAll(async () => {
  await db?.close();
  await control?.drop();
  await source?.drop();
  const a = new pg.Client({ connectionString: ADMIN_URL });
  await a.connect();
  await a.query(`DROP ROLE IF EXISTS ${reader}`).catch(() => undefined);
  await a.end();
});

function ctx(): ToolCallContext & { auditDetails: Record<string, unknown> } {
  return { requestId: 'req_test', apiKey: 'k', identity: AGENT, dialect: 'handshake', protocolVersion: '2025-11-25', toolName: 't', canonicalTool: 't', signal: new AbortController().signal, notify: () => undefined, auditDetails: {} };
}

function sc(o: ToolOutcome): Record<string, unknown> {
  if (o.kind !== 'result') throw new Error(`expected a result, got ${JSON.stringify(o)}`);
  expect(JSON.parse((o.content[0] as { text: string }).text)).toEqual(o.structuredContent);
  return o.structuredContent!;
}

/** The three entry points for one caller: roles' extra statements (beside discover/request on everything) and policies. */
function caller(statements: RoleStatement[], policies: Policy[] = []) {
  const store = new MemoryGovernanceStore();
  const rec = { id: 'hr', type: 'postgres' as const, name: 'HR', enabled: true, settings: {} };
  store.sources.set('hr', rec);
  const role: SourceRole = { name: 'r', statements: [{ effect: 'allow', action: 'discover', resource: '*' }, { effect: 'allow', action: 'request', resource: '*' }, ...statements] };
  store.grants.push({ identityId: AGENT.id, sourceId: 'hr', role });
  store.policies = policies;
  const rateLimiter = memoryRateLimiter({ perIdentity: { points: 1000, windowSeconds: 60 }, perSource: { points: 1000, windowSeconds: 60 } });
  const deps = { store, rateLimiter, db, maskSecret: SECRET };
  const discover = discoverHandler(deps);
  const related = relatedDocumentsHandler(deps);
  const hook = documentsConnectorRequest(deps);
  return {
    discover: async (query: string, extra: Record<string, unknown> = {}) => {
      const r = sc(await discover({ source_id: 'hr', query, limit: 50, ...extra }, ctx()));
      for (const h of r.hits as unknown[]) expect(validateDiscoverHit(h)).toBe(true);
      return r.hits as Array<Record<string, unknown>>;
    },
    related: async (asset_id: string) => {
      const o = await related({ asset_id, limit: 50 }, ctx());
      if (o.kind === 'refusal') return o.code;
      const r = sc(o);
      for (const h of r.related as unknown[]) expect(validateRelatedDocument(h)).toBe(true);
      return r.related as Array<Record<string, unknown>>;
    },
    get: async (asset_id: string) => {
      const o = await hook(rec, { operation: 'get_document', asset_id }, ctx(), new AccessEvaluator(await store.grantsForIdentity(AGENT.id)));
      if (o.kind === 'refusal') return o.code;
      const d = sc(o);
      expect(validateDocumentContent(d)).toBe(true);
      return d;
    },
  };
}

const READ_ALL: RoleStatement[] = [{ effect: 'allow', action: 'read', resource: 'public.*' }];
const mask = (columns: string[], method: 'full' | 'partial' | 'hash' | 'null'): Policy => ({ name: `mask-${method}`, rule: { type: 'mask_columns', columns: columns as [string, ...string[]], method } });
const ids = (hits: ReadonlyArray<object>) => hits.map((h) => (h as { asset_id: string }).asset_id).sort();

test('the index records each mapped relation and the columns feeding each field', async () => {
  const rows = (await db.pool.query("SELECT asset_id, relation, tsv_title IS NOT NULL AS t, tsv_body IS NOT NULL AS b FROM assets WHERE source_id = 'hr' ORDER BY asset_id")).rows;
  expect(rows).toEqual([
    { asset_id: 'hr:public.staff/1', relation: 'public.staff', t: true, b: true },
    { asset_id: 'hr:public.staff/2', relation: 'public.staff', t: true, b: true },
    { asset_id: 'hr:public.wiki/1', relation: 'public.wiki', t: true, b: true },
  ]);
  const lin = (await db.pool.query("SELECT relation, fields FROM asset_relations WHERE source_id = 'hr' ORDER BY relation")).rows;
  expect(lin).toEqual([
    { relation: 'public.staff', fields: { id: ['id'], title: ['name', 'id'], body: ['notes'], document_type: ['kind'], category_path: ['tags'], timestamp: ['hired'], audience: [], entities: ['ents'], links: ['refs'] } },
    { relation: 'public.wiki', fields: { id: ['id'], title: ['title', 'id'], body: ['body'], document_type: [], category_path: [], timestamp: [], audience: [], entities: [], links: [] } },
  ]);
});

test('with every column readable, mapped rows are searched and shown in full', async () => {
  const c = caller(READ_ALL);
  const hits = await c.discover('Zebulon');
  expect(hits).toEqual([expect.objectContaining({ asset_id: 'hr:public.staff/1', title: 'Zebulon Quark', document_type: 'employee', category_path: ['hr', 'people'], timestamp: '2025-01-02T00:00:00.000Z' })]);
  expect(ids(await c.discover('ledger'))).toEqual(['hr:public.staff/1', 'hr:public.staff/2', 'hr:public.wiki/1']);
  const rel = await c.related('hr:public.staff/1');
  expect(rel).toContainEqual(expect.objectContaining({ asset_id: 'hr:public.staff/2', relation: 'link' }));
  expect(await c.get('hr:public.staff/1')).toMatchObject({ title: 'Zebulon Quark', body: NOTES1, document_type: 'employee', links: ['hr:public.staff/2'], entities: [{ type: 'team', value: 'ledger' }] });
});

test('a table denied for read (role deny, no read grant, deny_relations) has no documents for the caller', async () => {
  for (const c of [
    caller([...READ_ALL, { effect: 'deny', action: 'read', resource: 'public.staff' }]),
    caller([{ effect: 'allow', action: 'read', resource: 'public.wiki' }]),
    caller(READ_ALL, [{ name: 'no-staff', rule: { type: 'deny_relations', relations: ['public.staff'] } }]),
    caller([...READ_ALL, { effect: 'deny', action: 'read', resource: 'public.staff.id' }]),
    caller(READ_ALL, [mask(['public.staff.id'], 'partial')]),
  ]) {
    expect(ids(await c.discover('ledger'))).toEqual(['hr:public.wiki/1']);
    expect(await c.discover('Zebulon')).toEqual([]);
    expect(await c.related('hr:public.staff/1')).toBe('unknown_asset');
    expect(await c.get('hr:public.staff/1')).toBe('unknown_asset');
    const rel = await c.related('hr:public.wiki/1');
    expect(Array.isArray(rel) && rel.every((r) => String(r.asset_id).startsWith('hr:public.wiki'))).toBe(true);
  }
  // Discover on the source without any read grant: no mapped row at all.
  expect(await caller([]).discover('ledger')).toEqual([]);
});

test('a denied column: its field is neither searchable nor shown', async () => {
  const c = caller([...READ_ALL, { effect: 'deny', action: 'read', resource: 'public.staff.name' }, { effect: 'deny', action: 'read', resource: 'public.staff.kind' }, { effect: 'deny', action: 'read', resource: 'public.staff.refs' }]);
  expect(await c.discover('Zebulon')).toEqual([]);
  expect(await c.discover('Quark OR Mirabel')).toEqual([]);
  const hits = await c.discover('salary');
  expect(hits).toEqual([{ asset_id: 'hr:public.staff/1', title: '', snippet: expect.stringContaining('<b>salary</b>'), score: expect.any(Number), document_type: '', category_path: ['hr', 'people'], timestamp: '2025-01-02T00:00:00.000Z', source_id: 'hr', expansion: false }]);
  // Filtering on the denied type confirms nothing.
  expect(await c.discover('ledger', { document_types: ['employee'] })).toEqual([]);
  expect(await c.discover('ledger', { document_types: ['contractor', 'employee'] })).toEqual([]);
  const doc = await c.get('hr:public.staff/1');
  expect(doc).toMatchObject({ title: '', body: NOTES1, document_type: '', links: [] });
  // The link (refs) no longer relates the two rows; the shared entity still does.
  expect(await c.related('hr:public.staff/1')).toContainEqual(expect.objectContaining({ asset_id: 'hr:public.staff/2', relation: 'entity', title: '' }));
  expect(JSON.stringify(await c.related('hr:public.staff/1'))).not.toContain('Mirabel');
});

test('a masked column: its field is not searchable and is shown masked (full, partial, hash), on every entry point', async () => {
  const full = caller(READ_ALL, [mask(['public.staff.name'], 'full')]);
  expect(await full.discover('Zebulon')).toEqual([]);
  expect((await full.discover('salary')).map((h) => h.title)).toEqual(['***']);
  const partial = caller(READ_ALL, [mask(['*.*.name'], 'partial')]);
  expect(await partial.discover('Quark')).toEqual([]);
  expect((await partial.discover('salary')).map((h) => h.title)).toEqual([applyMask('Zebulon Quark', 'partial')]);
  expect(applyMask('Zebulon Quark', 'partial')).toBe('***ark');
  // A masked body: not searchable; the snippet and get_document show it masked with the mask secret.
  const hashed = caller(READ_ALL, [mask(['public.staff.notes'], 'hash')]);
  expect(await hashed.discover('salary')).toEqual([]);
  const token = applyMask(NOTES1, 'hash', SECRET);
  expect(token).toMatch(/^sha256:[0-9a-f]{16}$/);
  expect(await hashed.discover('Zebulon')).toEqual([expect.objectContaining({ asset_id: 'hr:public.staff/1', title: 'Zebulon Quark', snippet: token })]);
  expect(await hashed.get('hr:public.staff/1')).toMatchObject({ title: 'Zebulon Quark', body: token });
  // The masked body no longer makes wiki/1 "similar" through its words; the seed's title still works.
  const rel = await hashed.related('hr:public.staff/1');
  expect(JSON.stringify(rel)).not.toContain('salary');
  // A null mask hides the field.
  const nulled = caller(READ_ALL, [mask(['public.staff.notes'], 'null')]);
  expect(await nulled.discover('Zebulon')).toEqual([expect.objectContaining({ snippet: '' })]);
  expect(await nulled.get('hr:public.staff/1')).toMatchObject({ body: '' });
});

test('masked metadata: not filterable, shown masked or left out', async () => {
  const c = caller(READ_ALL, [mask(['public.staff.kind', 'public.staff.tags', 'public.staff.hired', 'public.staff.ents'], 'full')]);
  const hits = await c.discover('Zebulon');
  expect(hits).toEqual([expect.objectContaining({ asset_id: 'hr:public.staff/1', document_type: '***', category_path: ['***'], timestamp: null })]);
  expect(await c.discover('Zebulon', { document_types: ['employee'] })).toEqual([]);
  expect(await c.discover('Zebulon', { category_path: ['hr'] })).toEqual([]);
  expect(await c.discover('Zebulon', { time_range: { from: '2025-01-01T00:00:00Z' } })).toEqual([]);
  expect(await c.discover('Zebulon', { entities: [{ type: 'team', value: 'ledger' }] })).toEqual([]);
  expect(await c.get('hr:public.staff/1')).toMatchObject({ entities: [], document_type: '***', category_path: ['***'], timestamp: null });
  // The wiki table is untouched by the staff masks.
  expect(await c.discover('restart')).toEqual([expect.objectContaining({ asset_id: 'hr:public.wiki/1', title: 'Ledger runbook' })]);
});

test('decisions made from a lineage that a re-index has since changed show no mapped row (fail closed)', async () => {
  const ev = new AccessEvaluator([{ sourceId: 'hr', role: { name: 'r', statements: [{ effect: 'allow', action: 'discover', resource: '*' }, ...READ_ALL] as SourceRole['statements'] } }]);
  const subject = { identityId: AGENT.id, identityName: AGENT.name };
  const at = new Date();
  const scope = await resolveScope(db.pool, ev, [], subject, 'hr', 'discover', at);
  expect(scope.relations?.map((r) => r.relation)).toEqual(['public.staff', 'public.wiki']);
  expect(ids((await searchAssets(db.pool, scope, { query: 'ledger', limit: 10 })).hits)).toEqual(['hr:public.staff/1', 'hr:public.staff/2', 'hr:public.wiki/1']);
  // A concurrent re-index now feeds the staff title from another column.
  await db.pool.query(`UPDATE asset_relations SET fields = jsonb_set(fields, '{title}', '["notes", "id"]') WHERE source_id = 'hr' AND relation = 'public.staff'`);
  try {
    expect((await searchAssets(db.pool, scope, { query: 'ledger', limit: 10 })).hits).toEqual([]);
    expect(await getDocument(db.pool, scope, scope, 'hr:public.wiki/1')).toBeNull();
    const fresh = await resolveScope(db.pool, ev, [], subject, 'hr', 'discover', at);
    expect(ids((await searchAssets(db.pool, fresh, { query: 'ledger', limit: 10 })).hits)).toHaveLength(3);
  } finally {
    await db.pool.query(`UPDATE asset_relations SET fields = jsonb_set(fields, '{title}', '["name", "id"]') WHERE source_id = 'hr' AND relation = 'public.staff'`);
  }
});
