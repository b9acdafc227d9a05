/**
 * The function guard (task hf5; src/sources/postgres/function-guard.ts): run in the read's own round
 * trip, it lets the statement run only while every user function named is the one the catalogue
 * scan recorded (pg_proc `oid:xmin` of every overload). CREATE OR REPLACE, ALTER FUNCTION, DROP +
 * CREATE and a new overload all trip it: the read resolves with `functionsChanged` and no rows, the
 * statement never executed. A snapshot without versions (scanned before) always trips it.
 */
import { PostgresSourceConnector } from '../../../src/sources/postgres/connector';
import { scanCatalog } from '../../../src/sources/postgres/catalog';
import { standaloneGuard } from '../../../src/sources/postgres/hierarchy';
import type { SourceCatalog } from '../../../src/sql/catalog-types';
import { Client } from 'pg';
import { createSourceDb, type SourceDb } from './source-db';

const BIG = { maxRows: 1000, maxBytes: 10_000_000 };
let src: SourceDb;
let c: PostgresSourceConnector;
const FN = [{ schema: 'public', name: 'fg' }];

beforeAll(async () => {
  src = await createSourceDb('function_guard', {
    extraSql: `CREATE TABLE flat (id int); INSERT INTO flat VALUES (1), (2);
      CREATE FUNCTION fg(i int) RETURNS int LANGUAGE sql STABLE AS $$ SELECT i * 2 $$;`,
  });
  await src.admin.query(`GRANT SELECT ON flat TO ${src.readerRole}`);
  c = new PostgresSourceConnector('fguarded', src.settings({ pool_size: 1, max_concurrent_per_identity: 1 }));
});
afterAll(async () => {
  await c?.close();
  await src?.drop();
});

/** A fresh snapshot of the source as its reader scans it. */
const scan = (): Promise<SourceCatalog> => c.withReader((client) => scanCatalog(client));

/** The read's outcome under the function guard of `fns` against `cat`: the rows, or 'changed'. */
async function guarded(cat: SourceCatalog, sql = 'SELECT fg(21) AS n', fns = FN): Promise<unknown> {
  const r = await c.read(sql, [], { ...BIG, functionGuard: c.functionGuard(cat, { userFunctions: fns })! });
  return r.functionsChanged ? { changed: true, rows: r.rowsArray, fields: r.fields } : r.rowsArray;
}

test('the scan records each overload version; no user function means no guard', async () => {
  const cat = await scan();
  expect(cat.routines?.find((r) => r.name === 'fg')?.version).toMatch(/^[0-9]+:[0-9]+$/);
  expect(c.functionGuard(cat, { userFunctions: [] })).toBeNull();
  expect(c.functionGuard(cat, undefined)).toBeNull();
});

test('an unchanged function passes; a replaced, altered, recreated or overloaded one trips the guard before the statement', async () => {
  const undo = 'CREATE OR REPLACE FUNCTION fg(i int) RETURNS int LANGUAGE sql STABLE AS $$ SELECT i * 2 $$';
  for (const change of [
    'CREATE OR REPLACE FUNCTION fg(i int) RETURNS int LANGUAGE sql STABLE AS $$ SELECT i * 3 $$',
    'ALTER FUNCTION fg(int) SECURITY DEFINER',
    'ALTER FUNCTION fg(int) SET search_path = public',
    `DROP FUNCTION fg(int); ${undo}`,
    'CREATE FUNCTION fg(t text) RETURNS int LANGUAGE sql STABLE AS $$ SELECT 1 $$',
  ]) {
    const cat = await scan();
    expect(await guarded(cat)).toEqual([[42]]);
    await src.admin.query(change);
    // The statement would fail with 22P02 if it ran: the guard's error comes first and the server skips it.
    expect([change, await guarded(cat, "SELECT 'not a number'::int AS x")]).toEqual([change, { changed: true, rows: [], fields: [] }]);
    await src.admin.query(`DROP FUNCTION IF EXISTS fg(text); DROP FUNCTION fg(int); ${undo}`);
  }
  // The connection is clean afterwards, and a fresh snapshot passes again.
  expect(await guarded(await scan())).toEqual([[42]]);
});

test('a function dropped since the scan trips it; one absent then and now passes', async () => {
  const cat = await scan();
  await src.admin.query('DROP FUNCTION fg(int)');
  try {
    expect(await guarded(cat, 'SELECT 1 AS one')).toEqual({ changed: true, rows: [], fields: [] });
    expect(await guarded(cat, 'SELECT 1 AS one', [{ schema: 'public', name: 'never_there' }])).toEqual([[1]]);
  } finally {
    await src.admin.query('CREATE FUNCTION fg(i int) RETURNS int LANGUAGE sql STABLE AS $$ SELECT i * 2 $$');
  }
});

test('a snapshot without versions (scanned before hf5) always trips it', async () => {
  const cat = await scan();
  const old: SourceCatalog = { ...cat, routines: cat.routines!.map(({ version: _v, ...r }) => r) };
  expect(await guarded(old)).toEqual({ changed: true, rows: [], fields: [] });
  const none: SourceCatalog = { ...cat, routines: undefined };
  expect(await guarded(none)).toEqual({ changed: true, rows: [], fields: [] });
});

