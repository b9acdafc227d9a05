/**
 * The analysis cache (issue 13): a repeated statement skips parsing, authorization and policy
 * planning; a change of grants, role statements, policies or catalog is never answered from an
 * entry made before it — even when no notification clears the cache (keys carry them by content).
 */
import { MemoryGovernanceStore } from '../../../src/governance/store';
import { queryHandler } from '../../../src/pipeline/query';
import { memoryRateLimiter } from '../../../src/pipeline/05-rate-limit';
import { ResultCache } from '../../../src/pipeline/cache';
import { AnalysisCache, contentFingerprint } from '../../../src/pipeline/analysis-cache';
import { initSqlParser } from '../../../src/sql/analyze';
import type { SourceCatalog } from '../../../src/sql/catalog-types';
import type { ToolCallContext, ToolOutcome } from '../../../src/tools/types';

beforeAll(() => initSqlParser());

function catalog(tables = ['track', 'album']): SourceCatalog {
  return {
    relations: tables.map((name) => ({ schema: 'public', name, kind: 'table' as const, columns: ['id', 'name', 'price'].map((c) => ({ name: c, dataType: 'integer' })) })),
    functions: [],
    searchPath: ['public'],
    scannedAt: '2026-12-01T00:00:00Z',
    truncated: false,
  } as unknown as SourceCatalog;
}

const allowAll = { name: 'reader', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }] };

function setup() {
  const store = new MemoryGovernanceStore();
  store.sources.set('db', { id: 'db', type: 'postgres', name: 'db', enabled: true, settings: {} });
  store.catalogs.set('db', catalog());
  store.grants.push({ identityId: 'me', sourceId: 'db', role: allowAll as never });
  const analysisCache = new AnalysisCache();
  let reads = 0;
  const reader = { read: async () => (reads++, { fields: [{ name: 'id' }], rowsArray: [[1]], truncated: false }) };
  const rl = memoryRateLimiter({ perIdentity: { points: 1e6, windowSeconds: 60 }, perSource: { points: 1e6, windowSeconds: 60 } });
  let clock = new Date('2026-12-01T10:00:00Z');
  const query = queryHandler({ store, connectors: { reader: () => reader }, rateLimiter: rl, cache: new ResultCache({ ttlMs: 0, maxBytes: 0 }), analysisCache, catalog: (s) => store.loadCatalog(s.id), maskSecret: 's', now: () => clock });
  const call = (sql: string, identity = 'me') => query({ source_id: 'db', sql }, ctx(identity));
  return { store, analysisCache, call, reads: () => reads, setClock: (d: Date) => (clock = d) };
}

function ctx(identity: string): ToolCallContext & { auditDetails: Record<string, unknown> } {
  return { requestId: 'r', apiKey: 'k', identity: { id: identity, name: identity, keyId: 'k1' }, dialect: 'handshake', protocolVersion: '2025-11-25', toolName: 't', canonicalTool: 't', signal: new AbortController().signal, notify: () => undefined, auditDetails: {} };
}
const ok = (o: ToolOutcome) => o.kind === 'result' && !o.isError;
const SQL = 'SELECT id FROM track WHERE id = 1';

test('a repeated statement is analysed once; audit details are the same on the cached path', async () => {
  const t = setup();
  expect(ok(await t.call(SQL))).toBe(true);
  expect(t.analysisCache).toMatchObject({ hits: 0, misses: 1 });
  for (let i = 0; i < 5; i++) expect(ok(await t.call(SQL))).toBe(true);
  expect(t.analysisCache).toMatchObject({ hits: 5, misses: 1, size: 1 });
  // Whitespace is part of the statement text: a different text is a different entry.
  expect(ok(await t.call(SQL + ' '))).toBe(true);
  expect(t.analysisCache).toMatchObject({ misses: 2, size: 2 });
});

test('refusals are cached too, and stay refusals', async () => {
  const t = setup();
  for (let i = 0; i < 3; i++) expect(await t.call('SELECT secret FROM nowhere')).toMatchObject({ kind: 'refusal', code: 'source_role_denied' });
  for (let i = 0; i < 3; i++) expect(await t.call('SELEC 1')).toMatchObject({ kind: 'tool_error', code: 'invalid_sql' });
  expect(t.analysisCache).toMatchObject({ hits: 4, misses: 2 });
});

