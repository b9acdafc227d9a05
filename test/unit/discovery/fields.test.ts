/**
 * The pure column decider of discovery (issue 12, src/discovery/fields.ts): relation visibility
 * and field states from the one evaluator and the policies, and how each state is presented.
 */
import type { Policy } from '../../../generated/policy-v1';
import type { SourceRole } from '../../../generated/role-v1';
import { AccessEvaluator } from '../../../src/governance/evaluator';
import { decideRelations, presentItems, presentList, presentText, presentTime, restrictedRelations, type RelationLineage } from '../../../src/discovery/fields';
import { fieldColumns } from '../../../src/discovery/tables';
import { relationLineage } from '../../../src/discovery/indexer';
import { applyMask, FULL_MASK } from '../../../src/sql/redaction';
import { viewColumnExpander } from '../../../src/discovery/view-columns';
import { initSqlParser } from '../../../src/sql/analyze';
import type { SourceCatalog } from '../../../src/sql/catalog-types';
import { CATALOG } from '../sql/helpers';

beforeAll(async () => {
  await initSqlParser();
});

const SUBJECT = { identityId: 'idn_1', identityName: 'agent' };
const NOW = new Date('2025-06-02T12:00:00Z'); // a Monday
const STAFF: RelationLineage = {
  relation: 'public.staff',
  fields: fieldColumns({ table: 'public.staff', id_column: 'id', title_column: 'name', body_column: 'notes', type_column: 'kind', time_column: 'hired', links_column: 'refs' }),
};
const WIKI: RelationLineage = { relation: 'public.wiki', fields: fieldColumns({ table: 'public.wiki', id_column: 'id', title_column: 'title', body_column: 'body' }) };

function decide(statements: SourceRole['statements'], policies: Policy[] = []) {
  const ev = new AccessEvaluator([{ sourceId: 's', role: { name: 'r', statements } }]);
  return decideRelations(ev, policies, SUBJECT, 's', NOW, [STAFF, WIKI]);
}
const mask = (columns: [string, ...string[]], method: 'full' | 'partial' | 'hash' | 'null', name = `m-${method}`): Policy => ({ name, rule: { type: 'mask_columns', columns, method } });

test('the columns feeding each field of a mapping: the title falls back to the id; unmapped fields have none', () => {
  expect(STAFF.fields).toEqual({ id: ['id'], title: ['name', 'id'], body: ['notes'], document_type: ['kind'], category_path: [], timestamp: ['hired'], audience: [], entities: [], links: ['refs'] });
  expect(fieldColumns({ table: 'a.b', id_column: 'x', title_column: 'x', body_column: 'x' }).title).toEqual(['x']);
});

test('several mappings of one relation: the index records the union of their columns per field', () => {
  const base = { documentType: 'r', title: 't', body: 'b', categoryPath: [], timestamp: null, audience: [], entities: [], links: [] };
  const lin = relationLineage([
    { ...base, assetId: 's:public.staff/1', origin: STAFF },
    { ...base, assetId: 's:public.staff/2', origin: { relation: 'public.staff', fields: { ...STAFF.fields, body: ['bio'], audience: ['aud'] } } },
    { ...base, assetId: 's:doc.md' },
  ]);
  expect([...lin.keys()]).toEqual(['public.staff']);
  expect(lin.get('public.staff')).toMatchObject({ body: ['notes', 'bio'], audience: ['aud'], title: ['name', 'id'] });
});

test('read allowed on every column: everything shown', () => {
  const r = decide([{ effect: 'allow', action: 'read', resource: 'public.*' }]);
  expect(r.map((x) => x.relation)).toEqual(['public.staff', 'public.wiki']);
  expect(Object.values(r[0].fields).every((s) => s === 'show')).toBe(true);
});

test('relations are invisible without read on the id, with a table deny, an id deny or mask, or a refusing read policy', () => {
  expect(decide([{ effect: 'allow', action: 'discover', resource: '*' }])).toEqual([]);
  expect(decide([{ effect: 'allow', action: 'read', resource: 'public.staff.name' }])).toEqual([]);
  const all = { effect: 'allow' as const, action: 'read' as const, resource: 'public.*' };
  expect(decide([all, { effect: 'deny', action: 'read', resource: 'public.staff' }]).map((x) => x.relation)).toEqual(['public.wiki']);
  expect(decide([all, { effect: 'deny', action: '*', resource: 'public.staff.id' }]).map((x) => x.relation)).toEqual(['public.wiki']);
  expect(decide([all], [mask(['*.*.id'], 'hash')])).toEqual([]);
  expect(decide([all], [{ name: 'd', rule: { type: 'deny_relations', relations: ['public.wiki'] } }]).map((x) => x.relation)).toEqual(['public.staff']);
  // A deny_relations rule for writes only does not hide documents.
  expect(decide([all], [{ name: 'd', rule: { type: 'deny_relations', relations: ['public.wiki'], actions: ['write'] } }])).toHaveLength(2);
  // Outside a read time window, as interlock_query would refuse.
  expect(decide([all], [{ name: 'tw', rule: { type: 'time_window', days: ['sat', 'sun'], start: '00:00', end: '23:59', actions: ['read'] } }])).toEqual([]);
  expect(decide([all], [{ name: 'tw', rule: { type: 'time_window', days: ['sat', 'sun'], start: '00:00', end: '23:59', actions: ['discover'] } }])).toHaveLength(2);
});

