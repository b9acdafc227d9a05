/**
 * Property (issue 12, item 2, "Done when"): over random mapped tables (random columns feeding each
 * field, several fields possibly fed by one column), random read grants, column and table denies,
 * deny_relations policies and column masks of every method, discovery never shows or confirms a
 * protected value, on real PostgreSQL:
 * - searching a cell's exact value finds its row exactly when the relation is visible and the value
 *   feeds a title or body the caller may see unmasked (so a protected value is never confirmed, and
 *   a readable one is still found);
 * - filters on document type, category and entity match exactly the rows whose field is shown;
 * - no answer of interlock_discover's search, related documents or get_document contains a
 *   protected cell value, and a restricted timestamp is null;
 * - related documents relate exactly through shown links, shown entities and shown text.
 * The model decides columns with AccessEvaluator.decide and maskFor (the decisions interlock_query
 * uses) and derives relations and fields itself, independently of src/discovery/fields.ts.
 */
import fc from 'fast-check';
import type { Policy } from '../../../generated/policy-v1';
import type { RoleStatement, SourceRole } from '../../../generated/role-v1';
import { openControlDb, type ControlDb } from '../../../src/control/db';
import { putSource } from '../../../src/control/sources';
import { AccessEvaluator } from '../../../src/governance/evaluator';
import { evaluatePolicies, maskFor } from '../../../src/governance/policies';
import { resolveScope } from '../../../src/discovery/access';
import { indexAssets } from '../../../src/discovery/indexer';
import { getDocument, relatedAssets, searchAssets, type DiscoverFilters } from '../../../src/discovery/search';
import type { AssetInput, FieldColumns } from '../../../src/discovery/types';
import { pgServer, createTempDatabase, type TempDatabase } from '../../helpers/pg';

const SRC = 'ps';
const COLS = ['c0', 'c1', 'c2', 'c3', 'c4'];
const SECRET = 'property-mask-secret';
const NOW = new Date('2025-06-01T12:00:00Z');
const SUBJECT = { identityId: 'idn_00000000000000000001', identityName: 'agent' };
const INSTANTS = Array.from({ length: 7 }, (_, i) => new Date(Date.UTC(2024, i, 1)).toISOString());

let tmp: TempDatabase;
let db: ControlDb;

beforeAll(async () => {
  tmp = await createTempDatabase('disc_lineage_props');
  db = await openControlDb(tmp.url);
  await putSource(db, { id: SRC, type: 'postgres', name: SRC, settings: { ...pgServer(), database: 'none', reader: { user: 'none', password: 'x' }, tls: { mode: 'off' } } });
}, 60_000);
afterAll(async () => {
  await db?.close();
  await tmp?.drop();
});

const col = fc.constantFrom(...COLS);
const optCol = fc.option(col, { nil: undefined });
const tableArb = fc.record({
  id: col,
  title: col,
  body: col,
  document_type: optCol,
  category_path: optCol,
  timestamp: optCol,
  entities: optCol,
  links: optCol,
  rows: fc.integer({ min: 1, max: 4 }),
});
type TableSpec = typeof tableArb extends fc.Arbitrary<infer T> ? T : never;

const accessArb = fc.record({
  grant: fc.constantFrom('table' as const, 'table' as const, 'columns' as const, 'none' as const),
  allowed: fc.subarray(COLS),
  denied: fc.subarray(COLS, { maxLength: 2 }),
  denyTable: fc.constantFrom(false, false, true),
  denyRelation: fc.constantFrom(false, false, false, false, true),
  masks: fc.array(fc.record({ column: col, method: fc.constantFrom('full' as const, 'partial' as const, 'hash' as const, 'null' as const) }), { maxLength: 2 }),
});
type AccessSpec = typeof accessArb extends fc.Arbitrary<infer T> ? T : never;

const caseArb = fc
  .array(tableArb, { minLength: 1, maxLength: 3 })
  .chain((tables) => fc.record({ tables: fc.constant(tables), access: fc.array(accessArb, { minLength: tables.length, maxLength: tables.length }) }));

// ---------- the corpus ----------

const tname = (t: number) => `t${t}`;
const rel = (t: number) => `public.${tname(t)}`;
/** The value of column `c` in row `r` of table `t`: a word found nowhere else. */
const cell = (t: number, r: number, c: string) => `tok${t}r${r}${c}z`;
/** The entity a column carries for every row of table `t` (so rows of a table share it). */
const ent = (t: number, c: string) => `ent${t}${c}z`;
const idOf = (spec: TableSpec, t: number, r: number) => `${SRC}:${rel(t)}/${cell(t, r, spec.id)}`;

