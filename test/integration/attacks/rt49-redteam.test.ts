/**
 * Red team rt49: gaps between InterLock's picture of a PostgreSQL source (the catalogue scan, the
 * value mapping) and what the server does, attacked through the governed pipeline on real
 * PostgreSQL 15. The fixture (the database owner's objects, then a rescan) is governAsHrAnalyst's:
 * the agent reads public.* but not public.staff.ssn, and public.staff.salary is masked (full).
 * The attacker is the owner of a view or table (a migration, a careless DBA), changing it after the
 * scan; an agent then reads it. Not redone: rt42 (columns added or renamed, search_path, generated
 * columns at the scan), rt42c (whole rows inside views), rt43b/c (casts, domains), rt46a and
 * value-matrix.test.ts (values under the pinned and the database's settings).
 *
 * Findings (severity, state):
 *  V1 (high, fixed): a view's definition replaced after the scan (`CREATE OR REPLACE VIEW` keeping
 *     its columns' names and types). The analysis follows the scanned definition's lineage, the
 *     server runs the new one, and no read guard compared the two: `staff_dir.name` (scanned:
 *     staff.name) redefined as `ssn` served every SSN in clear, as `salary::text` every masked
 *     salary through a view over it; a materialized view dropped and created again under its name
 *     the same. Now every view and materialized view a read (or an approved write) goes through,
 *     nested ones included, carries a guard part in the statement's own round trip comparing the
 *     server's `pg_get_viewdef` with the scanned definition (src/sources/postgres/view-guard.ts):
 *     catalog_stale, rescan, then judged on the new lineage.
 *  V2 (medium, fixed): a stored generated column dropped and added again under its name and type,
 *     generated from a denied column: the analysis took its value from the scanned expression's
 *     inputs (rt42 G1), the server computed it from `ssn`: `SELECT name_up FROM staff` served the
 *     SSNs. Now each generated column a statement reads (also behind a view, in a whole row or a
 *     user function's body) carries a part comparing `pg_get_expr` of its expression (same file).
 *  V3 (medium, fixed): the same for discovery. `interlock index` read a mapped view's rows live,
 *     while interlock_discover decides each field's lineage on the scanned definition: a view
 *     redefined after the scan (title, body := ssn) and then indexed (the documented cron job)
 *     showed every SSN as hit titles to a caller whose role denies people.ssn. Now indexing runs
 *     the same definition guard first, in its read transaction, and fails (index left as it was)
 *     until the source is rescanned (src/discovery/indexer.ts mappedDefinitionsGuard).
 *  R1 (medium, fixed): a table replaced by a view of its name and columns after the scan (DROP
 *     TABLE + CREATE VIEW, a migration's compatibility view; on PostgreSQL 15 also an empty table
 *     turned into a view in place by CREATE RULE "_RETURN"): scanned as a table, read as a view over
 *     the SSNs until a rescan. Now, for a caller whose rules can refuse or mask something (those the
 *     hierarchy guard is sent for), the guard also compares each table's pg_class.relkind.
 *
 * Held (asserted below): an array of a domain over box (PostgreSQL gives the array type the
 * element's `;` typdelim, so the decoder's split is right); a domain over int8 beyond 2^53 in an
 * array (every digit, as strings); a label added to an enum after the scan, in a value and an enum
 * array; unchanged views and materialized views (nested too) still served with the guard sent.
 * Left (by design or by reading, not staged): a result cached before the change is served for its TTL
 * (docs/architecture.md 6½); a definition committed between the guard's snapshot and the statement's
 * (one round trip; CREATE OR REPLACE VIEW waits for the read's lock); the relkind part is not sent for
 * a caller without denies, masks or row rules (a view's sources are refused only by an explicit deny,
 * so such a caller would be served the view's rows after a rescan too); approved writes keep the
 * hook guard, whose fingerprint already changes with a view's rules. The guard's cost on the bench's
 * reads (a UNION ALL part with an index probe per table for the masked demo agent) is not measured here.
 */
