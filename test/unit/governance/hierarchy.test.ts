/**
 * Issue 22 item 1, the pure pieces: the catalogue's relation hierarchy (src/sql/hierarchy.ts), the
 * server's answer (src/sources/postgres/hierarchy.ts readRelationTrees), and decisions across the
 * tree (src/governance/hierarchy.ts), for roles, policies and discovery mappings.
 */
import type { Policy } from '../../../generated/policy-v1';
import type { SourceRole } from '../../../generated/role-v1';
import { AccessEvaluator } from '../../../src/governance/evaluator';
import { decideInHierarchy, maskInHierarchy } from '../../../src/governance/hierarchy';
import { evaluatePolicies } from '../../../src/governance/policies';
import { decideRelations } from '../../../src/discovery/fields';
import { fieldColumns } from '../../../src/discovery/tables';
import type { CatalogRelation, SourceCatalog } from '../../../src/sql/catalog-types';
import { catalogHierarchy, hierarchyChanged, NO_HIERARCHY, overlayHierarchy, relationKey } from '../../../src/sql/hierarchy';
import { HIERARCHY_SQL, readRelationTrees } from '../../../src/sources/postgres/hierarchy';
import { qualifySql } from '../../../src/sources/postgres/qualify-sql';

const n = (name: string) => ({ schema: 'public', name });
const rel = (name: string, extra: Partial<CatalogRelation> = {}): CatalogRelation => ({ schema: 'public', name, kind: 'table', columns: [{ name: 'id', dataType: 'integer' }, { name: 'v', dataType: 'text' }], ...extra });
/** m (partitioned) → m1 (partitioned) → m1a, m1d; m → m2; animal → cat (parents only: an older scan without ancestors). */
const CATALOG: SourceCatalog = {
  relations: [
    rel('m', { kind: 'partitioned_table', partition: false, parents: [], ancestors: [] }),
    rel('m1', { kind: 'partitioned_table', partition: true, parents: [n('m')], ancestors: [n('m')] }),
    rel('m1a', { partition: true, parents: [n('m1')], ancestors: [n('m1'), n('m')] }),
    rel('m1d', { partition: true, parents: [n('m1')], ancestors: [n('m1'), n('m')] }),
    rel('m2', { partition: true, parents: [n('m')], ancestors: [n('m')] }),
    rel('animal'),
    rel('cat', { parents: [n('animal')] }),
    rel('loose'),
  ],
  functions: [],
  searchPath: ['public'],
  scannedAt: '2026-12-03T00:00:00Z',
  truncated: false,
};
const ev = (statements: SourceRole['statements']) => new AccessEvaluator([{ sourceId: 's', role: { name: 'r', statements } }]);

test('catalogHierarchy: recorded ancestors nearest first, parents walked when ancestors are absent, descendants at every depth', () => {
  const h = catalogHierarchy(CATALOG);
  expect(h.ancestors('public', 'm1a')).toEqual([n('m1'), n('m')]);
  expect(h.ancestors('public', 'cat')).toEqual([n('animal')]);
  expect(h.ancestors('public', 'm')).toEqual([]);
  expect(h.ancestors('public', 'nope')).toEqual([]);
  expect(h.descendants('public', 'm')).toEqual([n('m1'), n('m1a'), n('m1d'), n('m2')]);
  expect(h.descendants('public', 'm1')).toEqual([n('m1a'), n('m1d')]);
  expect(h.descendants('public', 'animal')).toEqual([n('cat')]);
  expect(h.descendants('public', 'm1a')).toEqual([]);
  expect(catalogHierarchy(CATALOG)).toBe(h);
});

test('hierarchyChanged and overlayHierarchy: an attach after the scan adds ancestors, a detach keeps the old ones', () => {
  const base = catalogHierarchy(CATALOG);
  const same = new Map([[relationKey('public', 'm1a'), { ancestors: [n('m'), n('m1')], descendants: [] }]]);
  expect(hierarchyChanged(base, same)).toBe(false);
  // loose attached under m1; m2 detached from m.
  const live = new Map([
    [relationKey('public', 'loose'), { ancestors: [n('m1'), n('m')], descendants: [] }],
    [relationKey('public', 'm2'), { ancestors: [], descendants: [] }],
    [relationKey('public', 'm'), { ancestors: [], descendants: [n('m1'), n('m1a'), n('m1d'), n('loose')] }],
  ]);
  expect(hierarchyChanged(base, live)).toBe(true);
  const h = overlayHierarchy(base, live);
  expect(h.ancestors('public', 'loose')).toEqual([n('m1'), n('m')]);
  expect(h.ancestors('public', 'm2')).toEqual([n('m')]);
  expect(h.descendants('public', 'm')).toEqual([n('m1'), n('m1a'), n('m1d'), n('loose'), n('m2')]);
  // Relations the server was not asked about keep the catalogue's answer.
  expect(h.ancestors('public', 'm1d')).toEqual([n('m1'), n('m')]);
});