test('field states: a denied column hides, masks give the strongest method, a null mask hides', () => {
  const all = { effect: 'allow' as const, action: 'read' as const, resource: 'public.*' };
  const [staff] = decide([all, { effect: 'deny', action: 'read', resource: 'public.staff.kind' }], [mask(['public.staff.name'], 'partial', 'a'), mask(['public.staff.name', 'public.staff.hired'], 'hash', 'b'), mask(['public.staff.notes'], 'null', 'c')]);
  expect(staff.fields).toMatchObject({ id: 'show', title: 'hash', body: 'hide', document_type: 'hide', timestamp: 'hash', links: 'show', category_path: 'show' });
  // Column-level grants: a column without an allow is hidden like a denied one.
  const [onlySome] = decide([{ effect: 'allow', action: 'read', resource: 'public.staff.id' }, { effect: 'allow', action: 'read', resource: 'public.staff.notes' }]);
  expect(onlySome.fields).toMatchObject({ title: 'hide', body: 'show', document_type: 'hide', links: 'hide' });
  expect(restrictedRelations([onlySome], 'body')).toEqual([]);
  expect(restrictedRelations([onlySome], 'title')).toEqual(['public.staff']);
});

test('presentation: shown as is, hidden empty, masked with interlock_query masking', () => {
  expect(presentText('Zebulon Quark', 'show')).toBe('Zebulon Quark');
  expect(presentText('Zebulon Quark', 'hide')).toBe('');
  expect(presentText('Zebulon Quark', 'full')).toBe(FULL_MASK);
  expect(presentText('Zebulon Quark', 'partial')).toBe(applyMask('Zebulon Quark', 'partial'));
  expect(presentText('Zebulon Quark', 'hash', 'k')).toBe(applyMask('Zebulon Quark', 'hash', 'k'));
  expect(presentText('Zebulon Quark', 'hash')).toBe(FULL_MASK);
  expect(presentList(['hr', 'people'], 'show')).toEqual(['hr', 'people']);
  expect(presentList(['hr', 'people'], 'partial')).toEqual([FULL_MASK]);
  expect(presentList([], 'full')).toEqual([]);
  expect(presentList(['hr'], 'hide')).toEqual([]);
  expect(presentTime('2025-01-01T00:00:00.000Z', 'show')).toBe('2025-01-01T00:00:00.000Z');
  expect(presentTime('2025-01-01T00:00:00.000Z', 'partial')).toBeNull();
  expect(presentItems([{ type: 'k', value: 'v' }], 'full')).toEqual([]);
  expect(presentItems(['s:a'], 'show')).toEqual(['s:a']);
});

describe('row rules (issue 27 item 3): indexed rows of a ruled table are marked for the row filter', () => {
  it('a table ruled for the caller is marked rowCheck (resolveScope filters its rows against the source, or drops it); an unruled one is not', () => {
    const out = decide([
      { effect: 'allow', action: 'read', resource: 'public.staff', rows: 'id = identity.staff_id' },
      { effect: 'allow', action: 'read', resource: 'public.wiki' },
    ]);
    expect(out.map((r) => [r.relation, r.rowCheck ?? false])).toEqual([
      ['public.staff', true],
      ['public.wiki', false],
    ]);
    const both = decide([
      { effect: 'allow', action: 'read', resource: 'public.staff', rows: 'id = identity.staff_id' },
      { effect: 'allow', action: 'read', resource: 'public.*' },
    ]);
    expect(both.map((r) => [r.relation, r.rowCheck ?? false])).toEqual([
      ['public.staff', false],
      ['public.wiki', false],
    ]);
  });
});

describe('a mapped field on a STORED generated column (task hrt42; red team rt42 G1 in discovery)', () => {
  // public.gen: ssn4 GENERATED ALWAYS AS (right(ssn, 4)) STORED; the mapping's body is ssn4.
  const GEN: RelationLineage = { relation: 'public.gen', fields: fieldColumns({ table: 'public.gen', id_column: 'id', title_column: 'note', body_column: 'ssn4' }) };
  const col = (name: string, generated = false, generatedFrom?: string[]) => ({ name, dataType: 'text', nullable: true, default: null, identity: null, generated, ...(generatedFrom ? { generatedFrom } : {}) });
  const catalog = (generatedFrom?: string[]): SourceCatalog => ({
    ...CATALOG,
    relations: [...CATALOG.relations, { schema: 'public', name: 'gen', kind: 'table', columns: [col('id'), col('ssn'), col('note'), col('ssn4', true, generatedFrom)] }],
  });
  function decideGen(statements: SourceRole['statements'], policies: Policy[] = [], generatedFrom: string[] | undefined = ['ssn']) {
    const ev = new AccessEvaluator([{ sourceId: 's', role: { name: 'r', statements } }]);
    return decideRelations(ev, policies, SUBJECT, 's', NOW, [GEN], viewColumnExpander(catalog(generatedFrom)))[0]!.fields.body;
  }

  test('computed from a denied column: hidden; from an ungranted one: hidden; from a masked one: masked in full', () => {
    expect(decideGen([{ effect: 'allow', action: 'read', resource: 'public.gen' }, { effect: 'deny', action: 'read', resource: 'public.gen.ssn' }])).toBe('hide');
    expect(decideGen([{ effect: 'allow', action: 'read', resource: 'public.gen.id' }, { effect: 'allow', action: 'read', resource: 'public.gen.note' }, { effect: 'allow', action: 'read', resource: 'public.gen.ssn4' }])).toBe('hide');
    expect(decideGen([{ effect: 'allow', action: 'read', resource: 'public.gen' }], [mask(['public.gen.ssn'], 'partial')])).toBe('full');
    // A snapshot without the inputs: every other column counts.
    expect(decideGen([{ effect: 'allow', action: 'read', resource: 'public.gen' }, { effect: 'deny', action: 'read', resource: 'public.gen.ssn' }], [], undefined)).toBe('hide');
    // Inputs readable and unmasked: shown.
    expect(decideGen([{ effect: 'allow', action: 'read', resource: 'public.gen' }])).toBe('show');
  });
});
