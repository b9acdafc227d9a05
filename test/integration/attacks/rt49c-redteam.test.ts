/**
 * Red team rt49c: a fresh red team on session 49's new code, mostly rt49's definition guards
 * (src/sources/postgres/view-guard.ts: views, generated columns and, for callers with denies, masks
 * or row rules, table kinds compared with the scan in the read's own round trip), on real
 * PostgreSQL 15 through the governed pipeline. Fixture: governAsHrAnalyst (public.* readable,
 * public.staff.ssn denied, public.staff.salary masked); the attacker owns the source's objects and
 * changes them after the scan, as in rt49.
 *
 * Findings (severity, state):
 *  G1 (medium, fixed): a plain column dropped and added again under its name as a stored generated
 *     column over a denied one (`ALTER TABLE staff ADD COLUMN nick text GENERATED ALWAYS AS (ssn)
 *     STORED`). The generated-column part is sent only for columns the scan saw generated, so
 *     `SELECT nick FROM staff` (and every view over staff) served the SSNs until a rescan. Now the
 *     relation-kind part (sent for the callers the hierarchy guard is sent for) also compares each
 *     table's set of stored generated columns with the scanned set: catalog_stale, then denied.
 *  I1 (medium, fixed): the same gap as rt49 R1 in discovery: the indexer's guard (rt49 V3) left out
 *     the kind part, so a mapped table replaced by a view of its name over people.ssn was indexed
 *     without complaint, and interlock_discover showed the SSNs as hit titles to a caller denied
 *     people.ssn (the field's lineage is the scanned table's own column). Now `interlock index` sends
 *     the kind and generated-columns part for every mapped table and fails until a rescan.
 *  G2 (medium, open, test.skip): a stored generated column's lineage is the columns its expression
 *     depends on; a user function the expression calls is not followed (at the scan or after), so
 *     `loud GENERATED ALWAYS AS (shout(body))` with shout redefined to read staff.ssn served the SSNs
 *     of rows written since, before and after a rescan.
 *  A1 (low, open, test.skip): rt49b D3's keyless budget on /admin/v1 keeps out, from an address
 *     flooded with unknown tokens, every operator whose token did not resolve in the last 10 minutes.
 *
 * Held (asserted below): a view over constants whose text follows session settings (timestamptz,
 * float8, interval) is served, not catalog_stale on every read (the reader's pinned settings print
 * as the scan's); a user function a view calls, replaced after the scan (pg_get_viewdef prints the
 * same), is refused catalog_stale by the function guard (viewUserFunctions); tables with generated
 * columns scanned as such still served with the new part; an unchanged mapped table still indexes.
 * Held by trying on PostgreSQL 15 (not kept as tests): a partition or inheritance child with another
 * generation expression than its parent's is refused by the server (ATTACH, INHERITS, DROP EXPRESSION).
 * By reading: a view's other rules (CREATE RULE … ON SELECT is only "_RETURN"; DML rules do not run
 * for reads); ALTER VIEW SET (security_barrier / security_invoker) changes nothing the analysis
 * relies on (row-ruled views are read through InterLock's own copies, made from the scanned
 * definition); a view printed the same under another search_path cannot resolve differently
 * (pg_get_viewdef qualifies every name not visible on the reader's pinned path, which the scan used);
 * parseClientJson with duplicate keys (the parsed, last, array is the one judged; tried), batches
 * (refused NO-BATCH) and params items (scalars only, so nested arrays never reach PostgreSQL);
 * rt48d R4's one transaction per sign-in serialises only one subject's sign-ins on its own row.
 * Left open (by reading, not staged): a definition committed between the guard's snapshot and the
 * statement's (rt49's note); on PostgreSQL 18 a virtual generated column is scanned as a plain one
 * (catalog.ts keeps `generated` for 's' only), so one over a denied column would be served, and the
 * new part compares stored ones only (comparing virtual ones would trip every read of such a table);
 * a view over a foreign table (the remote side, and ALTER FOREIGN TABLE … OPTIONS (column_name …),
 * are outside the scan); an operator token revoked within the 10-minute exemption is still looked up
 * (never served) on every request, past the budget.
 */