test('decideInHierarchy: a parent allow grants, a deny anywhere up or down wins, nothing → none', () => {
  const h = catalogHierarchy(CATALOG);
  const d = (statements: SourceRole['statements'], table: string, column?: string) => decideInHierarchy(ev(statements), 's', 'read', { schema: 'public', table, ...(column ? { column } : {}) }, h, ['id', 'v']);
  expect(d([{ effect: 'allow', action: 'read', resource: 'public.m' }], 'm1a', 'v')).toBe('allow');
  expect(d([{ effect: 'allow', action: 'read', resource: 'public.m' }], 'm1a')).toBe('allow');
  expect(d([{ effect: 'allow', action: 'read', resource: 'public.m1a' }], 'm1a', 'v')).toBe('allow');
  expect(d([{ effect: 'allow', action: 'read', resource: 'public.m1a' }], 'm', 'v')).toBe('none');
  expect(d([{ effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'deny', action: 'read', resource: 'public.m.v' }], 'm1a', 'v')).toBe('deny');
  expect(d([{ effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'deny', action: 'read', resource: 'public.m.v' }], 'm1a', 'id')).toBe('allow');
  expect(d([{ effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'deny', action: 'read', resource: 'public.m1' }], 'm1d')).toBe('deny');
  expect(d([{ effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'deny', action: 'read', resource: 'public.m1' }], 'm2', 'v')).toBe('allow');
  // A descendant's deny refuses its parent (the parent's rows include the descendant's).
  expect(d([{ effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'deny', action: 'read', resource: 'public.m1a.v' }], 'm', 'v')).toBe('deny');
  expect(d([{ effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'deny', action: 'read', resource: 'public.m1a.v' }], 'm2', 'v')).toBe('allow');
  // A descendant's allow does not grant its parent.
  expect(d([{ effect: 'allow', action: 'read', resource: 'public.m1a' }], 'm1')).toBe('none');
  // Without a hierarchy nothing spreads.
  expect(decideInHierarchy(ev([{ effect: 'allow', action: 'read', resource: 'public.m' }]), 's', 'read', { schema: 'public', table: 'm1a', column: 'v' }, NO_HIERARCHY)).toBe('none');
});

test('decideInHierarchy: a child of two parents gets a parent\'s column only from an allow on it or on a parent that has it (rt48b B7 residue)', () => {
  const col = (name: string) => ({ name, dataType: 'text' });
  const h = catalogHierarchy({
    ...CATALOG,
    relations: [
      rel('pa', { columns: [col('id'), col('owner_id'), col('secret')], parents: [], ancestors: [] }),
      rel('pb', { columns: [col('id'), col('label')], parents: [], ancestors: [] }),
      rel('pc', { columns: [col('id'), col('owner_id'), col('secret'), col('label'), col('extra')], parents: [n('pa'), n('pb')], ancestors: [n('pa'), n('pb')] }),
    ],
  });
  const d = (statements: SourceRole['statements'], column: string) => decideInHierarchy(ev(statements), 's', 'read', { schema: 'public', table: 'pc', column }, h);
  const pbOnly: SourceRole['statements'] = [{ effect: 'allow', action: 'read', resource: 'public.pb' }];
  // pb's allow grants pb's columns and pc's own, not pa's (before: 'allow' for secret and owner_id).
  expect(['id', 'label', 'extra', 'secret', 'owner_id'].map((c) => d(pbOnly, c))).toEqual(['allow', 'allow', 'allow', 'none', 'none']);
  // An allow on pa, or on pc itself, grants pa's columns of pc.
  expect(d([...pbOnly, { effect: 'allow', action: 'read', resource: 'public.pa' }], 'secret')).toBe('allow');
  expect(d([{ effect: 'allow', action: 'read', resource: 'public.pc' }], 'secret')).toBe('allow');
  // Every ancestor's deny still refuses, whichever parent has the column.
  expect(d([{ effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'deny', action: 'read', resource: 'public.pb' }], 'secret')).toBe('deny');
});

