/**
 * Properties over random catalogs, roles, grants and policies (issue 3, Done when):
 * list_sources, describe_access and describe_source never name an ungranted source, table or column;
 * and describe_access's readable columns agree with what interlock_query actually allows.
 */
import fc from 'fast-check';
import { MemoryGovernanceStore } from '../../../src/governance/store';
import { AccessEvaluator } from '../../../src/governance/evaluator';
import { describeAccessHandler, describeSourceHandler } from '../../../src/tools/handlers/describe';
import { listSourcesHandler, StoreSourceDirectory } from '../../../src/tools/handlers/list-sources';
import { queryHandler } from '../../../src/pipeline/query';
import { memoryRateLimiter } from '../../../src/pipeline/05-rate-limit';
import { ResultCache } from '../../../src/pipeline/cache';
import { initSqlParser } from '../../../src/sql/analyze';
import type { SourceCatalog } from '../../../src/sql/catalog-types';
import type { ToolCallContext, ToolOutcome } from '../../../src/tools/types';

beforeAll(() => initSqlParser());

const SCHEMAS = ['s1', 's2'];
const TABLES = ['a', 'b', 'c'];
const COLUMNS = ['x', 'y', 'z'];
const SOURCES = ['src1', 'src2', 'src3'];

function catalog(): SourceCatalog {
  return {
    relations: SCHEMAS.flatMap((schema) => TABLES.map((name) => ({ schema, name, kind: 'table' as const, columns: COLUMNS.map((c) => ({ name: c, dataType: 'integer', nullable: c !== 'x', default: null, identity: c === 'x' ? 'always' : null, generated: false })), keys: [{ kind: 'primary', columns: ['x'] }, { kind: 'unique', columns: ['y', 'z'] }] }))),
    functions: [],
    searchPath: ['s1'],
    scannedAt: '2026-11-29T00:00:00Z',
    truncated: false,
  } as unknown as SourceCatalog;
}

const part = (xs: string[]) => fc.constantFrom(...xs, '*');
const pattern = fc.oneof(fc.tuple(part(SCHEMAS), part(TABLES)).map((p) => p.join('.')), fc.tuple(part(SCHEMAS), part(TABLES), part(COLUMNS)).map((p) => p.join('.')));
const statement = fc.record({ effect: fc.constantFrom('allow', 'deny'), action: fc.constantFrom('read', 'describe', 'write', '*'), resource: pattern });
const world = fc.record({
  roles: fc.array(fc.record({ name: fc.constantFrom('r1', 'r2', 'r3', 'r4'), statements: fc.array(statement, { minLength: 1, maxLength: 5 }) }), { minLength: 1, maxLength: 4 }),
  grants: fc.array(fc.record({ identity: fc.constantFrom('me', 'other'), role: fc.integer({ min: 0, max: 3 }), source: fc.constantFrom(...SOURCES) }), { maxLength: 6 }),
  disabled: fc.subarray(SOURCES),
  denyPolicies: fc.array(fc.tuple(part(SCHEMAS), part(TABLES)).map((p) => p.join('.')), { maxLength: 2 }),
});

type WorldT = typeof world extends fc.Arbitrary<infer T> ? T : never;

function build(w: WorldT) {
  const store = new MemoryGovernanceStore();
  for (const id of SOURCES) {
    store.sources.set(id, { id, type: 'postgres', name: id, enabled: !w.disabled.includes(id), settings: {} });
    store.catalogs.set(id, catalog());
  }
  for (const g of w.grants) {
    const role = w.roles[g.role % w.roles.length];
    store.grants.push({ identityId: g.identity, sourceId: g.source, role: { name: `${role.name}-${g.role}`, statements: role.statements } as never });
  }
  store.policies = w.denyPolicies.map((relations: string, i: number) => ({ name: `p${i}`, rule: { type: 'deny_relations', relations: [relations] } }) as never);
  return store;
}

function ctx(identity = 'me'): ToolCallContext & { auditDetails: Record<string, unknown> } {
  return { requestId: 'r', apiKey: 'k', identity: { id: identity, name: identity, keyId: 'k1' }, dialect: 'handshake', protocolVersion: '2025-11-25', toolName: 't', canonicalTool: 't', signal: new AbortController().signal, notify: () => undefined, auditDetails: {} };
}
const structured = (o: ToolOutcome) => (o.kind === 'result' ? (o.structuredContent as Record<string, any>) : null);