function fieldsOf(s: TableSpec): FieldColumns {
  const one = (c: string | undefined) => (c ? [c] : []);
  return { id: [s.id], title: [...new Set([s.title, s.id])], body: [s.body], document_type: one(s.document_type), category_path: one(s.category_path), timestamp: one(s.timestamp), audience: [], entities: one(s.entities), links: one(s.links) };
}

function corpus(tables: TableSpec[]): AssetInput[] {
  const out: AssetInput[] = [];
  tables.forEach((s, t) => {
    for (let r = 0; r < s.rows; r++) {
      out.push({
        assetId: idOf(s, t, r),
        title: cell(t, r, s.title),
        body: `${cell(t, r, s.body)} common`,
        documentType: s.document_type ? cell(t, r, s.document_type) : 'record',
        categoryPath: s.category_path ? [cell(t, r, s.category_path)] : ['public', tname(t)],
        timestamp: s.timestamp ? INSTANTS[(t * 3 + r + COLS.indexOf(s.timestamp)) % INSTANTS.length] : null,
        audience: [],
        entities: s.entities ? [{ type: 'k', value: ent(t, s.entities) }] : [],
        links: s.links && s.rows > 1 ? [idOf(s, t, (r + 1) % s.rows)] : [],
        origin: { relation: rel(t), fields: fieldsOf(s) },
      });
    }
  });
  return out;
}

function identity(access: AccessSpec[]): { role: SourceRole; policies: Policy[] } {
  const st: RoleStatement[] = [
    { effect: 'allow', action: 'discover', resource: '*' },
    { effect: 'allow', action: 'request', resource: '*' },
  ];
  const policies: Policy[] = [];
  access.forEach((a, t) => {
    if (a.grant === 'table') st.push({ effect: 'allow', action: 'read', resource: rel(t) });
    if (a.grant === 'columns') for (const c of a.allowed) st.push({ effect: 'allow', action: 'read', resource: `${rel(t)}.${c}` });
    for (const c of a.denied) st.push({ effect: 'deny', action: 'read', resource: `${rel(t)}.${c}` });
    if (a.denyTable) st.push({ effect: 'deny', action: 'read', resource: rel(t) });
    if (a.denyRelation) policies.push({ name: `deny-${t}`, rule: { type: 'deny_relations', relations: [rel(t)] } });
    a.masks.forEach((m, k) => policies.push({ name: `mask-${t}-${k}`, rule: { type: 'mask_columns', columns: [`${rel(t)}.${m.column}`], method: m.method } }));
  });
  return { role: { name: 'r', statements: st as SourceRole['statements'] }, policies };
}

/** The model: which columns are protected, which relations visible, which fields shown (decisions from the one evaluator and maskFor). */
function model(tables: TableSpec[], ev: AccessEvaluator, policies: Policy[]) {
  const verdict = (t: number) => evaluatePolicies(policies, { ...SUBJECT, roles: ['r'], sourceId: SRC }, { action: 'read', relations: [{ schema: 'public', table: tname(t), action: 'read' }], writes: [], now: NOW });
  const protectedCol = (t: number, c: string) => {
    const v = verdict(t);
    if (!v.ok) return true;
    return ev.decide(SRC, 'read', { schema: 'public', table: tname(t), column: c }) !== 'allow' || maskFor(v.maskPatterns, 'public', tname(t), c) !== null;
  };
  const visible = (t: number) => verdict(t).ok && !protectedCol(t, tables[t].id);
  const shown = (t: number, field: keyof FieldColumns) => fieldsOf(tables[t])[field].every((c) => !protectedCol(t, c));
  return { protectedCol, visible, shown };
}