test('SECURITY: a revoked grant is never answered by an allow cached before the revoke (no clear() needed)', async () => {
  const t = setup();
  expect(ok(await t.call(SQL))).toBe(true);
  expect(ok(await t.call(SQL))).toBe(true);
  t.store.grants = [];
  const r = await t.call(SQL);
  expect(ok(r)).toBe(false);
  expect(r).toMatchObject({ kind: 'refusal' });
  expect(t.reads()).toBe(2);
});

test('SECURITY: a role changed to deny a column is enforced at once, for the same statement text', async () => {
  const t = setup();
  expect(ok(await t.call(SQL))).toBe(true);
  t.store.grants = [{ identityId: 'me', sourceId: 'db', role: { name: 'reader', statements: [...allowAll.statements, { effect: 'deny', action: 'read', resource: 'public.track.id' }] } as never }];
  expect(await t.call(SQL)).toMatchObject({ kind: 'refusal', code: 'source_role_denied' });
  // And back: the allow is computed again, not taken from the denied entry.
  t.store.grants = [{ identityId: 'me', sourceId: 'db', role: allowAll as never }];
  expect(ok(await t.call(SQL))).toBe(true);
});

test('SECURITY: entries are per grants, never shared with an identity holding other grants', async () => {
  const t = setup();
  expect(ok(await t.call(SQL, 'me'))).toBe(true);
  expect(await t.call(SQL, 'other')).toMatchObject({ kind: 'refusal' });
});

test('a new policy applies to a statement analysed before it', async () => {
  const t = setup();
  expect(ok(await t.call(SQL))).toBe(true);
  t.store.policies = [{ name: 'no-track', rule: { type: 'deny_relations', relations: ['public.track'] } } as never];
  expect(await t.call(SQL)).toMatchObject({ kind: 'refusal', code: 'policy_denied' });
  // A mask on a column the statement filters by refuses it (it could reveal the value by inference).
  t.store.policies = [{ name: 'mask', rule: { type: 'mask_columns', columns: ['public.track.id'], method: 'full' } } as never];
  expect(await t.call(SQL)).toMatchObject({ kind: 'refusal', code: 'policy_denied' });
  t.store.policies = [];
  expect(await t.call(SQL)).toMatchObject({ kind: 'result', structuredContent: { rows: [{ id: 1 }] } });
});

test('a time-window policy is decided on every call (the clock is not cached)', async () => {
  const t = setup();
  t.store.policies = [{ name: 'office', rule: { type: 'time_window', days: ['tue'], start: '09:00', end: '17:00' } } as never];
  expect(ok(await t.call(SQL))).toBe(true); // Tuesday 10:00 UTC
  t.setClock(new Date('2026-12-01T20:00:00Z'));
  expect(await t.call(SQL)).toMatchObject({ kind: 'refusal', code: 'policy_denied' });
  expect(t.analysisCache.hits).toBe(1);
});

test('a catalog change (relation gone after a rescan) is never answered from the old entry', async () => {
  const t = setup();
  expect(ok(await t.call(SQL))).toBe(true);
  t.store.catalogs.set('db', catalog(['album']));
  expect(await t.call(SQL)).toMatchObject({ kind: 'refusal', code: 'source_role_denied' });
});

test('clear() drops every entry; the LRU is bounded; over-long statements are not stored', async () => {
  const c = new AnalysisCache({ max: 3, maxSqlLength: 40 });
  const cat = catalog();
  let computed = 0;
  const compute = () => (computed++, { analysis: { ok: false } as never, relations: [], denied: null });
  for (const sql of ['a', 'b', 'c', 'd']) c.analyse({ sourceId: 's', sql, catalog: cat, grants: [] }, compute);
  expect(c.size).toBe(3);
  c.analyse({ sourceId: 's', sql: 'd', catalog: cat, grants: [] }, compute);
  expect(computed).toBe(4);
  c.analyse({ sourceId: 's', sql: 'x'.repeat(41), catalog: cat, grants: [] }, compute);
  expect(c.size).toBe(3);
  c.clear();
  expect(c.size).toBe(0);
  // The byte bound: 10 entries of ~8 KiB fit in 64 KiB only partly.
  const small = new AnalysisCache({ maxBytes: 64 * 1024 });
  for (let i = 0; i < 10; i++) small.analyse({ sourceId: 's', sql: `${i}`.padEnd(2000, ' '), catalog: cat, grants: [] }, compute);
  expect(small.size).toBeLessThanOrEqual(8);
  expect(small.size).toBeGreaterThan(0);
  expect(contentFingerprint({ a: 1 })).toBe(contentFingerprint({ a: 1 }));
  expect(contentFingerprint({ a: 1 })).not.toBe(contentFingerprint({ a: 2 }));
});

