/**
 * Task hfn: what a user function may read (src/sql/function-reads.ts), on hand-built catalogues:
 * string bodies resolved with the pinned or the reader's search path, nested calls and cycles,
 * SQL-standard bodies' dependency records, views, opaque cases, and the analysis's `functionReads`.
 */
import { analyzeSql, initSqlParser } from '../../../src/sql/analyze';
import type { CatalogRoutine, SourceCatalog } from '../../../src/sql/catalog-types';
import { functionReads } from '../../../src/sql/function-reads';
import { prepareCatalog } from '../../../src/sql/prepared-catalog';

beforeAll(async () => {
  await initSqlParser();
});

const col = (name: string) => ({ name, dataType: 'text' });
/** A LANGUAGE sql string body as the scan records it: its dependency records (parameter defaults and types) empty unless `extra` says. */
const sqlFn = (schema: string, name: string, source: string, extra: Partial<CatalogRoutine> = {}): CatalogRoutine => ({ schema, name, language: 'sql', securityDefiner: false, config: null, owner: 'owner', source, depends: { relations: [], functions: [], unsafeTypes: false }, ...extra });

function catalog(routines: CatalogRoutine[] | undefined, extra: Partial<SourceCatalog> = {}): SourceCatalog {
  const names = new Set((routines ?? []).map((r) => `${r.schema}.${r.name}`));
  return {
    relations: [
      { schema: 'public', name: 'employee', kind: 'table', columns: [col('emp_id'), col('ssn')] },
      { schema: 'hr', name: 'employee', kind: 'table', columns: [col('emp_id'), col('salary')] },
      { schema: 'public', name: 'dept', kind: 'table', columns: [col('dept_id')] },
      { schema: 'public', name: 'v_emp', kind: 'view', columns: [col('emp_id')], definition: 'SELECT emp_id FROM employee', view: { reads: [{ schema: 'public', name: 'employee', kind: 'table' }], userCode: [], securityBarrier: false, securityInvoker: false } },
    ],
    functions: [
      ...[...names].map((n) => ({ schema: n.split('.')[0], name: n.split('.')[1], volatility: 'stable' as const, returnsSet: false })),
      { schema: 'pg_catalog', name: 'upper', volatility: 'immutable', returnsSet: false },
      { schema: 'pg_catalog', name: 'pg_read_file', volatility: 'volatile', returnsSet: false },
    ],
    searchPath: ['public'],
    scannedAt: '2026-12-06T00:00:00Z',
    truncated: false,
    systemRelations: ['pg_class'],
    readerRole: 'reader',
    ...(routines ? { routines, operatorCode: [] } : {}),
    ...extra,
  };
}

const reads = (cat: SourceCatalog, name: string, schema = 'public') => functionReads(prepareCatalog(cat), schema, name);

test('a string body reads every relation it names, resolved with the reader path', () => {
  const cat = catalog([sqlFn('public', 'f', 'SELECT ssn FROM employee WHERE emp_id = $1')]);
  // Its `=` is looked up in the reader path's schema when it runs (task hg2).
  expect(reads(cat, 'f')).toEqual({ relations: [{ schema: 'public', name: 'employee' }], opaque: null, securityDefiner: false, functions: [{ schema: 'public', name: 'f' }], lookups: { functions: [], operators: [{ schema: 'public', name: '=' }] } });
});

test('a pinned search_path resolves the body where PostgreSQL will ($user inside SECURITY DEFINER = the owner)', () => {
  const cat = catalog([
    sqlFn('public', 'f', 'SELECT salary FROM employee', { config: ['search_path=hr, pg_temp'] }),
    sqlFn('public', 'g', 'SELECT 1 FROM employee', { config: ['search_path="$user", public'], securityDefiner: true, owner: 'hr' }),
    sqlFn('public', 'h', 'SELECT 1 FROM employee', { config: ['search_path="$user", public'] }),
  ]);
  expect(reads(cat, 'f').relations).toEqual([{ schema: 'hr', name: 'employee' }]);
  expect(reads(cat, 'g')).toEqual({ relations: [{ schema: 'hr', name: 'employee' }], opaque: null, securityDefiner: true, functions: [{ schema: 'public', name: 'g' }], lookups: { functions: [], operators: [] } });
  // Outside SECURITY DEFINER $user is the reader role (no schema of that name: public).
  expect(reads(cat, 'h').relations).toEqual([{ schema: 'public', name: 'employee' }]);
});