import pg from 'pg';
import type { GovernedEnv } from '../../helpers/governed';
import { HR_DENIED, HR_STALE, startHrStaffEnv, type HrStaffEnv } from '../../helpers/hr-analyst';
import { mappedSource, type MappedSource } from '../../helpers/mapped-source';
import { scanSource } from '../../../src/control/scan';
import type { ControlDb } from '../../../src/control/db';
import { indexSource } from '../../../src/discovery/indexer';

let fx: HrStaffEnv & { close(): Promise<void> };
let env: GovernedEnv;
let admin: pg.Client;
let reader = '';
const outcome = (sql: string, key?: string): Promise<unknown> => fx.outcome(sql, key);
const rescan = (): Promise<void> => fx.rescan();
const DENIED = HR_DENIED;
const STALE = HR_STALE;

beforeAll(async () => {
  fx = await startHrStaffEnv(
    (reader) => `
    CREATE TABLE staff (emp_id int PRIMARY KEY, name text, ssn text, salary numeric,
      name_up text GENERATED ALWAYS AS (upper(name)) STORED);
    CREATE TABLE staging (emp_id int, name text);
    INSERT INTO staff VALUES (1, 'Ada', '123-45-6789', 98000), (2, 'Bob', '987-65-4321', 120000);
    CREATE VIEW staff_dir AS SELECT emp_id, name FROM staff;
    CREATE VIEW staff_dir2 AS SELECT emp_id, name FROM staff_dir;
    CREATE MATERIALIZED VIEW staff_names AS SELECT emp_id, name FROM staff;
    CREATE TYPE mood AS ENUM ('sad', 'ok');
    CREATE DOMAIN dbox AS box;
    CREATE DOMAIN dbig AS int8;
    CREATE TABLE vals (id int, m mood, ms mood[], bx dbox[], bg dbig[]);
    INSERT INTO vals VALUES (1, 'ok', '{sad,ok}', ARRAY['(1,1),(0,0)'::dbox, '(3,3),(2,2)'::dbox], ARRAY[9007199254740993, -9007199254740993]::dbig[]);
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${reader};`,
    'rt49-hr',
  );
  ({ env, admin, reader } = fx);
}, 120_000);

afterAll(async () => {
  await fx?.close();
});