import pg from 'pg';
import type { GovernedEnv } from '../../helpers/governed';
import { HR_DENIED, HR_STALE, startHrStaffEnv, type HrStaffEnv } from '../../helpers/hr-analyst';
import { randomBytes } from 'node:crypto';
import { createOperatorToken } from '../../../src/admin/tokens';
import { mappedSource, type MappedSource } from '../../helpers/mapped-source';
import { scanSource } from '../../../src/control/scan';
import type { ControlDb } from '../../../src/control/db';
import { indexSource } from '../../../src/discovery/indexer';

let fx: HrStaffEnv & { close(): Promise<void> };
let env: GovernedEnv;
let admin: pg.Client;
const outcome = (sql: string, key?: string): Promise<unknown> => fx.outcome(sql, key);
const rescan = (): Promise<void> => fx.rescan();
const DENIED = HR_DENIED;
const STALE = HR_STALE;

beforeAll(async () => {
  fx = await startHrStaffEnv(
    (reader) => `
    CREATE TABLE staff (emp_id int PRIMARY KEY, name text, ssn text, salary numeric, nick text);
    INSERT INTO staff VALUES (1, 'Ada', '123-45-6789', 98000, 'a'), (2, 'Bob', '987-65-4321', 120000, 'b');
    CREATE TABLE tags (emp_id int, tag text);
    INSERT INTO tags VALUES (1, 'x'), (2, 'y');
    CREATE FUNCTION tag_of(i int) RETURNS text LANGUAGE sql STABLE AS 'SELECT tag FROM public.tags WHERE emp_id = i';
    CREATE FUNCTION shout(t text) RETURNS text LANGUAGE sql IMMUTABLE AS 'SELECT upper(t)';
    CREATE TABLE notes (emp_id int, body text, loud text GENERATED ALWAYS AS (public.shout(body)) STORED);
    INSERT INTO notes (emp_id, body) VALUES (1, 'hi');
    CREATE VIEW staff_dir AS SELECT emp_id, name FROM staff;
    CREATE VIEW tagged AS SELECT emp_id, public.tag_of(emp_id) AS tag FROM staff;
    CREATE VIEW stamped AS SELECT emp_id, name FROM staff WHERE now() > '2020-01-02 03:04:05+00'::timestamptz AND 1.5::float8 > 0.1::float8 AND interval '1 day 2 hours' > interval '1 hour';
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${reader};`,
    'rt49c-hr',
  );
  ({ env, admin } = fx);
}, 120_000);

afterAll(async () => {
  await fx?.close();
});

describe('G1 (medium): a plain column replaced by a generated column after the scan', () => {
  test('fixed: a plain column dropped and added again as GENERATED ALWAYS AS (ssn) STORED is refused catalog_stale, then denied', async () => {
    expect(await outcome('SELECT nick FROM staff ORDER BY emp_id')).toEqual({ status: 200, rows: [{ nick: 'a' }, { nick: 'b' }] });
    await env.gateway.rescansIdle();
    await admin.query('ALTER TABLE staff DROP COLUMN nick; ALTER TABLE staff ADD COLUMN nick text GENERATED ALWAYS AS (ssn) STORED');
    try {
      // Before the fix: {status: 200, rows: [{nick: '123-45-6789'}, {nick: '987-65-4321'}]} (the
      // generated-column part is sent only for columns the scan saw generated; the scan saw a plain one).
      expect(await outcome('SELECT nick FROM staff ORDER BY emp_id')).toEqual(STALE);
      expect(await outcome('SELECT name FROM staff_dir ORDER BY emp_id')).toEqual(STALE);
      await rescan();
      expect(await outcome('SELECT nick FROM staff ORDER BY emp_id')).toEqual(DENIED);
    } finally {
      await admin.query("ALTER TABLE staff DROP COLUMN nick; ALTER TABLE staff ADD COLUMN nick text; UPDATE staff SET nick = lower(left(name, 1))");
      await rescan();
    }
    expect(await outcome('SELECT nick FROM staff ORDER BY emp_id')).toEqual({ status: 200, rows: [{ nick: 'a' }, { nick: 'b' }] });
  });

  test('held: a generated column scanned as one, and a table with none, are served (no false catalog_stale)', async () => {
    expect(await outcome('SELECT loud FROM notes ORDER BY emp_id')).toEqual({ status: 200, rows: [{ loud: 'HI' }] });
    expect(await outcome('SELECT name FROM staff_dir ORDER BY emp_id')).toEqual({ status: 200, rows: [{ name: 'Ada' }, { name: 'Bob' }] });
  });
});

