/**
 * The live hierarchy check riding on the read (src/pipeline/query.ts, hierarchy-check.ts
 * standaloneGuardFor; issue 23 bench 01), with a fake connector: a checked caller's read of a
 * relation the catalogue places in no tree carries the guard and no separate check; a tripped
 * guard runs the full check, re-decides (a mask from a parent attached since the scan) and reads
 * again without the guard; callers without denies or masks get neither. A cached answer (issue 28)
 * is served with no source round trip at all: it was stored only by a read that found the
 * catalogue's tree, a read that found another tree stores nothing, and a rescan or a policy change
 * re-keys it (the catalogue snapshot and the policies are part of the key).
 */
import type { Policy } from '../../../generated/policy-v1';
import { MemoryGovernanceStore } from '../../../src/governance/store';
import { queryHandler } from '../../../src/pipeline/query';
import { memoryRateLimiter } from '../../../src/pipeline/05-rate-limit';
import { ResultCache } from '../../../src/pipeline/cache';
import { AnalysisCache } from '../../../src/pipeline/analysis-cache';
import { initSqlParser } from '../../../src/sql/analyze';
import type { RelationName, SourceCatalog } from '../../../src/sql/catalog-types';
import { relationKey, type LiveRelationTree } from '../../../src/sql/hierarchy';
import type { QueryConnector, ReadRows } from '../../../src/pipeline/07-execute';
import type { ToolCallContext, ToolOutcome } from '../../../src/tools/types';

beforeAll(() => initSqlParser());

const col = (name: string) => ({ name, dataType: 'text' });
const CATALOG = {
  relations: [
    { schema: 'public', name: 'm', kind: 'partitioned_table', columns: [col('id'), col('v')], partition: false, parents: [], ancestors: [] },
    { schema: 'public', name: 'm1', kind: 'table', columns: [col('id'), col('v')], partition: true, parents: [{ schema: 'public', name: 'm' }], ancestors: [{ schema: 'public', name: 'm' }] },
    { schema: 'public', name: 'late', kind: 'table', columns: [col('id'), col('v')], partition: false, parents: [], ancestors: [] },
  ],
  functions: [],
  searchPath: ['public'],
  scannedAt: '2026-12-03T00:00:00Z',
  truncated: false,
} as unknown as SourceCatalog;
const MASK: Policy = { name: 'mask-v', rule: { type: 'mask_columns', columns: ['public.m.v'], method: 'full' } };

type Call = { kind: 'read'; sql: string; guard: boolean } | { kind: 'trees'; relations: string[] };

function setup(opts: { policies?: Policy[]; attachedLate?: boolean; cacheTtlMs?: number } = {}) {
  const store = new MemoryGovernanceStore();
  store.sources.set('db', { id: 'db', type: 'postgres', name: 'db', enabled: true, settings: {} });
  store.catalogs.set('db', CATALOG);
  store.grants.push({ identityId: 'me', sourceId: 'db', role: { name: 'r', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }] } as never });
  for (const p of opts.policies ?? []) store.policies.push(p as never);
  const calls: Call[] = [];
  const live = (r: RelationName): LiveRelationTree =>
    opts.attachedLate && r.name === 'late' ? { ancestors: [{ schema: 'public', name: 'm' }], descendants: [] }
    : r.name === 'm' ? { ancestors: [], descendants: [{ schema: 'public', name: 'm1' }] }
    : { ancestors: [], descendants: [] };
  const connector: QueryConnector = {
    read: async (sql, _params, o): Promise<ReadRows> => {
      calls.push({ kind: 'read', sql, guard: !!o.guard });
      if (o.guard && opts.attachedLate) return { fields: [], rowsArray: [], truncated: false, guardTripped: true };
      return { fields: [{ name: 'id' }, { name: 'v' }], rowsArray: [['1', 'RAW']], truncated: false };
    },
    relationTrees: async (relations) => {
      calls.push({ kind: 'trees', relations: relations.map((r) => r.name) });
      return new Map(relations.map((r) => [relationKey(r.schema, r.name), live(r)]));
    },
    standaloneGuard: (relations) => ({ text: 'GUARD', values: relations.flatMap((r) => [r.schema, r.name]) }),
  };
  const query = queryHandler({
    store,
    connectors: { reader: () => connector },
    rateLimiter: memoryRateLimiter({ perIdentity: { points: 1e6, windowSeconds: 60 }, perSource: { points: 1e6, windowSeconds: 60 } }),
    cache: new ResultCache({ ttlMs: opts.cacheTtlMs ?? 0, maxBytes: opts.cacheTtlMs ? 1e6 : 0 }),
    analysisCache: new AnalysisCache(),
    catalog: (s) => store.loadCatalog(s.id),
    maskSecret: 's',
  });
  const ctx = (): ToolCallContext => ({ requestId: 'r', apiKey: 'k', identity: { id: 'me', name: 'me', keyId: 'k1' }, dialect: 'handshake', protocolVersion: '2025-11-25', toolName: 't', canonicalTool: 't', signal: new AbortController().signal, notify: () => undefined, auditDetails: {} }) as never;
  return { calls, store, call: (sql: string) => query({ source_id: 'db', sql }, ctx()) };
}

const rowsOf = (o: ToolOutcome) => (o.kind === 'result' ? JSON.parse((o.content[0] as { text: string }).text) : o);

test('a checked read of a relation in no tree: one read carrying the guard, no separate check', async () => {
  const t = setup({ policies: [MASK] });
  expect(rowsOf(await t.call('SELECT id, v FROM late'))).toEqual([{ id: '1', v: 'RAW' }]);
  expect(t.calls).toEqual([{ kind: 'read', sql: 'SELECT id, v FROM late', guard: true }]);
});