test('maskInHierarchy and deny_relations follow the tree; the refusal names the relation read', () => {
  const h = catalogHierarchy(CATALOG);
  const patterns = [{ parts: ['public', 'm', 'v'], method: 'partial' as const }, { parts: ['public', 'm1d', 'v'], method: 'full' as const }];
  expect(maskInHierarchy(patterns, 'public', 'm1a', 'v', h)).toBe('partial');
  expect(maskInHierarchy(patterns, 'public', 'm1d', 'v', h)).toBe('full');
  expect(maskInHierarchy(patterns, 'public', 'm1', 'v', h)).toBe('full');
  expect(maskInHierarchy(patterns, 'public', 'm1a', 'id', h)).toBe(null);
  expect(maskInHierarchy(patterns, 'public', 'cat', 'v', h)).toBe(null);
  const deny: Policy = { name: 'no-animals', rule: { type: 'deny_relations', relations: ['public.animal'] } };
  const subject = { identityId: 'i', identityName: 'a', roles: ['r'], sourceId: 's' };
  const v = evaluatePolicies([deny], subject, { action: 'read', relations: [{ schema: 'public', table: 'cat', action: 'read', governing: [{ schema: 'public', table: 'animal' }] }], writes: [], now: new Date() });
  expect(v).toEqual({ ok: false, policy: 'no-animals', reason: 'Policy no-animals refuses read on public.cat.' });
  expect(evaluatePolicies([deny], subject, { action: 'read', relations: [{ schema: 'public', table: 'cat', action: 'read' }], writes: [], now: new Date() }).ok).toBe(true);
});

test('discovery mappings of a partition follow the parent: masked and hidden fields, refused relations', () => {
  const lineage = [{ relation: 'public.m1a', fields: fieldColumns({ table: 'public.m1a', id_column: 'id', title_column: 'v', body_column: 'v' }) }];
  const h = catalogHierarchy(CATALOG);
  const e = ev([{ effect: 'allow', action: 'read', resource: 'public.m' }]);
  const mask: Policy = { name: 'mask-v', rule: { type: 'mask_columns', columns: ['public.m.v'], method: 'full' } };
  const [a] = decideRelations(e, [mask], { identityId: 'i', identityName: 'a' }, 's', new Date(), lineage, undefined, h);
  expect(a).toMatchObject({ relation: 'public.m1a', fields: { id: 'show', title: 'full', body: 'full' } });
  const denied = ev([{ effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'deny', action: 'read', resource: 'public.m1.v' }]);
  expect(decideRelations(denied, [], { identityId: 'i', identityName: 'a' }, 's', new Date(), lineage, undefined, h)[0].fields).toMatchObject({ id: 'show', title: 'hide', body: 'hide' });
  const refused: Policy = { name: 'no-m', rule: { type: 'deny_relations', relations: ['public.m'] } };
  expect(decideRelations(e, [refused], { identityId: 'i', identityName: 'a' }, 's', new Date(), lineage, undefined, h)).toEqual([]);
  // Without the hierarchy (the old behaviour) the parent's grant does not reach the partition: invisible.
  expect(decideRelations(e, [mask], { identityId: 'i', identityName: 'a' }, 's', new Date(), lineage)).toEqual([]);
});

test('readRelationTrees: one query with parallel name arrays; an incomplete or malformed answer throws', async () => {
  const calls: Array<[string, unknown[]]> = [];
  const rows = [
    ['public', 'm1a', 'a', 'public', 'm1'],
    ['public', 'm1a', 'a', 'public', 'm'],
    ['public', 'm', 'd', 'public', 'm1'],
  ];
  const trees = await readRelationTrees(async (sql, params) => (calls.push([sql, params]), { rowsArray: rows, truncated: false }), [n('m1a'), n('m'), n('gone')]);
  // Sent with every name pinned to pg_catalog (red team rt47b J3b).
  expect(calls).toEqual([[qualifySql(HIERARCHY_SQL), [['public', 'public', 'public'], ['m1a', 'm', 'gone']]]]);
  expect(Object.fromEntries(trees)).toEqual({
    [relationKey('public', 'm1a')]: { ancestors: [n('m1'), n('m')], descendants: [] },
    [relationKey('public', 'm')]: { ancestors: [], descendants: [n('m1')] },
    [relationKey('public', 'gone')]: { ancestors: [], descendants: [] },
  });
  await expect(readRelationTrees(async () => ({ rowsArray: rows, truncated: true }), [n('m')])).rejects.toThrow('hierarchy answer incomplete');
  await expect(readRelationTrees(async () => ({ rowsArray: [['public', 'm', 'x', 'public', 'm1']], truncated: false }), [n('m')])).rejects.toThrow('hierarchy answer incomplete');
  let asked = false;
  expect((await readRelationTrees(async () => ((asked = true), { rowsArray: [], truncated: false }), [])).size).toBe(0);
  expect(asked).toBe(false);
});