test('a pure body reads nothing; a CTE name is not a relation', () => {
  const cat = catalog([sqlFn('public', 'twice', 'SELECT $1 * 2'), sqlFn('public', 'c', 'WITH x AS (SELECT 1 AS a) SELECT a FROM x')]);
  expect(reads(cat, 'twice')).toEqual({ relations: [], opaque: null, securityDefiner: false, functions: [{ schema: 'public', name: 'twice' }], lookups: { functions: [], operators: [{ schema: 'public', name: '*' }] } });
  expect(reads(cat, 'c')).toEqual({ relations: [], opaque: null, securityDefiner: false, functions: [{ schema: 'public', name: 'c' }], lookups: { functions: [], operators: [] } });
});

test('nested calls are followed, cycles end', () => {
  const cat = catalog([
    sqlFn('public', 'outer', 'SELECT upper(inner_fn($1))'),
    sqlFn('public', 'inner_fn', 'SELECT ssn FROM employee WHERE emp_id = $1 AND outer($1) IS NOT NULL'),
    sqlFn('public', 'd', 'SELECT dept_id FROM dept'),
  ]);
  expect(reads(cat, 'outer').relations).toEqual([{ schema: 'public', name: 'employee' }]);
  expect(reads(cat, 'inner_fn').relations).toEqual([{ schema: 'public', name: 'employee' }]);
});

test('lookups (task hg2): the names a string body looks up, in each schema of its path (pinned, the reader\'s, the owner\'s for an unpinned SECURITY DEFINER) or the one it names; the analysis reports them qualified', () => {
  const cat = catalog([
    sqlFn('public', 'outer', 'SELECT upper(inner_fn($1))'),
    sqlFn('public', 'inner_fn', 'SELECT ssn FROM employee WHERE emp_id = $1 AND public.d() IS NOT NULL', { config: ['search_path=hr, public'] }),
    sqlFn('public', 'd', 'SELECT dept_id FROM dept WHERE dept_id > 2', { securityDefiner: true, owner: 'ops' }),
  ], { operators: [{ schema: 'pg_catalog', name: '>', volatility: 'immutable' }, { schema: 'pg_catalog', name: '<', volatility: 'immutable' }, { schema: 'hr', name: '<', volatility: 'immutable' }] });
  expect(reads(cat, 'outer').lookups).toEqual({
    functions: [{ schema: 'public', name: 'd' }, { schema: 'public', name: 'inner_fn' }, { schema: 'public', name: 'upper' }],
    operators: [{ schema: 'hr', name: '=' }, { schema: 'ops', name: '>' }, { schema: 'public', name: '=' }, { schema: 'public', name: '>' }],
  });
  // In the statement: `outer` and `>` through the reader's path, `public.d` and `OPERATOR(hr.<)` in their schemas.
  const a = analyzeSql('SELECT outer(dept_id) AS o FROM dept WHERE dept_id OPERATOR(hr.<) 1 AND public.d() > 0', cat);
  expect(a.ok && a.resolvedNames).toEqual({
    functions: ['outer'],
    operators: ['>'],
    qualifiedFunctions: [{ schema: 'public', name: 'd' }, { schema: 'public', name: 'inner_fn' }, { schema: 'public', name: 'upper' }],
    qualifiedOperators: [{ schema: 'hr', name: '<' }, { schema: 'hr', name: '=' }, { schema: 'ops', name: '>' }, { schema: 'public', name: '=' }, { schema: 'public', name: '>' }],
  });
});

test('a view adds the relations behind it', () => {
  const cat = catalog([sqlFn('public', 'fv', 'SELECT emp_id FROM v_emp')]);
  expect(reads(cat, 'fv').relations).toEqual([{ schema: 'public', name: 'employee' }, { schema: 'public', name: 'v_emp' }]);
});