test('discovery never shows or confirms a protected value of a mapped table', async () => {
  await fc.assert(
    fc.asyncProperty(caseArb, async ({ tables, access }) => {
      const items = corpus(tables);
      await indexAssets(db, SRC, 'postgres', items);
      const { role, policies } = identity(access);
      const ev = new AccessEvaluator([{ sourceId: SRC, role }]);
      const m = model(tables, ev, policies);
      const scope = await resolveScope(db.pool, ev, policies, SUBJECT, SRC, 'discover', NOW, SECRET);
      const reqScope = await resolveScope(db.pool, ev, policies, SUBJECT, SRC, 'request', NOW, SECRET);
      const search = async (query: string, filters: DiscoverFilters = {}) => (await searchAssets(db.pool, scope, { query, filters, limit: 50 })).hits;
      const ids = (xs: Array<{ asset_id: string }>) => xs.map((x) => x.asset_id).sort();

      const secrets: string[] = [];
      tables.forEach((s, t) => {
        for (const c of COLS) {
          if (!m.protectedCol(t, c)) continue;
          secrets.push(ent(t, c));
          for (let r = 0; r < s.rows; r++) secrets.push(cell(t, r, c));
        }
      });
      const noSecret = (label: string, v: unknown) => {
        const text = JSON.stringify(v);
        const leaked = secrets.find((x) => text.includes(x));
        if (leaked) throw new Error(`${label} shows protected value ${leaked}: ${text}`);
      };
      const byId = new Map<string, { t: number; r: number }>();
      tables.forEach((s, t) => {
        for (let r = 0; r < s.rows; r++) byId.set(idOf(s, t, r), { t, r });
      });

      // Exact-value searches: found exactly through a shown title or body of a visible relation.
      for (const [t, s] of tables.entries()) {
        for (let r = 0; r < s.rows; r++) {
          for (const c of COLS) {
            const hits = await search(cell(t, r, c));
            noSecret('search', hits);
            const expected = m.visible(t) && ((c === s.title && m.shown(t, 'title')) || (c === s.body && m.shown(t, 'body'))) ? [idOf(s, t, r)] : [];
            expect(ids(hits)).toEqual(expected);
          }
        }
      }
      // Every visible row with a shown body, and filters on each row's metadata.
      const all = await search('common');
      noSecret('search', all);
      const bodyRows = [...byId].filter(([, p]) => m.visible(p.t) && m.shown(p.t, 'body')).map(([id]) => id).sort();
      expect(ids(all)).toEqual(bodyRows);
      for (const h of all) {
        const { t } = byId.get(h.asset_id)!;
        if (!m.shown(t, 'timestamp')) expect(h.timestamp).toBeNull();
      }
      for (const [t, s] of tables.entries()) {
        for (let r = 0; r < s.rows; r++) {
          const it = items.find((a) => a.assetId === idOf(s, t, r))!;
          const expectOnly = (field: keyof FieldColumns, got: Array<{ asset_id: string }>, matches: (a: AssetInput) => boolean) => {
            const want = items.filter((a) => matches(a) && bodyRows.includes(a.assetId) && m.shown(byId.get(a.assetId)!.t, field)).map((a) => a.assetId).sort();
            expect(ids(got)).toEqual(want);
          };
          if (s.document_type) expectOnly('document_type', await search('common', { documentTypes: [it.documentType] }), (a) => a.documentType === it.documentType);
          if (s.category_path) expectOnly('category_path', await search('common', { categoryPath: it.categoryPath }), (a) => a.categoryPath[0] === it.categoryPath[0]);
          if (s.entities) expectOnly('entities', await search('common', { entities: it.entities }), (a) => a.entities.some((e) => e.value === it.entities[0].value));
        }
      }
      // get_document and related documents.
      for (const a of items) {
        const { t } = byId.get(a.assetId)!;
        const d = await getDocument(db.pool, reqScope, scope, a.assetId);
        if (!m.visible(t)) {
          expect(d).toBeNull();
          continue;
        }
        expect(d).not.toBeNull();
        noSecret('get_document', d);
        if (m.shown(t, 'title')) expect(d!.title).toBe(a.title);
        if (m.shown(t, 'body')) expect(d!.body).toBe(a.body);
        expect(d!.links).toEqual(m.shown(t, 'links') ? a.links : []);
        if (!m.shown(t, 'timestamp')) expect(d!.timestamp).toBeNull();

        const related = await relatedAssets(db.pool, scope, a.assetId, 50);
        noSecret('related', related);
        const want = items
          .filter((c) => c.assetId !== a.assetId && m.visible(byId.get(c.assetId)!.t))
          .filter((c) => {
            const ct = byId.get(c.assetId)!.t;
            const link = (m.shown(t, 'links') && a.links.includes(c.assetId)) || (m.shown(ct, 'links') && c.links.includes(a.assetId));
            const entity = m.shown(t, 'entities') && m.shown(ct, 'entities') && a.entities.some((e) => c.entities.some((f) => f.value === e.value));
            const similar = m.shown(t, 'body') && m.shown(ct, 'body');
            return link || entity || similar;
          })
          .map((c) => c.assetId)
          .sort();
        expect(ids(related)).toEqual(want);
      }
    }),
    { numRuns: 60 },
  );
}, 240_000);
