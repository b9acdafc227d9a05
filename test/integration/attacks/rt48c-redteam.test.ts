/**
 * Red team rt48c (2026-12-07): after j3b (qualify-sql.ts), what InterLock's own statements on source
 * connections still resolve through the connection role's search_path. Attacker: an insider with
 * CREATE on a schema of the reader's or writer's path (public), as in rt47b J3/J3b. Real PostgreSQL,
 * loopback only. Each test is one attack; its name says whether it is a finding (severity, fixed or
 * open) or an attack that held.
 *
 *   K1 high, fixed: the masking wrapper (src/sql/mask-sql.ts maskExpression), which InterLock adds around
 *      the agent's read whenever a column is masked, was not in the parse-tree test and compared with
 *      unqualified operators and casts: the `partial` mask's `d.oid = pg_catalog.pg_typeof(…)` is oid =
 *      regtype, for which pg_catalog has no exact operator, so an insider's public.= (oid, regtype) won
 *      and ran as the reader on every read of a partially masked column (its answer decided which mask
 *      form the agent got; shown: customer 1's partial mask became `***`); the function guard checks
 *      only the names of the agent's own statement. `'***'::text`, `NULL::text` and the wrapper's `=`,
 *      `>`, `<=`, `+`, `/` resolved a domain public.text or an exact-match operator in public under a
 *      path `public, pg_catalog`. Fixed: every operator and type of the wrapper is pinned to
 *      pg_catalog; the wrapper (all four methods) is in test/unit/sources/qualified-statements.test.ts.
 *   K2 high, fixed: `interlock source drop-row-views` (src/control/row-views.ts) ran three statements
 *      as the source's WRITER that never went through qualifySql: `d.refclassid = 'pg_class'::regclass`
 *      is oid = regclass (no exact operator in pg_catalog), so an insider's public.= (oid, regclass) ran
 *      as the writer (shown: it recorded the writer role) and could write whatever the writer may;
 *      `'pg_class'::regclass` itself is looked up on the path (a table public.pg_class under `public,
 *      pg_catalog`), and so were pg_class, pg_depend, pg_rewrite and pg_namespace. Fixed: the
 *      statements go through qualifySql, the regclass literals name pg_catalog, and both are in the
 *      parse-tree test; unqualifiedNames now also names a `'…'::regclass` (regtype, regproc, regoper,
 *      … of a one-part name) whose text input resolves through the path.
 *   K3 high, fixed: a caller with row rules reads a view over a ruled table through its copy in
 *      interlock_rows (src/pipeline/row-rules.ts rowViewStatements), made by the writer from the view's
 *      definition as the catalogue scan printed it (pg_get_viewdef, names relative to the path). Made
 *      after the scan, that text is parsed again: a polymorphic or coerced built-in it names
 *      unqualified (`array_length(ARRAY[…], 1)`, `arr @> ARRAY[1]`, `::text` under `public,
 *      pg_catalog`) resolves to an insider's exact match created since (public.array_length(integer[],
 *      integer)), which then ran as the reader on every read through the copy (shown: its answer 42
 *      in every row); the function guard checks only the agent's own names. Fixed: the copy's DO block
 *      refuses a copy that depends (pg_depend) on a function, operator, type or collation its original
 *      does not (row_rules_unavailable until a scan prints the name qualified; the next copy is then
 *      pg_catalog's); and on a relation outside interlock_rows its original does not (a bare table
 *      name printed for a path `public, app` that a table public.<name> made since would take: by
 *      reading, no test).
 *   K4 medium, fixed: interlock_discover's row filter for a caller with row rules
 *      (src/tools/handlers/discover.ts) sends two statements of its own on the reader connection:
 *      the ids through the row views (`(id)::text`) and ambiguousIds (`count(*)::int`, `(id)::text`,
 *      `count(*) > 1`, `x.k ~ '…'`), none in the parse-tree test. Under a reader path `public,
 *      pg_catalog` (the database owner's ALTER ROLE, rt47b's model) an insider's domain public.text
 *      ran its CHECK as the reader on every row of the mapped table (shown: it recorded the reader
 *      role), and a public.count(*) aggregate or an exact-match operator would have been used too.
 *      Fixed: rowIdSql and ambiguousIdsSql pin them to pg_catalog and are in the parse-tree test.
 *   K5 low, fixed: a row view's predicate casts a bound attribute to a user type by the bare name
 *      format_type printed for the scan's path (pinnedType pins built-ins only). With a reader path
 *      `public, app`, a column of domain app.label and an insider's domain public.label (CHECK calling
 *      its function) made after the scan, a row view first made after it cast to public.label, and its
 *      CHECK ran as the reader on every ruled read (shown: the read failed on the CHECK's exception).
 *      It needs a schema before the type's on the path that the insider may create in, and a row view
 *      first made after the insider acts (its name hashes the predicate's text). Fixed: the row view's
 *      DO block refuses a view that depends on a function, operator, type or collation other than its
 *      table's columns' types (and their arrays, collations and cast functions): row_rules_unavailable
 *      until a rescan prints app.label. A user type named like a built-in (public.uuid under `public,
 *      pg_catalog`) is cast to pg_catalog's: the view fails (no operator) unless it is a domain over
 *      it: fails closed (held, by reading).
 * Open, low (by reading, no test): the mapped tables of discovery cast their columns to
 * pg_catalog.text / timestamptz and call to_jsonb, and the row predicate casts to a column's user
 * type: a column of a type the insider owns could carry the insider's cast or domain CHECK (CREATE
 * CAST and ALTER DOMAIN need the type's ownership), a trust the table's owner gave by using that type.
 * Held (by reading and the existing suites): ORDER BY / DISTINCT / GROUP BY / LEAST / GREATEST find their
 * operators through the type's default btree or hash operator class, which only a superuser can create
 * (CREATE OPERATOR CLASS); LOCK TABLE names are schema-qualified and quoted (hook-guard.ts lockSql); every
 * set_config is pg_catalog.set_config; the row-rule rewrite of the agent's text adds only
 * `interlock_rows."…"` relation names; row views' predicates are qualified (j3b).
 */
