/**
 * Integration: scanCatalog against real PostgreSQL (Chinook + test objects), then every corpus
 * statement and generated variant is replayed: each statement the analyser classifies as a read is
 * executed in `BEGIN READ ONLY` on the extended protocol and must succeed or fail WITHOUT changing
 * data or session state (checksums of every table, the sequence, large objects, advisory locks,
 * settings, listeners, prepared statements and cursors are compared before and after). For reads
 * that succeed, the result's field names must equal the analysed output names (redaction relies on
 * it). This double-checks the classifier against the real server.
 */
import fc from 'fast-check';
import { Client, Pool } from 'pg';
import { loadChinook } from '../../../src/demo/chinook';
import { scanCatalog } from '../../../src/sources/postgres/catalog';
import { analyzeSql, initSqlParser } from '../../../src/sql/analyze';
import type { SourceCatalog } from '../../../src/sql/catalog-types';
import { createTempDatabase, execSql, TempDatabase } from '../../helpers/pg';
import { CALL_CONTEXTS, CORPUS, DANGEROUS_CALLS, HIDDEN_WRITES, LEGIT, variantOf, WRITE_CONTEXTS } from '../../unit/sql/corpus';
import { CATALOG } from '../../unit/sql/helpers';

const SETUP = `
CREATE TABLE t (a int PRIMARY KEY, b text);
INSERT INTO t VALUES (1, 'x'), (2, 'y');
CREATE SEQUENCE s;
CREATE FUNCTION sidefx() RETURNS int LANGUAGE plpgsql VOLATILE AS $$
BEGIN INSERT INTO t VALUES ((SELECT coalesce(max(a), 0) + 1 FROM t), 'sidefx'); RETURN 1; END $$;
CREATE PROCEDURE p_commit() LANGUAGE plpgsql AS $$BEGIN COMMIT; END$$;
CREATE FUNCTION out_params(OUT p int, OUT q text) RETURNS SETOF record LANGUAGE sql STABLE AS $$ SELECT 1, 'a' $$;
CREATE FUNCTION stable_fn(x int) RETURNS int LANGUAGE sql STABLE AS 'SELECT x';
CREATE SCHEMA s;
CREATE TABLE s.t (x int, y text);
CREATE TABLE s.only_in_s (z int);
CREATE VIEW customer_view AS SELECT customer_id, email FROM customer;
CREATE TABLE "MixedCase" ("Id" int, id int);
CREATE MATERIALIZED VIEW mv AS SELECT 1 AS one;
CREATE TABLE parted (k int, v text) PARTITION BY RANGE (k);
CREATE TABLE dropped (a int, b int, c int);
ALTER TABLE dropped DROP COLUMN b;
CREATE FUNCTION sidefx_sfunc(int, int) RETURNS int LANGUAGE plpgsql VOLATILE AS $$
BEGIN INSERT INTO t VALUES ((SELECT coalesce(max(a), 0) + 1 FROM t), 'agg'); RETURN coalesce($1, 0) + $2; END $$;
CREATE AGGREGATE sneaky_sum(int) (sfunc = sidefx_sfunc, stype = int);
CREATE FUNCTION sidefx_check(int) RETURNS bool LANGUAGE plpgsql VOLATILE AS $$
BEGIN INSERT INTO t VALUES ((SELECT coalesce(max(a), 0) + 1 FROM t), 'check'); RETURN true; END $$;
CREATE DOMAIN checked_dom AS int CHECK (sidefx_check(VALUE));
CREATE DOMAIN plain_dom AS int;
CREATE DOMAIN derived_dom AS checked_dom;
CREATE TABLE with_dom (d checked_dom);
`;

let db: TempDatabase;
let client: Client;
let catalog: SourceCatalog;

beforeAll(async () => {
  await initSqlParser();
  db = await createTempDatabase('sqlcat');
  await loadChinook(db.url);
  await execSql(db.url, SETUP);
  client = new Client({ connectionString: db.url });
  await client.connect();
  catalog = await scanCatalog(client);
}, 120_000);

afterAll(async () => {
  await client?.end();
  await db?.drop();
});