test('a SQL-standard body follows its dependency records', () => {
  const cat = catalog([
    { schema: 'public', name: 'atomic', language: 'sql', securityDefiner: false, config: null, owner: 'o', depends: { relations: [{ schema: 'hr', name: 'employee' }], functions: [{ schema: 'public', name: 'd' }, { schema: 'pg_catalog', name: 'upper' }], unsafeTypes: false } },
    sqlFn('public', 'd', 'SELECT dept_id FROM dept'),
  ]);
  expect(reads(cat, 'atomic').relations).toEqual([{ schema: 'hr', name: 'employee' }, { schema: 'public', name: 'dept' }]);
});

test.each([
  ['another language', [{ schema: 'public', name: 'f', language: 'plpgsql', securityDefiner: false, config: null, owner: 'o' }], 'runs code InterLock cannot analyse (LANGUAGE plpgsql)'],
  ['an uncatalogued relation', [sqlFn('public', 'f', 'SELECT 1 FROM nowhere')], 'reads a relation that is not in the source catalogue'],
  ['a system catalogue', [sqlFn('public', 'f', 'SELECT relname FROM pg_class')], 'reads the system catalogue pg_catalog.pg_class'],
  ['a refused built-in', [sqlFn('public', 'f', "SELECT pg_read_file('/etc/passwd')")], 'calls pg_catalog.pg_read_file, which reads server files or configuration'],
  ['a write', [sqlFn('public', 'f', 'DELETE FROM employee')], 'runs a statement other than SELECT'],
  ['an unparsable body', [sqlFn('public', 'f', 'SELEC 1')], 'has a body InterLock cannot analyse'],
  ['an opaque callee', [sqlFn('public', 'f', 'SELECT g()'), { schema: 'public', name: 'g', language: 'c', securityDefiner: false, config: null, owner: 'o' }], 'calls public.g, which runs code InterLock cannot analyse (LANGUAGE c)'],
] as Array<[string, CatalogRoutine[], string]>)('opaque: %s', (_what, routines, why) => {
  expect(reads(catalog(routines), 'f')).toMatchObject({ relations: [], opaque: why });
});

test('a catalogue scanned before body facts existed makes every user function opaque', () => {
  expect(reads(catalog(undefined, { functions: [{ schema: 'public', name: 'f', volatility: 'stable', returnsSet: false }] }), 'f').opaque).toMatch(/rescan it/);
});

test('the analysis reports what the user functions it runs may read, only when there are some', () => {
  const cat = catalog([sqlFn('public', 'f', 'SELECT ssn FROM employee WHERE emp_id = $1'), sqlFn('public', 'twice', 'SELECT $1 * 2')]);
  const a = analyzeSql('SELECT f(1), twice(2)', cat);
  expect(a.ok && a.functionReads).toEqual([
    { schema: 'public', name: 'f', relations: [{ schema: 'public', table: 'employee' }] },
    { schema: 'public', name: 'twice', relations: [] },
  ]);
  const b = analyzeSql('SELECT upper(ssn) FROM employee', cat);
  expect(b.ok && 'functionReads' in b).toBe(false);
});

test('a user operator a string body may use is followed, named or implied (IN, simple CASE, USING)', () => {
  const spy = (body: string) =>
    catalog([sqlFn('public', 'f', body), sqlFn('public', 'op_fn', 'SELECT ssn FROM employee')], {
      operatorCode: [['public', '=', 25, 25, 'public', 'op_fn']],
      operators: [{ schema: 'public', name: '=', volatility: 'stable' }, { schema: 'pg_catalog', name: '=', volatility: 'immutable' }],
    });
  for (const body of ["SELECT $1 = 'x'", "SELECT $1 IN (SELECT 'x')", "SELECT CASE $1 WHEN 'x' THEN 1 END", 'SELECT 1 FROM dept a JOIN dept b USING (dept_id)']) {
    const cat = spy(body);
    expect([body, reads(cat, 'f').relations]).toEqual([body, expect.arrayContaining([{ schema: 'public', name: 'employee' }])]);
  }
});

