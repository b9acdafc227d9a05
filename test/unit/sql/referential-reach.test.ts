/**
 * src/sql/referential-reach.ts (issue 27, rt27w finding B): which relations a write reaches through
 * foreign keys' referential actions, which hooks it runs, and what the catalogue does not record.
 * Hand-built catalogues; the scan that fills them is tested in
 * test/integration/sql/row-rules-referential.test.ts.
 */
import type { CatalogRelation, ReferencingKey, SourceCatalog } from '../../../src/sql/catalog-types';
import { catalogHierarchy } from '../../../src/sql/hierarchy';
import { referentialReach } from '../../../src/sql/referential-reach';
import type { WriteAccess } from '../../../src/sql/types';

const NONE = { triggers: false, rules: false };
const key = (name: string, columns: string[], referencedColumns: string[], onDelete: ReferencingKey['onDelete'], onUpdate: ReferencingKey['onUpdate'] = 'no_action'): ReferencingKey => ({ schema: 'public', name, columns, referencedColumns, onDelete, onUpdate });
const table = (name: string, referencedBy: ReferencingKey[] = [], extra: Partial<CatalogRelation> = {}): CatalogRelation => ({
  schema: 'public',
  name,
  kind: 'table',
  columns: [{ name: 'id', dataType: 'integer' }],
  referencedBy,
  writeHooks: NONE,
  ...extra,
});
/** Columns of a hand-built relation (a column a key references must be listed: one the scan did not see counts as written by any update). */
const colsOf = (...names: string[]) => names.map((name) => ({ name, dataType: 'text' }));
const catalogOf = (relations: CatalogRelation[]): SourceCatalog => ({ relations, functions: [], searchPath: ['public'], scannedAt: '', truncated: false });
const reach = (c: SourceCatalog, writes: Array<Pick<WriteAccess, 'table' | 'operation' | 'columns'>>) =>
  referentialReach(c, catalogHierarchy(c), writes.map((w) => ({ schema: 'public', ...w })));
const names = (r: ReturnType<typeof reach>) => r.reached.map((x) => `${x.name}:${x.event}:${x.action}`);