test("row-rule shapes live in their statement's entry: computed once per run text, bounded per entry, counted in its size", () => {
  const cat = catalog();
  const compute = () => ({ analysis: { ok: false } as never, relations: [], denied: null });
  let shaped = 0;
  const shape = (sql: string) => () => (shaped++, { kind: 'ruled' as const, sql, views: [], applied: [], steps: [], attributes: [] });
  const c = new AnalysisCache({ maxBytes: 20_000, maxSqlLength: 100 });
  const first = c.analyse({ sourceId: 's', sql: 'a', catalog: cat, grants: [] }, compute);
  const s1 = first.rowRules('a', shape('rewritten a'));
  expect(first.rowRules('a', shape('other'))).toBe(s1);
  // The statement's next lookup finds the same shape; another run text (a masking wrapper) has its own.
  const again = c.analyse({ sourceId: 's', sql: 'a', catalog: cat, grants: [] }, compute);
  expect(again.rowRules('a', shape('other'))).toBe(s1);
  expect(again.rowRules('wrapped a', shape('rewritten wrapped a'))).toMatchObject({ sql: 'rewritten wrapped a' });
  expect({ shaped, hits: c.rowRuleHits, misses: c.rowRuleMisses }).toEqual({ shaped: 2, hits: 2, misses: 2 });
  // Another statement (or other grants) never sees them.
  c.analyse({ sourceId: 's', sql: 'a', catalog: cat, grants: [{ identityId: 'x' } as never] }, compute).rowRules('a', shape('for other grants'));
  expect(shaped).toBe(3);
  // At most 8 run texts per entry (2 held, 6 more fit): beyond, computed on every call.
  for (let i = 0; i < 8; i++) again.rowRules(`t${i}`, shape(`r${i}`));
  again.rowRules('t5', shape('r5'));
  expect(shaped).toBe(3 + 8);
  again.rowRules('t7', shape('r7'));
  expect(shaped).toBe(3 + 8 + 1);
  // Counted in the entry's size: a long rewrite pushes the least recently used entry out of 20 000 bytes.
  const b = c.analyse({ sourceId: 's', sql: 'b', catalog: cat, grants: [] }, compute);
  expect(c.size).toBe(3);
  b.rowRules('b', shape('x'.repeat(6000)));
  expect(c.size).toBeLessThan(3);
  expect(c.analyse({ sourceId: 's', sql: 'b', catalog: cat, grants: [] }, compute).rowRules('b', shape('y'))).toMatchObject({ sql: 'x'.repeat(6000) });
  // Over-long statements are never stored, nor are their shapes; clear() drops them all.
  const long = c.analyse({ sourceId: 's', sql: 'z'.repeat(101), catalog: cat, grants: [] }, compute);
  long.rowRules('z', shape('z'));
  long.rowRules('z', shape('z'));
  const before = shaped;
  c.clear();
  c.analyse({ sourceId: 's', sql: 'a', catalog: cat, grants: [] }, compute).rowRules('a', shape('after clear'));
  expect(shaped).toBe(before + 1);
});