import { randomBytes } from 'node:crypto';
import { applyMask } from '../../../src/sql/redaction';
import { scanSource } from '../../../src/control/scan';
import { dropRowViews } from '../../../src/control/row-views';
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { startPublicInsider, stopInsider, type Insider } from '../../helpers/stale-reads';
import { ambiguousIdsSql, rowIdSql } from '../../../src/tools/handlers/discover';
import { withInsiderDatabase } from '../../helpers/insider-db';
import { codeOf, REP1_CUSTOMERS, REP_ROLE, rowsOf as fixtureRows, startRowFixture, type RowFixture } from '../../helpers/row-rules';

jest.setTimeout(120_000);

let env: GovernedEnv;
let x: Insider;

beforeAll(async () => {
  env = await startGovernedEnv();
  x = await startPublicInsider(env, 'rt48c');
  await sourceQuery(env, 'CREATE TABLE public.rt48c_t (id int PRIMARY KEY)');
});
afterAll(async () => {
  await stopInsider(x, 'DROP TABLE IF EXISTS public.rt48c_evidence, public.rt48c_t');
  await env?.close();
});

/** The rows of interlock_query `sql` on chinook as demo-agent, once the catalogue is current (a catalog_stale answer is read again). */
async function rowsOf(sql: string): Promise<Array<Record<string, unknown>>> {
  for (let i = 0; ; i++) {
    const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql }, env.apiKey);
    expect(r.status).toBe(200);
    const sc = r.body.result.structuredContent;
    if (!r.body.result.isError) return sc.rows;
    if (sc.code !== 'catalog_stale' || i >= 20) throw new Error(`refused: ${JSON.stringify(sc)}`);
    await scanSource(env.db, 'chinook');
    env.gateway.store.invalidate('*');
  }
}