describe('I1 (medium): a mapped table replaced after the scan, then indexed', () => {
  let m: MappedSource;
  let db: ControlDb;
  let owner: pg.Client;
  let reader = '';
  const titles = (query: string): Promise<unknown[]> => m.titles(query);

  beforeAll(async () => {
    m = await mappedSource(
      'rt49c',
      `CREATE TABLE people (id int PRIMARY KEY, name text, ssn text);
      INSERT INTO people VALUES (1, 'Zebulon Quark', 'ssn-77-41-90210'), (2, 'Mirabel Oswin', 'ssn-12-99-31337');
      CREATE TABLE people_doc (id int PRIMARY KEY, title text, body text);
      INSERT INTO people_doc SELECT id, name, name FROM people;
      GRANT SELECT ON people, people_doc TO $READER;`,
      'public.people_doc',
    );
    ({ db, owner, reader } = m);
  }, 60_000);
  afterAll(async () => {
    await m?.close();
  });

  test('fixed: indexing refuses a mapped table replaced by a view over a denied column until the source is rescanned', async () => {
    expect(await titles('Zebulon')).toEqual(['Zebulon Quark']);
    await owner.query(`DROP TABLE people_doc; CREATE VIEW people_doc AS SELECT id, ssn AS title, ssn AS body FROM people; GRANT SELECT ON people_doc TO ${reader}`);
    try {
      // Before the fix: indexed without complaint (the guard compared only mapped views and
      // generated columns), and titles('ssn') answered ['ssn-77-41-90210', 'ssn-12-99-31337'].
      await expect(indexSource(db, 'hr')).rejects.toThrow('a mapped view, table or generated column of source "hr" changed since its catalogue was last scanned: scan the source (interlock source scan hr), then index it again');
      expect(await titles('ssn')).toEqual([]);
      expect(await titles('Zebulon')).toEqual(['Zebulon Quark']);
      // Rescanned: the lineage is people.ssn (denied), the rows are indexed and hidden.
      await scanSource(db, 'hr');
      await indexSource(db, 'hr');
      expect(await titles('ssn')).toEqual([]);
    } finally {
      await owner.query(`DROP VIEW people_doc; CREATE TABLE people_doc (id int PRIMARY KEY, title text, body text); INSERT INTO people_doc SELECT id, name, name FROM people; GRANT SELECT ON people_doc TO ${reader}`);
      await scanSource(db, 'hr');
      await indexSource(db, 'hr');
    }
    expect(await titles('Zebulon')).toEqual(['Zebulon Quark']);
  });

  test('held: an unchanged mapped table indexes with the guard sent', async () => {
    await expect(indexSource(db, 'hr')).resolves.toBeDefined();
    expect(await titles('Mirabel')).toEqual(['Mirabel Oswin']);
  });
});