describe('the analysis and policy keys made once per statement context (issue 28, h28l)', () => {
  const grants = [{ sourceId: 's', role: allowAll }] as never;
  const entry = () => ({ analysis: { ok: true }, relations: [], denied: null }) as never;

  test('a frozen complexity object: the key prefix (fingerprints, limits JSON) is not made again per call', () => {
    const cache = new AnalysisCache();
    const cat = catalog();
    const complexity = Object.freeze({ maxJoins: 8, maxDepth: 4 });
    const compute = jest.fn(entry);
    cache.analyse({ sourceId: 's', sql: 'SELECT 1', catalog: cat, grants, complexity }, compute);
    const spy = jest.spyOn(JSON, 'stringify');
    try {
      cache.analyse({ sourceId: 's', sql: 'SELECT 1', catalog: cat, grants, complexity }, compute);
      cache.analyse({ sourceId: 's', sql: 'SELECT 2', catalog: cat, grants, complexity }, compute);
      expect(spy).not.toHaveBeenCalled();
    } finally {
      spy.mockRestore();
    }
    expect(compute).toHaveBeenCalledTimes(2);
    expect(cache.hits).toBe(1);
    // Another source id over the same objects is another key.
    cache.analyse({ sourceId: 't', sql: 'SELECT 1', catalog: cat, grants, complexity }, compute);
    expect(compute).toHaveBeenCalledTimes(3);
  });

  test('a complexity object that is not frozen is keyed by its content on every call: edited in place, it misses', () => {
    const cache = new AnalysisCache();
    const cat = catalog();
    const complexity = { maxJoins: 8 };
    const compute = jest.fn(entry);
    cache.analyse({ sourceId: 's', sql: 'SELECT 1', catalog: cat, grants, complexity }, compute);
    cache.analyse({ sourceId: 's', sql: 'SELECT 1', catalog: cat, grants, complexity }, compute);
    expect(compute).toHaveBeenCalledTimes(1);
    complexity.maxJoins = 2;
    cache.analyse({ sourceId: 's', sql: 'SELECT 1', catalog: cat, grants, complexity }, compute);
    expect(compute).toHaveBeenCalledTimes(2);
    cache.analyse({ sourceId: 's', sql: 'SELECT 1', catalog: cat, grants, complexity: { maxJoins: 8 } }, compute);
    expect(compute).toHaveBeenCalledTimes(2);
  });

  test('policyKey: the same text for the same policies, roles and identity; another identity name or id is another key', () => {
    const policies = [] as never[];
    const roles = Object.freeze(['reader']) as unknown as string[];
    const a = AnalysisCache.policyKey(policies, { identityId: 'i1', identityName: 'n1', roles });
    expect(AnalysisCache.policyKey(policies, { identityId: 'i1', identityName: 'n1', roles })).toBe(a);
    expect(a).toBe(`${contentFingerprint(policies)}\u0000i1\u0000n1\u0000reader`);
    expect(AnalysisCache.policyKey(policies, { identityId: 'i1', identityName: 'n2', roles })).toBe(`${contentFingerprint(policies)}\u0000i1\u0000n2\u0000reader`);
    expect(AnalysisCache.policyKey(policies, { identityId: 'i2', identityName: 'n2', roles })).toBe(`${contentFingerprint(policies)}\u0000i2\u0000n2\u0000reader`);
    expect(AnalysisCache.policyKey(policies, { identityId: 'i1', identityName: 'n1', roles: ['reader', 'writer'] })).toBe(`${contentFingerprint(policies)}\u0000i1\u0000n1\u0000reader,writer`);
  });
});

test('interlock_query\'s handler adds one promise around the pipeline, no async wrapper (issue 28, h28l)', async () => {
  const t = setup();
  expect(ok(await t.call(SQL))).toBe(true); // warm: the analysis cached, the store's answers in memory
  const { createHook } = await import('node:async_hooks');
  let promises = 0;
  const hook = createHook({ init: (_id, type) => void (type === 'PROMISE' && promises++) });
  // A refusal decided before any step that awaits: the pipeline's own promise and the handler's.
  const refused = queryHandler({ store: new MemoryGovernanceStore(), connectors: { reader: () => ({ read: async () => ({ fields: [], rowsArray: [], truncated: false }) }) }, rateLimiter: memoryRateLimiter(), cache: new ResultCache({ ttlMs: 0, maxBytes: 0 }), catalog: () => null, maskSecret: 's' });
  const noIdentity = { ...ctx('me'), identity: null };
  hook.enable();
  const p = refused({ source_id: 'db', sql: SQL }, noIdentity);
  hook.disable();
  expect(await p).toEqual({ kind: 'refusal', code: 'identity_required' });
  expect(promises).toBe(2);
  // The statement's fingerprint is still recorded for a call refused before analysis.
  expect(typeof noIdentity.auditDetails.fingerprint).toBe('string');
});