// Shown failing before the fix: email was '***' (the insider's operator answered true for "is the value's type boolean, json or an array").
describe('rt48c K1 (high, fixed): the masking wrapper InterLock adds around a read', () => {
  test("finding K1: an insider's public.= (oid, regtype) does not run as the reader in the partial mask", async () => {
    const sql = 'SELECT customer_id, email FROM customer ORDER BY customer_id LIMIT 1';
    const raw = (await sourceQuery<{ email: string }>(env, 'SELECT email FROM customer ORDER BY customer_id LIMIT 1'))[0].email;
    expect(await rowsOf(sql)).toEqual([{ customer_id: 1, email: applyMask(raw, 'partial') }]);
    await x.insider.query(`CREATE FUNCTION public.rt48c_eq(a oid, b regtype) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
      CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regtype, FUNCTION = public.rt48c_eq)`);
    try {
      await scanSource(env.db, 'chinook');
      env.gateway.store.invalidate('*');
      expect(await rowsOf(sql)).toEqual([{ customer_id: 1, email: applyMask(raw, 'partial') }]);
    } finally {
      await x.insider.query('DROP OPERATOR public.= (oid, regtype); DROP FUNCTION public.rt48c_eq(oid, regtype)');
    }
  });
});

// Shown failing before the fix: evidence held the writer role once per pg_depend row the recursive step compared.
describe('rt48c K2 (high, fixed): `interlock source drop-row-views --table` as the writer', () => {
  test("finding K2: an insider's public.= (oid, regclass) does not run as the writer", async () => {
    await x.insider.query(`CREATE FUNCTION public.rt48c_eqc(a oid, b regclass) RETURNS boolean LANGUAGE sql VOLATILE AS $$
        INSERT INTO public.rt48c_evidence SELECT current_user;
        SELECT a OPERATOR(pg_catalog.=) b::pg_catalog.oid $$;
      CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regclass, FUNCTION = public.rt48c_eqc)`);
    try {
      const dropped = await dropRowViews(env.db, env.demo.sourceId, { table: 'public.rt48c_t' });
      const evidence = await sourceQuery<{ who: string }>(env, 'SELECT DISTINCT who FROM public.rt48c_evidence');
      expect({ dropped, evidence }).toEqual({ dropped: { sourceId: env.demo.sourceId, dropped: [] }, evidence: [] });
    } finally {
      await x.insider.query('DROP OPERATOR public.= (oid, regclass); DROP FUNCTION public.rt48c_eqc(oid, regclass)');
    }
  });
});

// Shown failing before the fix: the rows were served with n = 42 for every customer (the insider's array_length in the copy).
describe('rt48c K3 (high, fixed): a view\'s copy in interlock_rows is its definition text, parsed again when the copy is made', () => {
  let fx: RowFixture;
  const A = { employee_id: 1 };
  const ins = `rt48c_k3_${randomBytes(4).toString('hex')}`;
  beforeAll(async () => {
    fx = await startRowFixture('CREATE VIEW rt48c_lens AS SELECT customer_id, array_length(ARRAY[customer_id, 0], 1) AS n FROM customer;');
    fx.grant('rep', [{ name: 'rep', statements: [...REP_ROLE.statements, { effect: 'allow', action: 'read', resource: 'public.rt48c_lens' }] }]);
  });
  afterAll(async () => {
    for (const sql of ['RESET ROLE', 'DROP FUNCTION IF EXISTS public.array_length(integer[], integer)', `DROP OWNED BY ${ins}`]) await fx?.admin(sql).catch(() => undefined);
    await fx?.close();
    await sourceQuery(env, `DROP ROLE IF EXISTS ${ins}`).catch(() => undefined);
  });

  test("finding K3: an insider's public.array_length(integer[], integer), created after the scan, is not in the copy read as the reader", async () => {
    for (const sql of [`CREATE ROLE ${ins}`, `GRANT CREATE ON SCHEMA public TO ${ins}`, `SET ROLE ${ins}`, "CREATE FUNCTION public.array_length(a integer[], b integer) RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT 42'", 'RESET ROLE']) await fx.admin(sql);
    const read = async () => {
      const out = await fx.call('rep', A, 'SELECT customer_id, n FROM rt48c_lens ORDER BY 1');
      return out.kind === 'result' ? fixtureRows(out) : codeOf(out);
    };
    // The copy would resolve array_length to the insider's: it is not made, and the read is refused.
    expect(await read()).toBe('row_rules_unavailable');
    const dependents = async () => (await fx.admin<{ n: number }>("SELECT count(*)::int AS n FROM pg_catalog.pg_depend WHERE refobjid = 'public.array_length(integer[], integer)'::pg_catalog.regprocedure"))[0].n;
    expect(await dependents()).toBe(0);
    // A scan prints the name qualified (pg_catalog.array_length): the new copy reads pg_catalog's.
    await fx.rescan();
    expect(await read()).toEqual(REP1_CUSTOMERS.map((customer_id) => ({ customer_id, n: 2 })));
    expect(await dependents()).toBe(0);
  });
});