describe('target 1: what the definition guard holds', () => {
  test('held: a view over printed constants (timestamptz, float8, interval: their text follows the session settings) is served, not catalog_stale every time', async () => {
    for (let i = 0; i < 2; i++) expect(await outcome('SELECT name FROM stamped ORDER BY emp_id')).toEqual({ status: 200, rows: [{ name: 'Ada' }, { name: 'Bob' }] });
  });

  test('held: a user function a view calls, redefined after the scan (pg_get_viewdef prints the same), is refused catalog_stale', async () => {
    expect(await outcome('SELECT tag FROM tagged ORDER BY emp_id')).toEqual({ status: 200, rows: [{ tag: 'x' }, { tag: 'y' }] });
    await env.gateway.rescansIdle();
    await admin.query("CREATE OR REPLACE FUNCTION tag_of(i int) RETURNS text LANGUAGE sql STABLE AS 'SELECT ssn FROM public.staff WHERE emp_id = i'");
    try {
      expect(await outcome('SELECT tag FROM tagged ORDER BY emp_id')).toEqual(STALE);
      await rescan();
      expect(await outcome('SELECT tag FROM tagged ORDER BY emp_id')).toEqual(DENIED);
    } finally {
      await admin.query("CREATE OR REPLACE FUNCTION tag_of(i int) RETURNS text LANGUAGE sql STABLE AS 'SELECT tag FROM public.tags WHERE emp_id = i'");
      await rescan();
    }
  });

  // G2 (medium, open): a stored generated column's lineage is the columns its expression's pg_attrdef
  // row depends on (catalog.ts, rt42 G1); a user function the expression calls is not followed, at
  // the scan or after. `loud GENERATED ALWAYS AS (public.shout(body)) STORED` with shout redefined
  // (CREATE OR REPLACE FUNCTION, the expression's text unchanged) to read staff.ssn: rows written
  // since carry the SSNs, and `SELECT loud FROM notes` served them, before and after a rescan (seen:
  // {status: 200, rows: [{loud: 'HI'}, {loud: '123-45-6789,987-65-4321'}]}). A read-time function
  // guard would not help (the value was computed at write time). Fix: the scan records a generated
  // column whose expression depends on a function outside pg_catalog, and its lineage takes that
  // function's reads (function-reads.ts), or is unprovable (refused to callers with denies).
  test.skip('open G2: a generated column over a user function redefined to read a denied column is refused', async () => {
    expect(await outcome('SELECT loud FROM notes')).toEqual({ status: 200, rows: [{ loud: 'HI' }] });
    await env.gateway.rescansIdle();
    await admin.query("CREATE OR REPLACE FUNCTION shout(t text) RETURNS text LANGUAGE sql IMMUTABLE AS 'SELECT string_agg(ssn, '','') FROM public.staff'; INSERT INTO notes (emp_id, body) VALUES (2, 'yo')");
    try {
      await rescan();
      expect(await outcome('SELECT loud FROM notes ORDER BY emp_id')).toEqual(DENIED);
    } finally {
      await admin.query("CREATE OR REPLACE FUNCTION shout(t text) RETURNS text LANGUAGE sql IMMUTABLE AS 'SELECT upper(t)'; DELETE FROM notes WHERE emp_id = 2");
      await rescan();
    }
  });
});

describe('A1 (low, open): the admin API\'s keyless budget and an operator not seen lately', () => {
  // rt49b D3 refuses /admin/v1 429 before any look-up once the client address's keyless budget is
  // spent, exempting only an operator token that resolved in the last 10 minutes. From a shared
  // address (a proxy, a NAT, a bastion), anyone sending ~600 unknown tokens a minute keeps out every
  // operator who was not using the API in the last 10 minutes (a new session, a token just created,
  // the gateway restarted: the exemption is in memory), for as long as the flood lasts: the
  // operator's valid token is never looked up. Seen: 429 rate_limited. A fix would look up a
  // well-formed token while the budget is spent at a bounded rate of its own (e.g. a few a second per
  // address), or charge only tokens of the operator-token form that fail, per token prefix.
  test.skip('open A1: a valid operator token not used lately is served while its address floods unknown ones', async () => {
    const origin = new URL(env.url).origin;
    const whoami = (token: string) => fetch(`${origin}/admin/v1/whoami`, { headers: { authorization: `Bearer ${token}` } });
    let sent = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (sent < 700) {
          sent++;
          await (await whoami('ilo_' + randomBytes(32).toString('base64url'))).arrayBuffer();
        }
      }),
    );
    expect((await whoami('ilo_' + randomBytes(32).toString('base64url'))).status).toBe(429);
    const operator = await createOperatorToken(env.db, 'rt49c-operator');
    expect((await whoami(operator.secret)).status).toBe(200);
  });
});