describe('V1 (high): a view redefined after the scan', () => {
  test('the fixture: the scanned views serve names, the denied and masked columns are refused or masked', async () => {
    expect(await outcome('SELECT name FROM staff_dir ORDER BY emp_id')).toEqual({ status: 200, rows: [{ name: 'Ada' }, { name: 'Bob' }] });
    expect(await outcome('SELECT name FROM staff_dir2 ORDER BY emp_id')).toEqual({ status: 200, rows: [{ name: 'Ada' }, { name: 'Bob' }] });
    expect(await outcome('SELECT name FROM staff_names ORDER BY emp_id')).toEqual({ status: 200, rows: [{ name: 'Ada' }, { name: 'Bob' }] });
    expect(await outcome('SELECT ssn FROM staff')).toEqual(DENIED);
  });

  test('fixed: CREATE OR REPLACE VIEW swapping a denied column in under an allowed name is refused catalog_stale, then denied', async () => {
    await env.gateway.rescansIdle();
    await admin.query('CREATE OR REPLACE VIEW staff_dir AS SELECT emp_id, ssn AS name FROM staff');
    try {
      // Before the fix: {status: 200, rows: [{name: '123-45-6789'}, {name: '987-65-4321'}]}.
      expect(await outcome('SELECT name FROM staff_dir ORDER BY emp_id')).toEqual(STALE);
      await rescan();
      expect(await outcome('SELECT name FROM staff_dir ORDER BY emp_id')).toEqual(DENIED);
      expect(await outcome('SELECT name FROM staff_dir2 ORDER BY emp_id')).toEqual(DENIED);
    } finally {
      await admin.query('CREATE OR REPLACE VIEW staff_dir AS SELECT emp_id, name FROM staff');
      await rescan();
    }
    expect(await outcome('SELECT name FROM staff_dir2 ORDER BY emp_id')).toEqual({ status: 200, rows: [{ name: 'Ada' }, { name: 'Bob' }] });
  });

  test('fixed: a nested view (read through another) redefined with a masked column is refused catalog_stale, then masked', async () => {
    await env.gateway.rescansIdle();
    await admin.query('CREATE OR REPLACE VIEW staff_dir AS SELECT emp_id, salary::text AS name FROM staff');
    try {
      // Before the fix: {status: 200, rows: [{name: '98000'}, {name: '120000'}]}.
      expect(await outcome('SELECT name FROM staff_dir2 ORDER BY emp_id')).toEqual(STALE);
      await rescan();
      expect(await outcome('SELECT name FROM staff_dir2 ORDER BY emp_id')).toEqual({ status: 200, rows: [{ name: '***' }, { name: '***' }] });
    } finally {
      await admin.query('CREATE OR REPLACE VIEW staff_dir AS SELECT emp_id, name FROM staff');
      await rescan();
    }
  });

  test('fixed: a materialized view dropped and created again under its name with a denied column is refused catalog_stale', async () => {
    await env.gateway.rescansIdle();
    await admin.query(`DROP MATERIALIZED VIEW staff_names; CREATE MATERIALIZED VIEW staff_names AS SELECT emp_id, ssn AS name FROM staff; GRANT SELECT ON staff_names TO ${reader}`);
    try {
      // Before the fix: {status: 200, rows: [{name: '123-45-6789'}, {name: '987-65-4321'}]}.
      expect(await outcome('SELECT name FROM staff_names ORDER BY emp_id')).toEqual(STALE);
      await rescan();
      expect(await outcome('SELECT name FROM staff_names ORDER BY emp_id')).toEqual(DENIED);
    } finally {
      await admin.query(`DROP MATERIALIZED VIEW staff_names; CREATE MATERIALIZED VIEW staff_names AS SELECT emp_id, name FROM staff; GRANT SELECT ON staff_names TO ${reader}`);
      await rescan();
    }
    expect(await outcome('SELECT name FROM staff_names ORDER BY emp_id')).toEqual({ status: 200, rows: [{ name: 'Ada' }, { name: 'Bob' }] });
  });
});

describe('a table changed under the scanned picture', () => {
  test('fixed V2 (medium): a generated column dropped and added again under its name, generated from a denied column, is refused catalog_stale, then denied', async () => {
    expect(await outcome('SELECT name_up FROM staff ORDER BY emp_id')).toEqual({ status: 200, rows: [{ name_up: 'ADA' }, { name_up: 'BOB' }] });
    await env.gateway.rescansIdle();
    await admin.query('ALTER TABLE staff DROP COLUMN name_up; ALTER TABLE staff ADD COLUMN name_up text GENERATED ALWAYS AS (upper(ssn)) STORED');
    try {
      // Before the fix: {status: 200, rows: [{name_up: '123-45-6789'}, {name_up: '987-65-4321'}]}.
      expect(await outcome('SELECT name_up FROM staff ORDER BY emp_id')).toEqual(STALE);
      await rescan();
      expect(await outcome('SELECT name_up FROM staff ORDER BY emp_id')).toEqual(DENIED);
    } finally {
      await admin.query('ALTER TABLE staff DROP COLUMN name_up; ALTER TABLE staff ADD COLUMN name_up text GENERATED ALWAYS AS (upper(name)) STORED');
      await rescan();
    }
  });

  // R1 (medium, fixed): a table replaced after the scan by a view of the same name and columns (a
  // migration's "compatibility view": DROP TABLE, then CREATE VIEW; on PostgreSQL 15 and older also an
  // empty table turned into a view in place by an ON SELECT rule "_RETURN"). The scan recorded a table
  // (its columns are their own values), the server ran the view's query: the denied SSNs were served
  // under the table's allowed column until a rescan. Before the fix, both:
  // {status: 200, rows: [{name: '123-45-6789'}, {name: '987-65-4321'}]}. Now a caller whose rules can
  // refuse or mask something sends the tables' relkind with the definition guard.
  test.each([
    ['DROP TABLE, then CREATE VIEW', 'DROP TABLE staging; CREATE VIEW staging AS SELECT emp_id, ssn AS name FROM staff'],
    ['CREATE RULE "_RETURN" (PostgreSQL 15 and older)', 'CREATE RULE "_RETURN" AS ON SELECT TO staging DO INSTEAD SELECT emp_id, ssn AS name FROM staff'],
  ])('fixed R1 (medium): a table replaced by a view of its name after the scan (%s) is refused catalog_stale, then denied', async (_how, ddl) => {
    expect(await outcome('SELECT name FROM staging')).toEqual({ status: 200, rows: [] });
    await env.gateway.rescansIdle();
    await admin.query(`${ddl}; GRANT SELECT ON staging TO ${reader}`);
    try {
      expect(await outcome('SELECT name FROM staging ORDER BY emp_id')).toEqual(STALE);
      await rescan();
      expect(await outcome('SELECT name FROM staging ORDER BY emp_id')).toEqual(DENIED);
    } finally {
      await admin.query(`DROP VIEW staging; CREATE TABLE staging (emp_id int, name text); GRANT SELECT ON staging TO ${reader}`);
      await rescan();
    }
  });
});