describe('scanCatalog', () => {
  const rel = (schema: string, name: string) => catalog.relations.find((r) => r.schema === schema && r.name === name);

  test('relations of every non-system schema, with kinds, sorted by schema and name', () => {
    const names = catalog.relations.map((r) => `${r.schema}.${r.name}:${r.kind}`);
    expect(names).toEqual([
      'public.MixedCase:table',
      'public.album:table',
      'public.artist:table',
      'public.customer:table',
      'public.customer_view:view',
      'public.dropped:table',
      'public.employee:table',
      'public.genre:table',
      'public.invoice:table',
      'public.invoice_line:table',
      'public.media_type:table',
      'public.mv:materialized_view',
      'public.parted:partitioned_table',
      'public.playlist:table',
      'public.playlist_track:table',
      'public.t:table',
      'public.track:table',
      'public.with_dom:table',
      's.only_in_s:table',
      's.t:table',
    ]);
    expect(catalog.truncated).toBe(false);
    expect(Number.isNaN(Date.parse(catalog.scannedAt))).toBe(false);
  });

  test('columns in order with formatted types; dropped columns are gone', () => {
    expect(rel('public', 'customer')!.columns.slice(0, 3)).toEqual([
      { name: 'customer_id', dataType: 'integer', nullable: false, default: null, identity: null, generated: false, typeOid: 23 },
      { name: 'first_name', dataType: 'character varying(40)', nullable: false, default: null, identity: null, generated: false, typeOid: 1043 },
      { name: 'last_name', dataType: 'character varying(20)', nullable: false, default: null, identity: null, generated: false, typeOid: 1043 },
    ]);
    expect(rel('public', 'customer')!.columns.map((c) => c.name)).toEqual([
      'customer_id', 'first_name', 'last_name', 'company', 'address', 'city', 'state', 'country', 'postal_code', 'phone', 'fax', 'email', 'support_rep_id',
    ]);
    expect(rel('public', 'dropped')!.columns).toEqual([
      { name: 'a', dataType: 'integer', nullable: true, default: null, identity: null, generated: false, typeOid: 23 },
      { name: 'c', dataType: 'integer', nullable: true, default: null, identity: null, generated: false, typeOid: 23 },
    ]);
    expect(rel('public', 'MixedCase')!.columns.map((c) => c.name)).toEqual(['Id', 'id']);
    expect(rel('public', 'invoice')!.columns.find((c) => c.name === 'total')).toEqual({ name: 'total', dataType: 'numeric(10,2)', nullable: false, default: null, identity: null, generated: false, typeOid: 1700 });
  });

  test('functions from every schema including pg_catalog, with volatility; procedures excluded', () => {
    const fn = (schema: string, name: string) => catalog.functions.find((f) => f.schema === schema && f.name === name);
    expect(fn('public', 'sidefx')).toEqual({ schema: 'public', name: 'sidefx', volatility: 'volatile', returnsSet: false });
    expect(fn('public', 'stable_fn')).toEqual({ schema: 'public', name: 'stable_fn', volatility: 'stable', returnsSet: false });
    expect(fn('public', 'out_params')).toEqual({ schema: 'public', name: 'out_params', volatility: 'stable', returnsSet: true, outColumns: ['p', 'q'] });
    expect(fn('public', 'p_commit')).toBeUndefined();
    expect(fn('pg_catalog', 'nextval')).toMatchObject({ volatility: 'volatile' });
    expect(fn('pg_catalog', 'now')).toMatchObject({ volatility: 'stable' });
    expect(fn('pg_catalog', 'lower')).toMatchObject({ volatility: 'immutable' });
    expect(fn('pg_catalog', 'random')).toMatchObject({ volatility: 'volatile' });
    expect(fn('pg_catalog', 'generate_series')).toMatchObject({ returnsSet: true });
    expect(fn('pg_catalog', 'json_each')).toMatchObject({ outColumns: ['key', 'value'] });
    expect(fn('pg_catalog', 'count')).toMatchObject({ volatility: 'immutable' });
    expect(catalog.functions.length).toBeGreaterThan(2000);
  });

  test('operators, system relation names and the search path', () => {
    expect(catalog.operators!.find((o) => o.schema === 'pg_catalog' && o.name === '=')).toEqual({ schema: 'pg_catalog', name: '=', volatility: 'stable' }); // some = overloads (timestamp vs timestamptz) are stable
    expect(catalog.operators!.find((o) => o.name === '~~')).toBeDefined();
    expect(catalog.systemRelations).toEqual(expect.arrayContaining(['pg_class', 'pg_authid', 'pg_stat_activity', 'pg_settings']));
    expect(catalog.systemRelations).not.toContain('customer');
    expect(catalog.searchPath).toEqual(['public']);
  });

  test('aggregates take the volatility of their support functions; unsafe types are listed', () => {
    const fn = (name: string) => catalog.functions.find((f) => f.schema === 'public' && f.name === name);
    expect(fn('sneaky_sum')).toEqual({ schema: 'public', name: 'sneaky_sum', volatility: 'volatile', returnsSet: false });
    expect(catalog.functions.find((f) => f.schema === 'pg_catalog' && f.name === 'sum')).toMatchObject({ volatility: 'immutable' });
    expect(catalog.functions.find((f) => f.schema === 'pg_catalog' && f.name === 'json_agg')).toMatchObject({ volatility: 'stable' });
    expect(catalog.unsafeTypes).toEqual([
      { schema: 'public', name: 'checked_dom' },
      { schema: 'public', name: 'derived_dom' },
      { schema: 'public', name: 'with_dom' },
    ]);
  });

  test('such aggregates and casts are refused, and would really have written', async () => {
    for (const sql of ['SELECT sneaky_sum(a) FROM t', 'SELECT 1::checked_dom', 'SELECT 1::derived_dom', "SELECT '(1)'::with_dom"]) {
      expect([sql, analyzeSql(sql, catalog)]).toEqual([sql, expect.objectContaining({ ok: false, code: 'function_not_allowed' })]);
    }
    expect(analyzeSql('SELECT 1::plain_dom', catalog)).toMatchObject({ ok: true, kind: 'read' });
    // The refusal matters: outside READ ONLY, PostgreSQL runs the side effect.
    await client.query('BEGIN');
    try {
      await client.query('SELECT 1::checked_dom');
      await client.query('SELECT sneaky_sum(a) FROM t');
      const { rows } = await client.query("SELECT count(*)::int AS n FROM t WHERE b IN ('agg', 'check')");
      expect(rows[0].n).toBeGreaterThan(0);
    } finally {
      await client.query('ROLLBACK');
    }
  });

  test('the session search path is reported; a Pool works; maxRelations truncates', async () => {
    const c = new Client({ connectionString: db.url });
    await c.connect();
    try {
      await c.query('SET search_path = s, public');
      expect((await scanCatalog(c)).searchPath).toEqual(['s', 'public']);
    } finally {
      await c.end();
    }
    const pool = new Pool({ connectionString: db.url, max: 1 });
    try {
      const small = await scanCatalog(pool, { maxRelations: 3 });
      expect(small.truncated).toBe(true);
      expect(small.relations.map((r) => r.name)).toEqual(['MixedCase', 'album', 'artist']);
      expect(small.functions.length).toBe(catalog.functions.length);
      expect(pool.idleCount + pool.waitingCount).toBe(pool.totalCount); // the client was released
    } finally {
      await pool.end();
    }
  });

  test('the unit-test fixture agrees with a fresh scan (same functions, operators, system relations)', () => {
    const key = (f: { schema: string; name: string; volatility: string }) => `${f.schema}.${f.name}:${f.volatility}`;
    const fixtureFns = new Set(CATALOG.functions.map(key));
    const missing = catalog.functions.map(key).filter((k) => !fixtureFns.has(k) && !k.startsWith('public.'));
    expect(missing).toEqual([]);
    for (const r of CATALOG.relations) {
      const live = rel(r.schema, r.name);
      expect([r.schema, r.name, live?.columns.map((c) => c.name)]).toEqual([r.schema, r.name, r.columns.map((c) => c.name)]);
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Replay of the corpus against the real server
// ---------------------------------------------------------------------------------------------
async function fingerprintState(c: Client): Promise<string> {
  const tables = catalog.relations.filter((r) => r.kind === 'table' || r.kind === 'partitioned_table');
  const parts: string[] = [];
  for (const r of tables) {
    const name = `"${r.schema}"."${r.name.replace(/"/g, '""')}"`;
    const res = await c.query(`SELECT count(*)::text || ':' || coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '') AS h FROM ${name} x`);
    parts.push(`${r.schema}.${r.name}=${res.rows[0].h}`);
  }
  const seq = await c.query('SELECT last_value, is_called FROM s');
  parts.push(`seq=${JSON.stringify(seq.rows[0])}`);
  const session = await c.query(`SELECT current_setting('search_path') AS sp, current_setting('statement_timeout') AS st,
      current_setting('default_transaction_read_only') AS ro, current_user AS u, session_user AS su,
      (SELECT count(*) FROM pg_listening_channels()) AS listening,
      (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS advisory,
      (SELECT count(*) FROM pg_prepared_statements) AS prepared,
      (SELECT count(*) FROM pg_cursors) AS cursors,
      (SELECT count(*) FROM pg_largeobject_metadata) AS lobs,
      (SELECT count(*) FROM pg_class WHERE relnamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)) AS relations`);
  parts.push(`session=${JSON.stringify(session.rows[0])}`);
  return parts.join('\n');
}

function replayStatements(): string[] {
  const out = new Set<string>([
    ...CORPUS.map((s) => s.sql),
    ...LEGIT,
    ...CALL_CONTEXTS.flatMap((c) => DANGEROUS_CALLS.map((d) => c.split('%C%').join(`${d.fn}(${d.args})`))),
    ...WRITE_CONTEXTS.flatMap(([c]) => HIDDEN_WRITES.map((w) => c.split('%W%').join(w))),
  ]);
  for (const sql of [...CORPUS.map((s) => s.sql), ...LEGIT]) {
    for (const v of fc.sample(variantOf(sql), { numRuns: 2, seed: 7 })) out.add(v);
  }
  return [...out];
}

describe('classifier double-checked against PostgreSQL', () => {
  test('verdicts against the scanned catalogue equal those against the unit fixture', () => {
    for (const sql of replayStatements()) {
      const live = analyzeSql(sql, catalog);
      const unit = analyzeSql(sql, CATALOG);
      const v = (r: typeof live) => (r.ok ? `${r.kind} ${JSON.stringify(r.reads)} ${JSON.stringify(r.outputs)}` : r.code);
      expect([sql, v(live)]).toEqual([sql, v(unit)]);
    }
  });

  test('every statement classified as a read runs in READ ONLY without changing data or session state', async () => {
    const before = await fingerprintState(client);
    const stats = { reads: 0, succeeded: 0, failed: 0, notRead: 0 };
    const failures: string[] = [];
    for (const sql of replayStatements()) {
      const r = analyzeSql(sql, catalog);
      if (!r.ok || r.kind !== 'read') {
        stats.notRead++;
        continue;
      }
      stats.reads++;
      await client.query('BEGIN READ ONLY');
      await client.query("SET LOCAL statement_timeout = '5s'");
      let fields: string[] | null = null;
      try {
        const values = Array.from({ length: r.paramCount }, () => '1');
        const res = await client.query({ text: sql, values, queryMode: 'extended' } as never);
        fields = (res as unknown as { fields: Array<{ name: string }> }).fields.map((f) => f.name);
        stats.succeeded++;
      } catch (err) {
        stats.failed++;
        failures.push(`${sql} -> ${(err as Error).message}`);
      } finally {
        await client.query('ROLLBACK');
      }
      if (fields) expect([sql, fields]).toEqual([sql, r.outputs.map((o) => o.name)]);
      const after = await fingerprintState(client);
      expect([sql, after]).toEqual([sql, before]);
    }
    // Not vacuous: the legitimate list and its variants give well over 100 reads.
    expect(stats.reads).toBeGreaterThan(100);
    // Every analysed read is valid PostgreSQL here (the corpus and its variants are built that way).
    expect(failures).toEqual([]);
    expect(stats.succeeded).toBe(stats.reads);
    expect(stats.notRead).toBeGreaterThan(500);
  }, 300_000);

  test('statements classified as writes really are writes (PostgreSQL refuses them in READ ONLY)', async () => {
    const WRITE_REFUSALS =
      /^cannot execute (SELECT|INSERT|UPDATE|DELETE|MERGE) in a read-only transaction$|^WITH clause containing a data-modifying statement must be at the top level$|^MERGE not supported in WITH query$/;
    const messages = new Set<string>();
    let checked = 0;
    for (const sql of replayStatements()) {
      const r = analyzeSql(sql, catalog);
      if (!r.ok || r.kind !== 'write') continue;
      await client.query('BEGIN READ ONLY');
      try {
        await client.query({ text: sql, values: [], queryMode: 'extended' } as never);
        throw new Error(`expected PostgreSQL to refuse a write in READ ONLY: ${sql}`);
      } catch (err) {
        const msg = (err as Error).message;
        // The read-only guard (a writable CTE under SELECT is reported as "cannot execute SELECT"),
        // or an earlier refusal by PostgreSQL 15: a data-modifying WITH that is
        // not at top level, or MERGE inside WITH (PostgreSQL 17+ only).
        messages.add(msg.replace(/".*"/, '"…"'));
        expect([sql, WRITE_REFUSALS.test(msg)]).toEqual([sql, true]);
        checked++;
      } finally {
        await client.query('ROLLBACK');
      }
    }
    expect(checked).toBeGreaterThan(50);
    expect([...messages].sort()).toEqual([
      'MERGE not supported in WITH query',
      'WITH clause containing a data-modifying statement must be at the top level',
      'cannot execute DELETE in a read-only transaction',
      'cannot execute INSERT in a read-only transaction',
      'cannot execute MERGE in a read-only transaction',
      'cannot execute SELECT in a read-only transaction',
      'cannot execute UPDATE in a read-only transaction',
    ]);
  }, 120_000);
});