test('nothing ungranted is ever named by list_sources, describe_access or describe_source', async () => {
  await fc.assert(
    fc.asyncProperty(world, async (w) => {
      const store = build(w);
      const rl = memoryRateLimiter({ perIdentity: { points: 1e6, windowSeconds: 60 }, perSource: { points: 1e6, windowSeconds: 60 } });
      const ev = new AccessEvaluator(await store.grantsForIdentity('me'));
      const deps = { store, rateLimiter: rl, catalog: (s: { id: string }) => store.loadCatalog(s.id) };
      const listed = structured(await listSourcesHandler(new StoreSourceDirectory(store))({}, ctx()))!;
      for (const id of Object.keys(listed)) expect(ev.hasGrant(id) && !w.disabled.includes(id)).toBe(true);
      const access = structured(await describeAccessHandler(deps)({}, ctx()))!;
      for (const [id, entry] of Object.entries(access)) {
        expect(ev.hasGrant(id)).toBe(true);
        for (const t of entry.resources.tables ?? []) {
          const [schema, table] = t.table.split('.');
          for (const column of t.columns) expect(ev.decide(id, 'read', { schema, table, column })).toBe('allow');
        }
      }
      for (const id of SOURCES) {
        const out = await describeSourceHandler(deps)({ source_id: id }, ctx());
        if (!ev.hasGrant(id)) {
          expect(out).toMatchObject({ kind: 'refusal', code: 'unknown_source' });
          continue;
        }
        const rows = (structured(out)?.rows ?? []) as Array<{ table_schema: string; table_name: string; column_name: string }>;
        for (const r of rows) expect(ev.decide(id, 'describe', { schema: r.table_schema, table: r.table_name, column: r.column_name })).toBe('allow');
        // Keys are named only when every one of their columns may be described.
        const keys = (structured(out)?.keys ?? []) as Array<{ table_schema: string; table_name: string; columns: string[] }>;
        for (const k of keys) for (const column of k.columns) expect(ev.decide(id, 'describe', { schema: k.table_schema, table: k.table_name, column })).toBe('allow');
      }
    }),
    { numRuns: 150 },
  );
});

// Task hfix item 3: describe_source names a column only when the caller may read or write it, or a
// role allows describing it explicitly (describe or *, without a describe or * deny); a column whose
// read a deny refuses is not described on the strength of the read allow the deny overrides.
test('describe_source lists only columns a read or write would allow, or an explicit describe allow names', async () => {
  await fc.assert(
    fc.asyncProperty(world, fc.constantFrom(...SOURCES), async (w, id) => {
      const store = build(w);
      const rl = memoryRateLimiter({ perIdentity: { points: 1e6, windowSeconds: 60 }, perSource: { points: 1e6, windowSeconds: 60 } });
      const grants = await store.grantsForIdentity('me');
      const ev = new AccessEvaluator(grants);
      // The caller's describe and * statements alone: what an explicit describe allow or deny decides.
      const explicit = new AccessEvaluator(grants.map((g) => ({ ...g, role: { ...g.role, statements: g.role.statements.filter((s) => s.action === 'describe' || s.action === '*') as typeof g.role.statements } })));
      const deps = { store, rateLimiter: rl, catalog: (s: { id: string }) => store.loadCatalog(s.id) };
      const rows = (structured(await describeSourceHandler(deps)({ source_id: id }, ctx()))?.rows ?? []) as Array<{ table_schema: string; table_name: string; column_name: string }>;
      for (const r of rows) {
        const ref = { schema: r.table_schema, table: r.table_name, column: r.column_name };
        const why = { read: ev.decide(id, 'read', ref), write: ev.decide(id, 'write', ref), describe: explicit.decide(id, 'describe', ref) };
        // Past a read or write deny only a describe allow naming the column itself counts (task hnu41 item 1).
        const named = grants.some((g) => g.sourceId === id && g.role.statements.some((s) => s.effect === 'allow' && (s.action === 'describe' || s.action === '*') && s.resource.split('.').length === 3 && s.resource.split('.')[2] === r.column_name && ['*', r.table_schema].includes(s.resource.split('.')[0]) && ['*', r.table_name].includes(s.resource.split('.')[1])));
        const usable = why.describe !== 'deny' && (why.read === 'allow' || why.write === 'allow' || (why.read === 'deny' || why.write === 'deny' ? named : why.describe === 'allow'));
        expect({ ref, usable }).toEqual({ ref, usable: true });
      }
    }),
    { numRuns: 300 },
  );
});

test('describe_source: a column denied to read is not listed, nor a key holding it; an explicit describe allow lists it', async () => {
  const store = build({ roles: [], grants: [], disabled: [], denyPolicies: [] });
  store.grants.push({ identityId: 'me', sourceId: 'src1', role: { name: 'reader', statements: [{ effect: 'allow', action: 'read', resource: 's1.*' }, { effect: 'deny', action: 'read', resource: 's1.a.z' }] } as never });
  store.grants.push({ identityId: 'you', sourceId: 'src1', role: { name: 'shown', statements: [{ effect: 'allow', action: 'read', resource: 's1.*' }, { effect: 'deny', action: 'read', resource: 's1.a.z' }, { effect: 'allow', action: 'describe', resource: 's1.a.z' }] } as never });
  const rl = memoryRateLimiter({ perIdentity: { points: 1e6, windowSeconds: 60 }, perSource: { points: 1e6, windowSeconds: 60 } });
  const deps = { store, rateLimiter: rl, catalog: (s: { id: string }) => store.loadCatalog(s.id) };
  const of = async (who: string) => {
    const s = structured(await describeSourceHandler(deps)({ source_id: 'src1' }, ctx(who)))!;
    const a = (x: { table_schema: string; table_name: string }) => x.table_schema === 's1' && x.table_name === 'a';
    return { columns: s.rows.filter(a).map((r: { column_name: string }) => r.column_name), keys: s.keys.filter(a).map((k: { columns: string[] }) => k.columns) };
  };
  expect(await of('me')).toEqual({ columns: ['x', 'y'], keys: [['x']] });
  expect(await of('you')).toEqual({ columns: ['x', 'y', 'z'], keys: [['x'], ['y', 'z']] });
});

