/**
 * src/control/catalog-names.ts (task hnu4a item 1): which written names are checked against which
 * catalogues, wildcards, never-scanned sources, and the did-you-mean distance.
 */
import { checkWrittenNames, closestName, refuseOnePartSqlResources, type KnownSources } from '../../../src/control/catalog-names';
import type { SourceCatalog } from '../../../src/sql/catalog-types';

const catalog = (tables: Record<string, string[]>): SourceCatalog =>
  ({ relations: Object.entries(tables).map(([t, cols]) => ({ schema: t.split('.')[0], name: t.split('.')[1], kind: 'table', columns: cols.map((name) => ({ name, dataType: 'text' })) })) }) as unknown as SourceCatalog;

const known: KnownSources = {
  ids: new Set(['crm', 'hr', 'docs', 'fresh']),
  catalogs: new Map<string, SourceCatalog | null>([
    ['crm', catalog({ 'public.customer': ['id', 'email'] })],
    ['hr', catalog({ 'public.person': ['id', 'salary'] })],
    ['fresh', null],
  ]),
};
const names = (...n: string[]) => n.map((name, i) => ({ path: `p/${i}`, name }));

test('a name is looked up in the named sources only; none named: every scanned source', () => {
  expect(checkWrittenNames(known, { path: 's', ids: ['crm'] }, names('public.customer.email', 'public.person.salary')).names).toEqual([
    'p/1: no column public.person.salary in the scanned catalogue of crm',
  ]);
  expect(checkWrittenNames(known, undefined, names('public.customer.email', 'public.person.salary', 'public.person'))).toEqual({ sources: [], names: [] });
});

test('wildcards match any part; a name of wildcards only, or of another shape, is not checked', () => {
  expect(checkWrittenNames(known, undefined, names('public.*', '*.customer.email', 'public.customer.*', '*.*', '*', 'runbooks/*', 'a.b.c.d')).names).toEqual([]);
  expect(checkWrittenNames(known, undefined, names('public.custmer.*', 'sales.*')).names).toEqual([
    'p/0: no column public.custmer.* in the scanned catalogue of crm, hr (not scanned yet: fresh; run `interlock source scan fresh`, then repeat)',
    'p/1: no relation sales.* in the scanned catalogue of crm, hr (not scanned yet: fresh; run `interlock source scan fresh`, then repeat)',
  ]);
});

test('a role meant for a source registered but not scanned yet names that source, not only the catalogue it was looked up in (trial nuc)', () => {
  const applied: KnownSources = { ids: new Set(['chinook', 'icf']), catalogs: new Map<string, SourceCatalog | null>([['chinook', catalog({ 'public.customer': ['id'] })], ['icf', null]]) };
  expect(checkWrittenNames(applied, undefined, names('public.icf_items')).names).toEqual([
    'p/0: no relation public.icf_items in the scanned catalogue of chinook (not scanned yet: icf; run `interlock source scan icf`, then repeat)',
  ]);
});

test('unknown sources are named (with a close one); a named source never scanned leaves names unchecked', () => {
  expect(checkWrittenNames(known, { path: 'a/sources', ids: ['crmm', 'docs'] }, names('public.nothing'))).toEqual({ sources: ['a/sources/0: no source "crmm" is registered; did you mean crm?'], names: [] });
  expect(checkWrittenNames(known, { path: 'a/sources', ids: ['crm', 'fresh'] }, names('public.nothing')).names).toEqual([]);
  expect(checkWrittenNames({ ids: new Set(['fresh']), catalogs: new Map([['fresh', null]]) }, undefined, names('public.nothing')).names).toEqual([]);
});

test('did you mean: the closest name within 2 edits (or a fifth of the length), else none', () => {
  expect(closestName('public.customer.emial', ['public.customer.email', 'public.customer.id'])).toBe('public.customer.email');
  expect(closestName('public.custmer', ['public.customer', 'public.person'])).toBe('public.customer');
  expect(closestName('public.zzz', ['public.customer'])).toBeUndefined();
  expect(checkWrittenNames(known, undefined, names('public.Customer.email')).names).toEqual(['p/0: no column public.Customer.email in the scanned catalogue of crm, hr (not scanned yet: fresh; run `interlock source scan fresh`, then repeat); did you mean public.customer.email?']);
});

describe('refuseOnePartSqlResources (red team rtn4 item 4b)', () => {
  const role = (statements: Array<[string, string, string]>) => ({ name: 'd', statements: statements.map(([effect, action, resource]) => ({ effect, action, resource })) }) as never;
  const crm = catalog({ 'public.customer': ['id', 'email'], 'public.employee': ['id', 'email'], 'sales.email': ['id'] });
  const refusal = (r: unknown, targets: Array<{ id: string; catalog: SourceCatalog | null }>) => {
    try {
      refuseOnePartSqlResources(r as never, targets);
      return null;
    } catch (err) {
      return { name: (err as Error).name, message: (err as Error).message, details: (err as { details?: unknown }).details };
    }
  };
  test('a one-part relation or column resource on a PostgreSQL source is refused, with the qualified names it may mean', () => {
    expect(refusal(role([['allow', 'read', 'public.customer'], ['deny', 'read', 'email'], ['deny', 'describe', 'custmer']]), [{ id: 'crm', catalog: crm }])).toEqual({
      name: 'ValidationError',
      message: 'role "d" is granted on PostgreSQL source crm: a one-part resource matches no relation or column there',
      details: [
        'statements/1/resource: email is one part: on a PostgreSQL source a resource is schema.table or schema.table.column (* wildcards allowed), so it would match nothing; did you mean public.customer.email, public.employee.email, sales.email?',
        'statements/2/resource: custmer is one part: on a PostgreSQL source a resource is schema.table or schema.table.column (* wildcards allowed), so it would match nothing; did you mean public.customer?',
      ],
    });
  });
  test('never-scanned sources give no suggestion; "*", discover and request statements and qualified names pass; no SQL target: nothing refused', () => {
    expect(refusal(role([['deny', 'read', 'email']]), [{ id: 'b', catalog: null }, { id: 'a', catalog: null }])?.details).toEqual([
      'statements/0/resource: email is one part: on a PostgreSQL source a resource is schema.table or schema.table.column (* wildcards allowed), so it would match nothing',
    ]);
    expect(refusal(role([['deny', 'read', 'email']]), [{ id: 'b', catalog: null }, { id: 'a', catalog: null }])?.message).toBe('role "d" is granted on PostgreSQL sources a, b: a one-part resource matches no relation or column there');
    expect(refusal(role([['allow', '*', '*'], ['allow', 'discover', 'runbooks'], ['allow', 'request', 'hr'], ['deny', 'read', 'public.customer.email']]), [{ id: 'crm', catalog: crm }])).toBeNull();
    expect(refusal(role([['deny', 'read', 'email']]), [])).toBeNull();
  });
  test('more than five matches are counted, not listed', () => {
    const wide = catalog(Object.fromEntries(['a', 'b', 'c', 'd', 'e', 'f', 'g'].map((t) => [`public.${t}`, ['email']])));
    expect(refusal(role([['deny', 'read', 'email']]), [{ id: 'w', catalog: wide }])?.details).toEqual([
      'statements/0/resource: email is one part: on a PostgreSQL source a resource is schema.table or schema.table.column (* wildcards allowed), so it would match nothing; did you mean public.a.email, public.b.email, public.c.email, public.d.email, public.e.email (and 2 more)?',
    ]);
  });
});