describe('red team rt41b', () => {
  test("F1: a string body's parameter defaults (dependency records) count; a snapshot without them is opaque", () => {
    const cat = catalog([
      sqlFn('public', 'echo', 'SELECT $1', { depends: { relations: [], functions: [{ schema: 'public', name: 'ssn_of' }], unsafeTypes: false } }),
      sqlFn('public', 'ssn_of', 'SELECT ssn FROM employee WHERE emp_id = $1'),
      { schema: 'public', name: 'old', language: 'sql', securityDefiner: false, config: null, owner: 'o', source: 'SELECT $1' },
    ]);
    expect(reads(cat, 'echo').relations).toEqual([{ schema: 'public', name: 'employee' }]);
    expect(reads(cat, 'old')).toMatchObject({ relations: [], opaque: expect.stringMatching(/rescan it/) });
  });

  test('F4: a string body whose parameter or result type runs user code is opaque', () => {
    const cat = catalog([sqlFn('public', 'f', 'SELECT $1', { depends: { relations: [], functions: [], unsafeTypes: true } })]);
    expect(reads(cat, 'f')).toMatchObject({ relations: [], opaque: 'uses a type whose input runs user code' });
  });

  test("F2: an unpinned SECURITY DEFINER body resolves names on the reader's path and with the owner's schema first", () => {
    const cat = catalog([
      sqlFn('public', 'def', 'SELECT 1 FROM employee', { securityDefiner: true, owner: 'hr' }),
      sqlFn('public', 'inv', 'SELECT 1 FROM employee', { owner: 'hr' }),
    ]);
    expect(reads(cat, 'def').relations).toEqual([{ schema: 'hr', name: 'employee' }, { schema: 'public', name: 'employee' }]);
    expect(reads(cat, 'inv').relations).toEqual([{ schema: 'public', name: 'employee' }]);
  });
});

describe('task hcast: user code attached to types (casts, btree/hash operator classes)', () => {
  const tagged = (routines: CatalogRoutine[], typeCode: NonNullable<SourceCatalog['typeCode']>): SourceCatalog => {
    const cat = catalog(routines, { typeCode });
    cat.relations.push({ schema: 'public', name: 'things', kind: 'table', columns: [{ name: 'id', dataType: 'integer', typeOid: 23 }, { name: 'v', dataType: 'tag', typeOid: 9001 }] });
    return cat;
  };
  const leak = sqlFn('public', 'tag_cmp', 'SELECT 0 FROM employee', { depends: { relations: [], functions: [], unsafeTypes: false, types: [9001] } });
  const fnsOf = (cat: SourceCatalog, sql: string) => {
    const a = analyzeSql(sql, cat);
    if (!a.ok) throw new Error(a.message);
    return (a.functionReads ?? []).map((f) => [`${f.schema}.${f.name}`, f.relations.map((r) => `${r.schema}.${r.table}`), f.opaque ?? null]);
  };

  test('a column of the type, a cast to it or a function over it runs the attached code; other columns do not', () => {
    const uses = sqlFn('public', 'uses_tag', 'SELECT 1', { depends: { relations: [], functions: [], unsafeTypes: false, types: [9001] } });
    const cat = tagged([leak, uses], [[9001, 'public', 'tag', 'public', 'tag_cmp', false]]);
    expect(fnsOf(cat, 'SELECT v FROM things ORDER BY v')).toEqual([['public.tag_cmp', ['public.employee'], null]]);
    expect(fnsOf(cat, "SELECT 'x'::tag AS t")).toEqual([['public.tag_cmp', ['public.employee'], null]]);
    expect(reads(cat, 'uses_tag').relations).toEqual([{ schema: 'public', name: 'employee' }]);
    expect(fnsOf(cat, 'SELECT id FROM things')).toEqual([]);
  });

  test('a user cast between two built-in types runs in every statement; an opaque attached function is reported opaque', () => {
    const c = { schema: 'public', name: 'int_to_text', language: 'c', securityDefiner: false, config: null, owner: 'owner' } as CatalogRoutine;
    const cat = tagged([c], [[23, 'pg_catalog', 'int4', 'public', 'int_to_text', true]]);
    expect(fnsOf(cat, 'SELECT 1 AS x')).toEqual([['public.int_to_text', [], 'runs code InterLock cannot analyse (LANGUAGE c)']]);
  });

  test('a function scanned without its type dependencies beside attached code is opaque until a rescan', () => {
    const old = sqlFn('public', 'old', 'SELECT 1');
    const cat = tagged([leak, old], [[9001, 'public', 'tag', 'public', 'tag_cmp', false]]);
    expect(reads(cat, 'old').opaque).toBe('has no recorded type facts (the source was scanned before InterLock analysed code attached to types; rescan it)');
  });
});

