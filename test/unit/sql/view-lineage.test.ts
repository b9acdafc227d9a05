/**
 * The relations behind a view as the scan records them (src/sql/view-lineage.ts, issue 27 item 1):
 * nested views, materialized views, user code, fail-closed `unknown`, cycles.
 */
import type { CatalogRelation, SourceCatalog, ViewFacts } from '../../../src/sql/catalog-types';
import { isViewRelation, viewLineage } from '../../../src/sql/view-lineage';

const table = (name: string): CatalogRelation => ({ schema: 'public', name, kind: 'table', columns: [{ name: 'id', dataType: 'integer' }] });
const view = (name: string, reads: Array<[string, string, CatalogRelation['kind']]>, userCode: string[] = [], kind: CatalogRelation['kind'] = 'view'): CatalogRelation => {
  const facts: ViewFacts = { reads: reads.map(([schema, n, k]) => ({ schema, name: n, kind: k })), userCode, securityBarrier: false, securityInvoker: false };
  return { schema: 'public', name, kind, columns: [{ name: 'id', dataType: 'integer' }], definition: 'SELECT 1 AS id', view: facts };
};
const catalog = (relations: CatalogRelation[]): SourceCatalog => ({ relations, functions: [], searchPath: ['public'], scannedAt: '2026-12-04T00:00:00Z', truncated: false });

const CAT = catalog([
  table('a'),
  table('b'),
  view('v1', [['public', 'a', 'table']]),
  view('v2', [['public', 'v1', 'view'], ['public', 'b', 'table']], ['public.f']),
  view('m', [['public', 'v1', 'view']], [], 'materialized_view'),
  view('over_m', [['public', 'm', 'materialized_view'], ['pg_catalog', 'pg_class', 'table']]),
  view('lost', [['public', 'gone', 'table']]),
  { ...table('old'), kind: 'view', definition: 'SELECT 1 AS id' },
  view('over_old', [['public', 'old', 'view']]),
  view('c1', [['public', 'c2', 'view']]),
  view('c2', [['public', 'c1', 'view'], ['public', 'a', 'table']]),
]);

describe('viewLineage', () => {
  it('follows nested views to their base tables, each once, the view itself first, user code collected', () => {
    expect(viewLineage(CAT, 'public', 'v2')).toEqual({
      bases: [{ schema: 'public', name: 'a' }, { schema: 'public', name: 'b' }],
      views: [{ schema: 'public', name: 'v2' }, { schema: 'public', name: 'v1' }],
      materialized: [],
      userCode: ['public.f'],
      unknown: [],
    });
  });

  it('lists materialized views on the way; system relations are bases, never unknown', () => {
    const l = viewLineage(CAT, 'public', 'over_m');
    expect(l.materialized).toEqual([{ schema: 'public', name: 'm' }]);
    expect(l.bases).toEqual([{ schema: 'public', name: 'a' }, { schema: 'pg_catalog', name: 'pg_class' }]);
    expect(l.unknown).toEqual([]);
  });

  it('fails closed: a dependency missing from the catalogue, or a view scanned without its dependencies, is unknown', () => {
    expect(viewLineage(CAT, 'public', 'lost').unknown).toEqual(['public.gone']);
    expect(viewLineage(CAT, 'public', 'over_old').unknown).toEqual(['public.old']);
  });

  it('a built-in that runs SQL text in a definition on the way is user code (no dependency is recorded on it; red team rt27z Z2)', () => {
    const xml = { ...view('xml', []), definition: "SELECT query_to_xml('SELECT * FROM public.a'::text, true, false, ''::text) AS x" };
    const words = { ...view('words', []), definition: "SELECT count(*) AS n FROM TS_STAT('SELECT to_tsvector(b.x) FROM b'::text) s(word, ndoc, nentry)" };
    const cat = catalog([table('a'), xml, words, view('over_xml', [['public', 'xml', 'view'], ['public', 'a', 'table']]), { ...view('plain', [['public', 'a', 'table']]), definition: 'SELECT a.id AS xml_id, upper(a.name) AS query_to FROM a' }]);
    expect(viewLineage(cat, 'public', 'xml').userCode).toEqual(['pg_catalog.query_to_xml']);
    expect(viewLineage(cat, 'public', 'words').userCode).toEqual(['pg_catalog.ts_stat']);
    expect(viewLineage(cat, 'public', 'over_xml').userCode).toEqual(['pg_catalog.query_to_xml']);
    expect(viewLineage(cat, 'public', 'plain').userCode).toEqual([]);
  });

  it('terminates on a cycle of records and keeps the bases reached', () => {
    const l = viewLineage(CAT, 'public', 'c1');
    expect(l.views.map((v) => v.name)).toEqual(['c1', 'c2']);
    expect(l.bases).toEqual([{ schema: 'public', name: 'a' }]);
  });

  it('a relation that is not a view is its own base; isViewRelation tells them apart', () => {
    expect(viewLineage(CAT, 'public', 'a').bases).toEqual([{ schema: 'public', name: 'a' }]);
    expect([isViewRelation(CAT, 'public', 'a'), isViewRelation(CAT, 'public', 'v1'), isViewRelation(CAT, 'public', 'm'), isViewRelation(CAT, 'public', 'nope')]).toEqual([false, true, true, false]);
  });
});