describe('referentialReach', () => {
  const c = catalogOf([
    // a ← b (ON DELETE SET NULL on b.a_id) ← c (ON UPDATE CASCADE on b.a_id): a delete of a updates
    // b.a_id, which b's referencer c follows; d references a with NO ACTION-like ON UPDATE only.
    table('a', [key('b', ['a_id'], ['id'], 'set_null'), key('d', ['a_code'], ['code'], 'no_action', 'cascade')], { columns: colsOf('id', 'code') }),
    table('b', [key('c', ['b_a_id'], ['a_id'], 'no_action', 'cascade')], { columns: colsOf('id', 'a_id') }),
    table('c'),
    table('d'),
  ]);

  it('a DELETE follows ON DELETE actions, and a SET NULL as an update of the key columns', () => {
    const r = reach(c, [{ table: 'a', operation: 'delete', columns: ['id'] }]);
    expect(names(r)).toEqual(['b:update:ON DELETE SET NULL', 'c:update:ON UPDATE CASCADE']);
    expect([r.hooks, r.unknown]).toEqual([null, null]);
  });

  it('an UPDATE fires ON UPDATE actions only when it sets a referenced column', () => {
    expect(names(reach(c, [{ table: 'a', operation: 'update', columns: ['name'] }]))).toEqual([]);
    expect(names(reach(c, [{ table: 'a', operation: 'update', columns: ['code'] }]))).toEqual(['d:update:ON UPDATE CASCADE']);
    expect(names(reach(c, [{ table: 'b', operation: 'update', columns: ['a_id'] }]))).toEqual(['c:update:ON UPDATE CASCADE']);
  });

  it('an INSERT fires no action; MERGE counts as delete, update (every column) and insert', () => {
    expect(names(reach(c, [{ table: 'a', operation: 'insert', columns: ['id'] }]))).toEqual([]);
    expect(names(reach(c, [{ table: 'a', operation: 'merge', columns: ['id', 'code'] }])).sort()).toEqual(['b:update:ON DELETE SET NULL', 'c:update:ON UPDATE CASCADE', 'd:update:ON UPDATE CASCADE']);
  });

  it('a MERGE that cannot DELETE (it lists fewer than every column) is an update of the columns it lists (rtfk finding 4)', () => {
    const cols = ['id', 'code', 'name'].map((name) => ({ name, dataType: 'text' }));
    const m = catalogOf([table('a', [key('b', ['a_id'], ['id'], 'cascade'), key('d', ['a_code'], ['code'], 'no_action', 'cascade')], { columns: cols }), table('b'), table('d')]);
    expect(names(reach(m, [{ table: 'a', operation: 'merge', columns: ['name'] }]))).toEqual([]);
    expect(names(reach(m, [{ table: 'a', operation: 'merge', columns: ['code', 'name'] }]))).toEqual(['d:update:ON UPDATE CASCADE']);
    expect(names(reach(m, [{ table: 'a', operation: 'merge', columns: ['id', 'code', 'name'] }])).sort()).toEqual(['b:delete:ON DELETE CASCADE', 'd:update:ON UPDATE CASCADE']);
  });

  it('an UPDATE of a partitioned table follows the ON DELETE actions of keys declared on its partitions, not of clones or inheritance children (rtfk finding 7)', () => {
    const up = (c: SourceCatalog) => names(reach(c, [{ table: 'parent', operation: 'update', columns: ['name'] }]));
    const tree = (cloned: boolean, partition: boolean) =>
      catalogOf([
        table('parent', [], { kind: partition ? 'partitioned_table' : 'table' }),
        table('part', [{ ...key('child', ['p_id'], ['id'], 'cascade'), ...(cloned ? { cloned: true } : {}) }], { partition, parents: [{ schema: 'public', name: 'parent' }] }),
        table('child'),
      ]);
    expect(up(tree(false, true))).toEqual(['child:delete:ON DELETE CASCADE']);
    expect(up(tree(true, true))).toEqual([]);
    expect(up(tree(false, false))).toEqual([]);
  });

  it('descendants of a written relation count (a partition referenced by a cloned key), and a cycle ends', () => {
    const p = catalogOf([
      table('parent', [], { kind: 'partitioned_table' }),
      table('part', [key('child', ['p_id'], ['id'], 'cascade')], { partition: true, parents: [{ schema: 'public', name: 'parent' }] }),
      table('child', [key('child', ['parent_id'], ['id'], 'cascade')]),
    ]);
    expect(names(reach(p, [{ table: 'parent', operation: 'delete', columns: ['id'] }]))).toEqual(['child:delete:ON DELETE CASCADE']);
  });

  it('hooks: a trigger on the target (any operation) or on a reached relation; rules too', () => {
    const h = catalogOf([table('t', [key('r', ['t_id'], ['id'], 'cascade')], { writeHooks: { triggers: false, rules: true } }), table('r', [], { writeHooks: { triggers: true, rules: false } }), table('u')]);
    expect(reach(h, [{ table: 't', operation: 'insert', columns: ['id'] }]).hooks).toEqual({ relation: 'public.t', kind: 'rules' });
    const h2 = catalogOf([table('t', [key('r', ['t_id'], ['id'], 'cascade')]), table('r', [], { writeHooks: { triggers: true, rules: false } })]);
    expect(reach(h2, [{ table: 't', operation: 'update', columns: ['x'] }]).hooks).toBeNull();
    expect(reach(h2, [{ table: 't', operation: 'delete', columns: ['id'] }]).hooks).toEqual({ relation: 'public.r', kind: 'triggers' });
  });

  it('unknown: a relation without the recorded facts, or a referencing relation the catalogue lacks', () => {
    const { referencedBy: _r, writeHooks: _w, ...bare } = table('old');
    expect(reach(catalogOf([bare]), [{ table: 'old', operation: 'insert', columns: [] }]).unknown).toBe('public.old');
    expect(reach(catalogOf([table('t', [key('gone', ['t_id'], ['id'], 'cascade')])]), [{ table: 't', operation: 'delete', columns: [] }]).unknown).toBe('public.gone');
  });

  it('a write through a view writes its base relations (their keys and hooks)', () => {
    const v = catalogOf([
      { schema: 'public', name: 'v', kind: 'view', columns: [], writeHooks: NONE, referencedBy: [], view: { reads: [{ schema: 'public', name: 'base', kind: 'table' }], userCode: [], securityBarrier: false, securityInvoker: false } },
      table('base', [key('dep', ['base_id'], ['id'], 'cascade')]),
      table('dep'),
    ]);
    expect(names(reach(v, [{ table: 'v', operation: 'delete', columns: [] }]))).toEqual(['dep:delete:ON DELETE CASCADE']);
  });

  it('an update through a view follows the base columns its written columns pass through (baseColumns), else every column', () => {
    const v = catalogOf([
      { schema: 'public', name: 'v', kind: 'view', columns: [], writeHooks: NONE, referencedBy: [], view: { reads: [{ schema: 'public', name: 'base', kind: 'table' }], userCode: [], securityBarrier: false, securityInvoker: false } },
      table('base', [key('dep', ['base_code'], ['code'], 'no_action', 'cascade')], { columns: colsOf('id', 'code', 'name') }),
      table('dep'),
    ]);
    const at = (baseColumns?: WriteAccess['baseColumns']) =>
      names(referentialReach(v, catalogHierarchy(v), [{ schema: 'public', table: 'v', operation: 'update', columns: ['label'], ...(baseColumns ? { baseColumns } : {}) }]));
    expect(at([{ schema: 'public', table: 'base', column: 'name' }])).toEqual([]);
    expect(at([{ schema: 'public', table: 'base', column: 'code' }])).toEqual(['dep:update:ON UPDATE CASCADE']);
    expect(at(undefined)).toEqual(['dep:update:ON UPDATE CASCADE']);
  });

  it('an UPDATE also writes the stored generated columns, and every column of a relation with user triggers (rtfk3 findings V1, V2)', () => {
    const cols = [...colsOf('id', 'name'), { name: 'name_key', dataType: 'text', generated: true }];
    const g = catalogOf([table('a', [key('b', ['a_key'], ['name_key'], 'no_action', 'cascade')], { columns: cols }), table('b')]);
    expect(names(reach(g, [{ table: 'a', operation: 'update', columns: ['name'] }]))).toEqual(['b:update:ON UPDATE CASCADE']);
    // an update that writes no column of the relation (a base a view only reads) recomputes nothing
    expect(names(reach(g, [{ table: 'a', operation: 'update', columns: [] }]))).toEqual([]);
    // a key referencing a column the scan did not list (added since; keys read live at approval)
    const u = catalogOf([table('a', [key('b', ['a_new'], ['new_col'], 'no_action', 'cascade')], { columns: [{ name: 'id', dataType: 'integer' }] }), table('b')]);
    expect(names(reach(u, [{ table: 'a', operation: 'update', columns: ['name'] }]))).toEqual(['b:update:ON UPDATE CASCADE']);
    const t = (triggers: boolean) => catalogOf([table('a', [key('b', ['a_code'], ['code'], 'no_action', 'cascade')], { columns: colsOf('id', 'code', 'name'), writeHooks: { triggers, rules: false } }), table('b')]);
    expect(names(referentialReach(t(true), catalogHierarchy(t(true)), [{ schema: 'public', table: 'a', operation: 'update', columns: ['name'] }], { pastHooks: true }))).toEqual(['b:update:ON UPDATE CASCADE']);
    expect(names(reach(t(false), [{ table: 'a', operation: 'update', columns: ['name'] }]))).toEqual([]);
    // through a view with an INSTEAD OF trigger: every column of its base, whatever baseColumns says
    const view = (triggers: boolean): CatalogRelation => ({ schema: 'public', name: 'v', kind: 'view', columns: [], writeHooks: { triggers, rules: false }, referencedBy: [], view: { reads: [{ schema: 'public', name: 'a', kind: 'table' }], userCode: [], securityBarrier: false, securityInvoker: false } });
    const w = [{ schema: 'public', table: 'v', operation: 'update' as const, columns: ['label'], baseColumns: [{ schema: 'public', table: 'a', column: 'name' }] }];
    for (const [triggers, want] of [[true, ['b:update:ON UPDATE CASCADE']], [false, []]] as const) {
      const v = catalogOf([view(triggers), table('a', [key('b', ['a_code'], ['code'], 'no_action', 'cascade')], { columns: colsOf('id', 'code', 'name') }), table('b')]);
      expect(names(referentialReach(v, catalogHierarchy(v), w, { pastHooks: true }))).toEqual(want);
    }
  });

  it('columns: the key columns every update action reaching a relation writes (their union), [] when only deleted', () => {
    const k = catalogOf([
      table('a', [key('x', ['a1'], ['id'], 'set_null'), key('x', ['a2', 'a3'], ['id', 'code'], 'no_action', 'cascade'), key('y', ['a_id'], ['id'], 'cascade')]),
      table('x'),
      table('y'),
    ]);
    const r = referentialReach(k, catalogHierarchy(k), [{ schema: 'public', table: 'a', operation: 'merge', columns: ['id'] }]);
    expect(r.reached.map((x) => ({ name: x.name, event: x.event, columns: x.columns }))).toEqual([
      { name: 'x', event: 'update', columns: ['a1', 'a2', 'a3'] },
      { name: 'y', event: 'delete', columns: [] },
    ]);
  });

  it('pastHooks: the first hook is recorded and the walk goes on through every key', () => {
    const h = catalogOf([
      table('t', [key('r', ['t_id'], ['id'], 'cascade')], { writeHooks: { triggers: true, rules: false } }),
      table('r', [key('s', ['r_id'], ['id'], 'set_default')], { writeHooks: { triggers: false, rules: true } }),
      table('s'),
    ]);
    const stopped = referentialReach(h, catalogHierarchy(h), [{ schema: 'public', table: 't', operation: 'delete', columns: [] }]);
    expect([names(stopped), stopped.hooks]).toEqual([[], { relation: 'public.t', kind: 'triggers' }]);
    const on = referentialReach(h, catalogHierarchy(h), [{ schema: 'public', table: 't', operation: 'delete', columns: [] }], { pastHooks: true });
    expect([names(on), on.hooks, on.unknown]).toEqual([['r:delete:ON DELETE CASCADE', 's:update:ON DELETE SET DEFAULT'], { relation: 'public.t', kind: 'triggers' }, null]);
  });
});