describe('task hf5: the user functions an analysis assumed', () => {
  test('a call lists itself and every user function it reaches; the analysis lists them once, sorted', () => {
    const cat = catalog([
      sqlFn('public', 'outer_f', 'SELECT inner_f($1) || upper(\'x\')'),
      sqlFn('public', 'inner_f', 'SELECT ssn FROM employee WHERE emp_id = $1'),
      sqlFn('public', 'twice', 'SELECT $1 * 2'),
    ]);
    expect(reads(cat, 'outer_f').functions).toEqual([{ schema: 'public', name: 'inner_f' }, { schema: 'public', name: 'outer_f' }]);
    const a = analyzeSql('SELECT outer_f(1), twice(2), inner_f(3)', cat);
    expect(a.ok && a.userFunctions).toEqual([{ schema: 'public', name: 'inner_f' }, { schema: 'public', name: 'outer_f' }, { schema: 'public', name: 'twice' }]);
    // No user function: no list (and no guard on the read).
    const b = analyzeSql('SELECT upper(ssn) FROM employee', cat);
    expect(b.ok && 'userFunctions' in b).toBe(false);
  });

  test('a view read lists the user functions its definition calls (the server\'s records), with what they call', () => {
    const cat = catalog([sqlFn('public', 'vf', 'SELECT inner_f($1)'), sqlFn('public', 'inner_f', 'SELECT $1')], {});
    cat.relations.push({ schema: 'public', name: 'v_f', kind: 'view', columns: [col('x')], definition: 'SELECT vf(emp_id) AS x FROM employee', view: { reads: [{ schema: 'public', name: 'employee', kind: 'table' }], userCode: ['public.vf'], securityBarrier: false, securityInvoker: false } });
    const a = analyzeSql('SELECT x FROM v_f', cat);
    expect(a.ok && a.userFunctions).toEqual([{ schema: 'public', name: 'inner_f' }, { schema: 'public', name: 'vf' }]);
  });
});

test('SQL/JSON syntax in a string body (red team rt46a J1): a call of the same-named function on a server that reads it so, the construct on one that does not', () => {
  const helper = sqlFn('public', 'json_value', 'SELECT ssn FROM employee LIMIT 1');
  const body = sqlFn('public', 'f', "SELECT JSON_VALUE('a', 'b')");
  const legacy = sqlFn('public', 'g', "SELECT json_object('a', 'b')");
  const helperObject = sqlFn('public', 'json_object', 'SELECT ssn FROM employee LIMIT 1');
  // PostgreSQL 15 calls public.json_value: its reads are the body's.
  const pg15 = catalog([helper, body, legacy, helperObject], { serverVersionNum: 150004 });
  expect(reads(pg15, 'f').relations).toEqual([{ schema: 'public', name: 'employee' }]);
  expect(reads(pg15, 'f').lookups.functions).toEqual([{ schema: 'public', name: 'json_value' }]);
  expect(reads(pg15, 'g').relations).toEqual([{ schema: 'public', name: 'employee' }]);
  // Not recorded (a snapshot from before versions were recorded): judged as the older server.
  expect(reads(catalog([helper, body], {}), 'f').relations).toEqual([{ schema: 'public', name: 'employee' }]);
  // IS JSON on such a server is no call at all: opaque.
  expect(reads(catalog([sqlFn('public', 'h', "SELECT 'a' IS JSON")], { serverVersionNum: 150004 }), 'h').opaque).toMatch(/IS JSON/);
  // PostgreSQL 17 reads the constructs (JSON_OBJECTAGG's `constructor` field is a tree key, not syntax).
  const pg17 = catalog([helper, body, legacy, sqlFn('public', 'k', "SELECT JSON_OBJECTAGG('a' VALUE 1)")], { serverVersionNum: 170002 });
  expect(reads(pg17, 'f')).toEqual({ relations: [], opaque: null, securityDefiner: false, functions: [{ schema: 'public', name: 'f' }], lookups: { functions: [], operators: [] } });
  expect(reads(pg17, 'g').relations).toEqual([]);
  expect(reads(pg17, 'k')).toEqual({ relations: [], opaque: null, securityDefiner: false, functions: [{ schema: 'public', name: 'k' }], lookups: { functions: [], operators: [] } });
});