describe('values', () => {
  test("held: an array of a domain over box (elements separated by `;`, the array type's typdelim)", async () => {
    expect(await outcome('SELECT bx FROM vals')).toEqual({ status: 200, rows: [{ bx: ['(1,1),(0,0)', '(3,3),(2,2)'] }] });
  });

  test('held: an int8 domain beyond 2^53 in an array keeps every digit', async () => {
    expect(await outcome('SELECT bg FROM vals')).toEqual({ status: 200, rows: [{ bg: ['9007199254740993', '-9007199254740993'] }] });
  });

  test('held: a label added to an enum after the scan, in a value and an enum array', async () => {
    await admin.query("ALTER TYPE mood ADD VALUE 'glad'");
    await admin.query("UPDATE vals SET m = 'glad', ms = '{glad,sad}'");
    expect(await outcome('SELECT m, ms FROM vals')).toEqual({ status: 200, rows: [{ m: 'glad', ms: ['glad', 'sad'] }] });
  });
});

describe('V3 (medium): a mapped view redefined after the scan, then indexed', () => {
  let m: MappedSource;
  let db: ControlDb;
  let owner: pg.Client;
  const titles = (query: string): Promise<unknown[]> => m.titles(query);

  beforeAll(async () => {
    m = await mappedSource(
      'rt49',
      `CREATE TABLE people (id int PRIMARY KEY, name text, ssn text);
      INSERT INTO people VALUES (1, 'Zebulon Quark', 'ssn-77-41-90210'), (2, 'Mirabel Oswin', 'ssn-12-99-31337');
      CREATE VIEW people_dir AS SELECT id, name AS title, name AS body FROM people;
      GRANT SELECT ON people, people_dir TO $READER;`,
      'public.people_dir',
    );
    ({ db, owner } = m);
  }, 60_000);
  afterAll(async () => {
    await m?.close();
  });

  test('fixed: indexing refuses the redefined view until the source is rescanned; the denied column is then never shown', async () => {
    expect(await titles('Zebulon')).toEqual(['Zebulon Quark']);
    await owner.query('CREATE OR REPLACE VIEW people_dir AS SELECT id, ssn AS title, ssn AS body FROM people');
    // Before the fix: the index took the SSNs under the view's columns, whose scanned lineage is
    // people.name (allowed): titles('ssn') answered ['ssn-77-41-90210', 'ssn-12-99-31337'].
    await expect(indexSource(db, 'hr')).rejects.toThrow('a mapped view, table or generated column of source "hr" changed since its catalogue was last scanned: scan the source (interlock source scan hr), then index it again');
    expect(await titles('ssn')).toEqual([]);
    expect(await titles('Zebulon')).toEqual(['Zebulon Quark']);
    // Rescanned: the lineage is people.ssn (denied), the rows are indexed and hidden.
    await scanSource(db, 'hr');
    await indexSource(db, 'hr');
    expect(await titles('ssn')).toEqual([]);
    expect(await titles('Zebulon')).toEqual([]);
  });
});