test('a tripped guard runs the full check, applies the new parent mask and reads again without the guard', async () => {
  const t = setup({ policies: [MASK], attachedLate: true });
  const out = await t.call('SELECT id, v FROM late');
  expect(t.calls.map((c) => c.kind)).toEqual(['read', 'trees', 'read']);
  expect(t.calls[0]).toMatchObject({ guard: true });
  expect(t.calls[1]).toEqual({ kind: 'trees', relations: ['late'] });
  const again = t.calls[2] as Extract<Call, { kind: 'read' }>;
  expect(again.guard).toBe(false);
  expect(again.sql).not.toBe('SELECT id, v FROM late'); // masked in SQL now
  expect(out).toMatchObject({ kind: 'result', structuredContent: { masked_columns: ['v'] } });
});

test('a cached answer is served with no source round trip for a standalone relation; for one in a tree after the tree check only (RTC-3)', async () => {
  const t = setup({ policies: [MASK], cacheTtlMs: 60_000 });
  const first = await t.call('SELECT id, v FROM late');
  expect(first).toMatchObject({ kind: 'result', structuredContent: { cached: false } });
  expect(await t.call('SELECT id, v FROM late')).toEqual({ ...first, structuredContent: { ...(first as { structuredContent: object }).structuredContent, cached: true } });
  expect(t.calls).toEqual([{ kind: 'read', sql: 'SELECT id, v FROM late', guard: true }]);
  t.calls.length = 0;
  expect(await t.call('SELECT id, v FROM m')).toMatchObject({ kind: 'result', structuredContent: { cached: false, masked_columns: ['v'] } });
  expect(t.calls.map((c) => c.kind)).toEqual(['trees', 'read']);
  expect(await t.call('SELECT id, v FROM m')).toMatchObject({ kind: 'result', structuredContent: { cached: true, masked_columns: ['v'] } });
  expect(t.calls.map((c) => c.kind)).toEqual(['trees', 'read', 'trees']);
});

test('a read that found a tree other than the catalogue\'s stores no answer', async () => {
  const t = setup({ policies: [MASK], attachedLate: true, cacheTtlMs: 60_000 });
  await t.call('SELECT id, v FROM late');
  const again = await t.call('SELECT id, v FROM late');
  expect(t.calls.map((c) => c.kind)).toEqual(['read', 'trees', 'read', 'read', 'trees', 'read']);
  expect(again).toMatchObject({ kind: 'result', structuredContent: { cached: false, masked_columns: ['v'] } });
});

test('a rescan (a new catalogue snapshot) or a policy change is not served from the old entry', async () => {
  const t = setup({ policies: [MASK], cacheTtlMs: 60_000 });
  await t.call('SELECT id, v FROM late');
  expect(t.calls).toHaveLength(1);
  // The same relations, scanned again: only the snapshot's time differs.
  t.store.catalogs.set('db', { ...CATALOG, scannedAt: '2026-12-04T00:00:00Z' });
  expect(await t.call('SELECT id, v FROM late')).toMatchObject({ kind: 'result', structuredContent: { cached: false } });
  expect(t.calls).toHaveLength(2);
  expect(await t.call('SELECT id, v FROM late')).toMatchObject({ kind: 'result', structuredContent: { cached: true } });
  expect(t.calls).toHaveLength(2);
  // A policy that changes nothing this caller may see still re-keys every entry.
  t.store.policies.push({ name: 'other', rule: { type: 'deny_relations', relations: ['public.elsewhere'] } } as never);
  expect(await t.call('SELECT id, v FROM late')).toMatchObject({ kind: 'result', structuredContent: { cached: false } });
  expect(t.calls).toEqual([1, 2, 3].map(() => ({ kind: 'read', sql: 'SELECT id, v FROM late', guard: true })));
  // A mask on the read column: a new key, and a masked answer read from the source.
  t.store.policies.push({ name: 'mask-late', rule: { type: 'mask_columns', columns: ['public.late.v'], method: 'full' } } as never);
  expect(await t.call('SELECT id, v FROM late')).toMatchObject({ kind: 'result', structuredContent: { cached: false, masked_columns: ['v'] } });
  expect(t.calls).toHaveLength(4);
});

test('a change of the caller\'s role statements is not served from the old entry', async () => {
  const t = setup({ policies: [MASK], cacheTtlMs: 60_000 });
  await t.call('SELECT id, v FROM late');
  expect(await t.call('SELECT id, v FROM late')).toMatchObject({ structuredContent: { cached: true } });
  // The same grant with one more statement (a deny elsewhere): another access fingerprint, another key.
  t.store.grants[0] = { ...t.store.grants[0], role: { name: 'r', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'deny', action: 'read', resource: 'public.m.v' }] } as never };
  expect(await t.call('SELECT id, v FROM late')).toMatchObject({ kind: 'result', structuredContent: { cached: false } });
  expect(t.calls.filter((c) => c.kind === 'read')).toHaveLength(2);
});

test('a relation the catalogue places in a tree is checked first; an unchecked caller gets neither', async () => {
  const t = setup({ policies: [MASK] });
  await t.call('SELECT id FROM m');
  expect(t.calls).toEqual([{ kind: 'trees', relations: ['m'] }, { kind: 'read', sql: 'SELECT id FROM m', guard: false }]);
  const open = setup();
  await open.call('SELECT id, v FROM late');
  expect(open.calls).toEqual([{ kind: 'read', sql: 'SELECT id, v FROM late', guard: false }]);
});