// Shown failing before the fix: loot held the reader role and the secret row (the domain's CHECK ran for each id cast to `text`).
describe('rt48c K4 (medium, fixed): discovery\'s row-filter statements on the reader connection', () => {
  test("finding K4: with the reader's path `public, pg_catalog`, an insider's domain public.text does not run as the reader", async () => {
    const insiderSql = [
      `CREATE FUNCTION public.spy(x pg_catalog.text) RETURNS boolean LANGUAGE sql VOLATILE AS $$ INSERT INTO public.loot SELECT current_user, x; SELECT true $$`,
      'CREATE DOMAIN public.text AS pg_catalog.text CHECK (public.spy(VALUE))',
    ];
    const r = { relation: 'public.secret', schema: 'public', table: 'secret', idColumn: 'v', columns: ['v'] };
    const { result, loot } = await withInsiderDatabase('rt48c_k4', insiderSql, 'public, pg_catalog', async ({ connectReader }) => {
      const c = await connectReader();
      try {
        return { ids: (await c.query(rowIdSql(r))).rows, ambiguous: (await c.query(ambiguousIdsSql(r))).rows };
      } finally {
        await c.end();
      }
    });
    expect({ result, loot }).toEqual({ result: { ids: [{ interlock_row_id: 'only the reader may read this' }], ambiguous: [] }, loot: [] });
  });
});

// Shown failing before the fix: the read answered tool_execution_failed (the insider's domain CHECK raised in the ruled read, in the row view).
describe('rt48c K5 (low, fixed): a row view\'s predicate casts to a user type by the name the scan printed', () => {
  let fx: RowFixture;
  const ins = `rt48c_k5_${randomBytes(4).toString('hex')}`;
  beforeAll(async () => {
    fx = await startRowFixture('CREATE SCHEMA app; CREATE DOMAIN app.label AS text; CREATE TABLE public.tagged (id int PRIMARY KEY, owner app.label); INSERT INTO public.tagged VALUES (1, \'ann\'), (2, \'bob\');');
    for (const sql of [`GRANT USAGE ON SCHEMA app TO "${fx.reader}", "${fx.writer}"`, `GRANT SELECT ON public.tagged TO "${fx.reader}"`, `ALTER ROLE "${fx.reader}" SET search_path = public, app`]) await fx.admin(sql);
    await fx.rescan();
    fx.grant('owner', [{ name: 'owner', statements: [{ effect: 'allow', action: 'read', resource: 'public.tagged', rows: 'owner = identity.name' }] }]);
  });
  afterAll(async () => {
    for (const sql of ['RESET ROLE', 'DROP DOMAIN IF EXISTS public.label', 'DROP FUNCTION IF EXISTS public.rt48c_spy(text)', `DROP OWNED BY ${ins}`]) await fx?.admin(sql).catch(() => undefined);
    await fx?.close();
    await sourceQuery(env, `DROP ROLE IF EXISTS ${ins}`).catch(() => undefined);
  });

  test("finding K5: an insider's domain public.label, made after the scan (path public, app), is not the row view's cast", async () => {
    expect(fx.catalog.searchPath).toEqual(['public', 'app']);
    for (const sql of [
      `CREATE ROLE ${ins}`,
      `GRANT CREATE ON SCHEMA public TO ${ins}`,
      `SET ROLE ${ins}`,
      "CREATE FUNCTION public.rt48c_spy(x text) RETURNS boolean LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'insider ran as %', current_user; END$$",
      'CREATE DOMAIN public.label AS text CHECK (public.rt48c_spy(VALUE))',
      'RESET ROLE',
    ]) await fx.admin(sql);
    const read = async () => {
      const out = await fx.call('owner', { name: 'ann' }, 'SELECT id FROM tagged ORDER BY 1');
      return out.kind === 'result' ? fixtureRows(out) : codeOf(out);
    };
    expect(await read()).toBe('row_rules_unavailable');
    // A scan prints the column's type qualified (app.label): the next row view casts to it.
    await fx.rescan();
    expect(await read()).toEqual([{ id: 1 }]);
  });
});