test('beside the hierarchy guard: each trips on its own, and the function guard is told apart', async () => {
  const cat = await scan();
  const both = { ...BIG, functionGuard: c.functionGuard(cat, { userFunctions: FN })!, guard: standaloneGuard([{ schema: 'public', name: 'flat' }]) };
  expect((await c.read('SELECT fg(id) AS n FROM flat ORDER BY id', [], both)).rowsArray).toEqual([[2], [4]]);
  await src.admin.query('ALTER FUNCTION fg(int) COST 7');
  const r = await c.read('SELECT fg(id) AS n FROM flat ORDER BY id', [], both);
  expect({ changed: r.functionsChanged, tripped: r.guardTripped, rows: r.rowsArray }).toEqual({ changed: true, tripped: undefined, rows: [] });
});

test('names (tasks hg1, hg2): a new same-named function or operator in a schema of the reader\'s path trips it; one off the path, a procedure or another session\'s temporary one does not', async () => {
  const names = { resolvedNames: { functions: ['lower'], operators: ['='] } };
  const read = async (cat: SourceCatalog): Promise<unknown> => {
    const r = await c.read("SELECT lower('A') = 'a' AS ok", [], { ...BIG, functionGuard: c.functionGuard(cat, names)! });
    return r.functionsChanged ? 'changed' : r.rowsArray;
  };
  const cat = await scan();
  expect(cat.searchPath).toEqual(['public']);
  expect(await read(cat)).toEqual([[true]]);
  const other = new Client({ connectionString: src.db.url });
  await other.connect();
  try {
    await src.admin.query('CREATE SCHEMA IF NOT EXISTS off_path; CREATE PROCEDURE public.lower(varchar) LANGUAGE sql AS $$ SELECT 1 $$');
    await other.query("CREATE FUNCTION pg_temp.lower(varchar) RETURNS text LANGUAGE sql AS $$ SELECT 'x' $$; CREATE FUNCTION pg_temp.teq(varchar, varchar) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$; CREATE OPERATOR pg_temp.= (leftarg = varchar, rightarg = varchar, function = pg_temp.teq)");
    expect(await read(cat)).toEqual([[true]]);
    for (const [change, undo, after] of [
      ['CREATE FUNCTION off_path.lower(text) RETURNS text LANGUAGE sql AS $$ SELECT $1 $$', 'DROP FUNCTION off_path.lower(text)', [[true]]],
      ['CREATE OPERATOR off_path.= (leftarg = text, rightarg = text, function = pg_catalog.texteq)', 'DROP OPERATOR off_path.= (text, text)', [[true]]],
      ['CREATE FUNCTION public.lower(text) RETURNS text LANGUAGE sql AS $$ SELECT $1 $$', 'DROP FUNCTION public.lower(text)', 'changed'],
      ['CREATE OPERATOR public.= (leftarg = text, rightarg = text, function = pg_catalog.texteq)', 'DROP OPERATOR public.= (text, text)', 'changed'],
    ] as const) {
      await src.admin.query(change);
      expect([change, await read(cat)]).toEqual([change, after]);
      await src.admin.query(undo);
      expect([undo, await read(cat)]).toEqual([undo, [[true]]]);
    }
  } finally {
    await other.end();
    await src.admin.query('DROP SCHEMA off_path CASCADE; DROP PROCEDURE IF EXISTS public.lower(varchar)');
  }
});

test('schemas (task hg2): a qualified name is compared in its schema, a user function in its own; the parameters name each schema', async () => {
  const cat = await scan();
  // Unqualified: the reader's path; qualified: the named schema; pg_catalog and information_schema never.
  const g = c.functionGuard(cat, { resolvedNames: { functions: ['lower'], operators: [], qualifiedFunctions: [{ schema: 'off "path', name: 'lower' }, { schema: 'pg_catalog', name: 'upper' }] } })!;
  expect(g.values).toEqual(['lower', '{"off \\"path","public"}']);
  expect(c.functionGuard(cat, { resolvedNames: { functions: [], operators: [], qualifiedFunctions: [{ schema: 'information_schema', name: '_pg_expandarray' }] } })).toBeNull();
  await src.admin.query('CREATE SCHEMA "off ""path"; CREATE SCHEMA other_off');
  try {
    const fn = { userFunctions: [{ schema: 'other_off', name: 'fg' }] };
    const one = async (names: object): Promise<unknown> => {
      const r = await c.read('SELECT 1 AS one', [], { ...BIG, functionGuard: c.functionGuard(cat, names)! });
      return r.functionsChanged ? 'changed' : r.rowsArray;
    };
    await src.admin.query('CREATE FUNCTION "off ""path".lower(varchar) RETURNS text LANGUAGE sql AS $$ SELECT $1 $$; CREATE FUNCTION public.fg(t text) RETURNS int LANGUAGE sql AS $$ SELECT 1 $$');
    expect(await one({ resolvedNames: { functions: ['lower'], operators: [] } })).toEqual([[1]]);
    expect(await one({ resolvedNames: { functions: [], operators: [], qualifiedFunctions: [{ schema: 'off "path', name: 'lower' }] } })).toEqual('changed');
    // userFunctions other_off.fg: public.fg's new overload is not there; one created in other_off is.
    expect(await one(fn)).toEqual([[1]]);
    await src.admin.query('CREATE FUNCTION other_off.fg(t text) RETURNS int LANGUAGE sql AS $$ SELECT 1 $$');
    expect(await one(fn)).toEqual('changed');
  } finally {
    await src.admin.query('DROP SCHEMA "off ""path" CASCADE; DROP SCHEMA other_off CASCADE; DROP FUNCTION IF EXISTS public.fg(text)');
  }
});
