/**
 * Red team rt49c (header filled in below).
 */
import pg from 'pg';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { governAsHrAnalyst } from '../../helpers/hr-analyst';
import { scanSource } from '../../../src/control/scan';

let env: GovernedEnv;
let admin: pg.Client;
let reader = '';

/** What one interlock_query call answered: status, then the refusal's code or the rows. */
async function outcome(sql: string, key = env.apiKey): Promise<unknown> {
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql }, key);
  const res = r.body.result;
  if (!res) return { status: r.status, error: r.body.error };
  if (res.isError) return { status: r.status, code: res.structuredContent.code };
  return { status: r.status, rows: res.structuredContent.rows };
}

/** The source rescanned by the operator (after the gateway's own rescans have ended). */
async function rescan(): Promise<void> {
  await env.gateway.rescansIdle();
  await scanSource(env.db, 'chinook');
  env.gateway.store.invalidate('*');
}

const DENIED = { status: 200, code: 'source_role_denied' };
const STALE = { status: 200, code: 'catalog_stale' };

beforeAll(async () => {
  env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } }, cache: { ttl_ms: 0 } } });
  admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
  reader = admin.escapeIdentifier(env.demo.readerRole);
  await admin.query(`
    SET search_path = public;
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
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${reader};`);
  await governAsHrAnalyst(env, 'rt49c-hr'); // rescans
}, 120_000);

afterAll(async () => {
  await admin?.end();
  await env?.close();
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