// Task hnu41 item 1 (a new user's finding): a wildcard `allow describe public.*` listed every column a
// `deny read` refuses, though describe_access hid it; only a describe allow naming the column lists it.
test('describe_source: a wildcard describe allow does not list a column denied to read; describe_access agrees', async () => {
  const store = build({ roles: [], grants: [], disabled: [], denyPolicies: [] });
  const base = [{ effect: 'allow', action: 'read', resource: 's1.*' }, { effect: 'allow', action: 'describe', resource: 's1.*' }, { effect: 'deny', action: 'read', resource: 's1.a.z' }, { effect: 'deny', action: 'read', resource: 's1.b.y' }];
  store.grants.push({ identityId: 'me', sourceId: 'src1', role: { name: 'analyst', statements: base } as never });
  store.grants.push({ identityId: 'you', sourceId: 'src1', role: { name: 'named', statements: [...base, { effect: 'allow', action: 'describe', resource: 's1.a.z' }, { effect: 'allow', action: 'describe', resource: 's1.b.*' }] } as never });
  const rl = memoryRateLimiter({ perIdentity: { points: 1e6, windowSeconds: 60 }, perSource: { points: 1e6, windowSeconds: 60 } });
  const deps = { store, rateLimiter: rl, catalog: (s: { id: string }) => store.loadCatalog(s.id) };
  const of = async (who: string) => {
    const s = structured(await describeSourceHandler(deps)({ source_id: 'src1' }, ctx(who)))!;
    const access = structured(await describeAccessHandler(deps)({ source_id: 'src1' }, ctx(who)))!;
    const tables = (access.src1 as { resources: { tables: Array<{ table: string; columns: string[] }> } }).resources.tables;
    const listed = (t: string) => s.rows.filter((r: { table_schema: string; table_name: string }) => r.table_schema === 's1' && r.table_name === t).map((r: { column_name: string }) => r.column_name);
    return { source: { a: listed('a'), b: listed('b') }, access: { a: tables.find((t) => t.table === 's1.a')!.columns, b: tables.find((t) => t.table === 's1.b')!.columns } };
  };
  expect(await of('me')).toEqual({ source: { a: ['x', 'y'], b: ['x', 'z'] }, access: { a: ['x', 'y'], b: ['x', 'z'] } });
  // `s1.a.z` names the column: listed (still not readable); `s1.b.*` is a relation wildcard: not.
  expect(await of('you')).toEqual({ source: { a: ['x', 'y', 'z'], b: ['x', 'z'] }, access: { a: ['x', 'y'], b: ['x', 'z'] } });
});

test('describe_access readable columns agree with what interlock_query allows', async () => {
  await fc.assert(
    fc.asyncProperty(world, fc.constantFrom(...SOURCES), fc.constantFrom(...SCHEMAS), fc.constantFrom(...TABLES), fc.subarray(COLUMNS, { minLength: 1 }), async (w, sourceId, schema, table, cols) => {
      const store = build(w);
      const rl = memoryRateLimiter({ perIdentity: { points: 1e6, windowSeconds: 60 }, perSource: { points: 1e6, windowSeconds: 60 } });
      const deps = { store, rateLimiter: rl, catalog: (s: { id: string }) => store.loadCatalog(s.id) };
      const access = structured(await describeAccessHandler(deps)({ source_id: sourceId }, ctx()))!;
      const entry = access[sourceId];
      const t = entry?.resources?.tables?.find((x: { table: string }) => x.table === `${schema}.${table}`);
      const described = !!t && !t.policy && cols.every((c) => t.columns.includes(c));
      const reader = { read: async () => ({ fields: cols.map((name) => ({ name })), rowsArray: [cols.map(() => 1)], truncated: false }) };
      const query = queryHandler({ store, connectors: { reader: () => reader }, rateLimiter: rl, cache: new ResultCache(), catalog: deps.catalog, maskSecret: 's' });
      const out = await query({ source_id: sourceId, sql: `SELECT ${cols.join(', ')} FROM ${schema}.${table}` }, ctx());
      const allowed = out.kind === 'result' && !out.isError;
      expect({ allowed, out: allowed ? null : out }).toEqual({ allowed: described, out: described ? null : expect.anything() });
    }),
    { numRuns: 300 },
  );
});
