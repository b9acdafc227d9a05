/**
 * Red-team attacks that once SUCCEEDED against InterLock (V1–V6 of the red-team report), kept as
 * regression tests: each asserts the safe behaviour that the fixes now provide (a work budget in the
 * analyser; masked columns usable only as plain outputs; writes may not read masked columns;
 * existence, privilege and connection probes refused; one refusal text for denied and missing).
 *
 * Environment: the governed gateway with the Chinook demo (demo-agent / demo-analyst: read on the
 * catalogue, customers and invoices; customer.email partially and customer.phone fully masked by
 * policy; employee NOT readable). Severity and fixes are in the report that accompanies this file.
 */
import { approveAndExecute } from '../../../src/approvals/execute';
import { listApprovals } from '../../../src/control/approvals';
import { startAttackEnv, query, sourceState, narrowIdentity, leaks, type AttackEnv } from './harness';

let a: AttackEnv;
beforeAll(async () => {
  a = await startAttackEnv();
}, 120_000);
afterAll(async () => a?.close());

/** Customer 1's phone, one printable ASCII character per ordinal position, recovered without ever selecting it. */
const CHARSET = 'LATERAL (SELECT chr(g) AS c FROM generate_series(32, 126) AS g) AS k';

/** WITH RECURSIVE nested `depth` levels, each rotating 11 columns so the analyser needs 11 fixpoint rounds per level. */
function recursiveBomb(depth: number): string {
  const cols = ['customer_id', 'first_name', 'last_name', 'company', 'address', 'city', 'state', 'country', 'postal_code', 'fax', 'support_rep_id'];
  const n = cols.length;
  const level = (k: number): string => {
    const name = `r${k}`;
    const base = cols.map((c) => `${c}::text`).join(', ');
    const rot = cols.map((_, i) => `${name}.a${(i + 1) % n}`).join(', ');
    const inner = k < depth ? `, (${level(k + 1)}) AS s${k}` : '';
    return `WITH RECURSIVE ${name}(${cols.map((_, i) => `a${i}`).join(', ')}) AS (SELECT ${base} FROM customer UNION ALL SELECT ${rot} FROM ${name}${inner} WHERE false) SELECT * FROM ${name}`;
  };
  return level(1);
}

describe('vulnerabilities found by the red team, now fixed (each test asserts the safe outcome)', () => {
  // ---------------------------------------------------------------------------------------------
  // V1 (critical): a 2 KB statement blocks the whole gateway (every identity, every source).
  // ---------------------------------------------------------------------------------------------
  test('V1 analyser CPU exhaustion: nested WITH RECURSIVE blocks the event loop (other callers starve)', async () => {
    const bomb = recursiveBomb(6); // ~2.3 KB: ~20-80 s of synchronous analysis; depth 7 takes minutes
    expect(bomb.length).toBeLessThan(2_500);
    expect((await query(a, 'SELECT 0 AS warm')).kind).toBe('rows'); // grants and catalogue cached
    // The gateway runs in this process: a blocked event loop delays our own timer too, so measure
    // from when the innocent call was DUE (what a concurrent client experiences).
    const t0 = Date.now();
    const slow = query(a, bomb);
    const due = t0 + 500;
    await new Promise((r) => setTimeout(r, 500));
    const alive = await query(a, 'SELECT 1 AS alive');
    const aliveMs = Date.now() - due;
    await slow;
    const bombMs = Date.now() - t0;
    expect(alive.kind).toBe('rows');
    // Safe: analysis is bounded (a work budget) so an innocent call is answered promptly.
    expect(aliveMs).toBeLessThan(1_500);
    expect(bombMs).toBeLessThan(3_000);
  }, 180_000);

  // ---------------------------------------------------------------------------------------------
  // V2 (critical): masked columns leak in cleartext through lineage/filters the analyser ignores.
  // ---------------------------------------------------------------------------------------------
  test('V2a one query returns the fully-masked phone in cleartext (LATERAL INTERSECT as a hidden predicate)', async () => {
    const sql = `SELECT string_agg(k.c, '' ORDER BY t.o) AS phone
      FROM customer AS c, unnest(string_to_array(c.phone, NULL)) WITH ORDINALITY AS t(ch, o), ${CHARSET},
           LATERAL (SELECT t.ch INTERSECT SELECT k.c) AS m
      WHERE c.customer_id = 1`;
    const r = await query(a, sql);
    expect(leaks(r.raw, a.secret.phone)).toBe(false);
    expect(r.kind).not.toBe('rows');
  });

  test('V2b every customer e-mail in cleartext through a correlated sub-select (same technique)', async () => {
    const sql = `SELECT c.customer_id,
        (SELECT string_agg(k.c, '' ORDER BY t.o) FROM unnest(string_to_array(c.email, NULL)) WITH ORDINALITY AS t(ch, o), ${CHARSET},
                LATERAL (SELECT t.ch INTERSECT SELECT k.c) AS m) AS mail
      FROM customer AS c ORDER BY c.customer_id LIMIT 3`;
    const r = await query(a, sql);
    expect(leaks(r.raw, a.secret.email)).toBe(false);
  });

  test('V2c arguments of a set-returning function in FROM act as an unrecorded predicate', async () => {
    const sql = `SELECT string_agg(k.c, '' ORDER BY t.o) AS phone
      FROM customer AS c, unnest(string_to_array(c.phone, NULL)) WITH ORDINALITY AS t(ch, o), ${CHARSET},
           LATERAL generate_series(1, (t.ch = k.c)::int) AS hit
      WHERE c.customer_id = 1`;
    const r = await query(a, sql);
    expect(leaks(r.raw, a.secret.phone)).toBe(false);
    expect(r.kind).not.toBe('rows');
  });

  test('V2d regexp_matches in FROM filters rows by a masked column (WHERE email LIKE in disguise)', async () => {
    const r = await query(a, "SELECT c.customer_id FROM customer AS c, regexp_matches(c.email, '^luis') AS m");
    // Safe: refused like `WHERE email ~ '^luis'` (policy_denied).
    expect(r.kind).toBe('refused');
  });

  test('V2e EXISTS(...) over a masked value is returned unmasked (EXISTS lineage is empty)', async () => {
    const r = await query(a, `SELECT c.customer_id, EXISTS (SELECT c.phone INTERSECT SELECT '${a.secret.phone}') AS hit FROM customer AS c WHERE c.customer_id < 3`);
    const hit = r.rows.map((x) => x.hit);
    // Safe: refused, or `hit` masked (never a real boolean telling the guess was right).
    expect(hit).not.toEqual([true, false]);
  });

  test('V2f a top-level INTERSECT/EXCEPT answers "is the masked value equal to my guess" by its row count', async () => {
    const right = await query(a, `SELECT phone FROM customer WHERE customer_id = 1 INTERSECT SELECT '${a.secret.phone}'`);
    const wrong = await query(a, "SELECT phone FROM customer WHERE customer_id = 1 INTERSECT SELECT '+1 (000) 000-0000'");
    expect(right.kind).toBe('refused');
    expect(right.rows.length).toBe(wrong.rows.length);
  });

  test('V2g WITH ORDINALITY over a masked value: the counter is returned unmasked (length of the phone)', async () => {
    const r = await query(a, 'SELECT max(t.o) AS len FROM customer AS c, unnest(string_to_array(c.phone, NULL)) WITH ORDINALITY AS t(ch, o) WHERE c.customer_id = 1');
    expect(r.rows[0]?.len).not.toBe(String(a.secret.phone.length));
  });

  test('V2h a set-returning function in the select list repeats rows by a masked value (row count = length)', async () => {
    const r = await query(a, 'SELECT customer_id, generate_series(1, length(phone)) AS g FROM customer WHERE customer_id = 1');
    expect(r.rows.length).not.toBe(a.secret.phone.length);
  });

  test('V2i window ORDER BY on a masked column sorts the (unmasked) ids: ordering by e-mail leaks', async () => {
    const r = await query(a, 'SELECT customer_id, row_number() OVER (ORDER BY email) AS n FROM customer WHERE customer_id <= 5');
    const expected = (await a.admin.query('SELECT customer_id FROM customer WHERE customer_id <= 5 ORDER BY email')).rows.map((x) => x.customer_id);
    // Safe: refused like ORDER BY email (policy_denied).
    expect(r.kind).toBe('refused');
    expect(r.rows.map((x) => x.customer_id)).not.toEqual(expected);
  });

  test('V2j DISTINCT over a masked expression: the row count reveals how many distinct values exist', async () => {
    const r = await query(a, 'SELECT DISTINCT substr(phone, 1, 3) AS p FROM customer');
    expect(r.kind).toBe('refused');
  });

  test('V2k error oracle: the SQLSTATE of a failed statement tells whether a guess about a masked value was right', async () => {
    const guess = (prefix: string) => query(a, `SELECT 1 / (CASE WHEN phone LIKE '${prefix}%' THEN 0 ELSE 1 END) AS x FROM customer WHERE customer_id = 1`);
    const right = await guess(a.secret.phone.slice(0, 3));
    const wrong = await guess('+9');
    // Safe: refused before execution (predicate on a masked column inside CASE), so both answers are the same.
    expect([right.kind, right.code]).toEqual([wrong.kind, wrong.code]);
    expect(right.kind).toBe('refused');
  });

  // ---------------------------------------------------------------------------------------------
  // V3 (high): masked values are laundered into cleartext through an (approved) write.
  // ---------------------------------------------------------------------------------------------
  test('V3 an INSERT ... SELECT phone FROM customer is queued; once approved, the phone reads back in cleartext', async () => {
    const before = await sourceState(a);
    const w = await query(a, 'INSERT INTO playlist (playlist_id, name) SELECT 900000 + customer_id, phone FROM customer WHERE customer_id = 1');
    // Safe: refused at analysis (a write whose values derive from a masked column), never queued for a human to miss.
    if (w.kind === 'queued') {
      const [appr] = (await listApprovals(a.env.db, {})).filter((x) => x.id === w.sc.approval_id);
      await approveAndExecute(a.env.db, appr.id, { operator: 'ops-reviewer', connectors: a.env.gateway.connectors });
      const back = await query(a, 'SELECT name FROM playlist WHERE playlist_id = 900001');
      await a.admin.query('DELETE FROM playlist WHERE playlist_id = 900001');
      expect(leaks(back.raw, a.secret.phone)).toBe(false);
    }
    expect(w.kind).toBe('refused');
    expect(await sourceState(a)).toBe(before);
  });

  // ---------------------------------------------------------------------------------------------
  // V4 (medium): existence and shape of relations the caller may not read or describe.
  // ---------------------------------------------------------------------------------------------
  test('V4a to_regclass / ::regclass / has_table_privilege tell an ungranted relation from a missing one', async () => {
    const narrow = await narrowIdentity(a, 'narrow-v4a', ['album']);
    const yes = await query(a, "SELECT to_regclass('public.customer') AS r", {}, narrow.apiKey);
    const no = await query(a, "SELECT to_regclass('public.no_such_table') AS r", {}, narrow.apiKey);
    const cast = await query(a, "SELECT 'employee'::regclass::oid AS o", {}, narrow.apiKey);
    const priv = await query(a, "SELECT has_table_privilege('employee', 'SELECT') AS p", {}, narrow.apiKey);
    expect(yes.raw.includes('customer') && yes.kind === 'rows').toBe(false);
    expect([yes.kind, yes.code]).toEqual([no.kind, no.code]);
    expect(cast.kind).not.toBe('rows');
    expect(priv.kind).not.toBe('rows');
  });

  test('V4b the row type of an ungranted table lists all its columns (CAST(NULL AS t) in FROM, jsonb_populate_record)', async () => {
    const narrow = await narrowIdentity(a, 'narrow-v4b', ['album']);
    const r1 = await query(a, 'SELECT * FROM CAST(NULL AS employee) AS x', {}, narrow.apiKey);
    const r2 = await query(a, "SELECT to_jsonb(jsonb_populate_record(NULL::customer, '{}')) AS cols", {}, narrow.apiKey);
    expect(r1.raw).not.toContain('birth_date');
    expect(r2.raw).not.toContain('support_rep_id');
  });

  test('V4c refusal messages differ for an ungranted table and a missing one, and name a column of the ungranted table', async () => {
    const narrow = await narrowIdentity(a, 'narrow-v4c', ['album']);
    const ungranted = await query(a, 'SELECT * FROM employee', {}, narrow.apiKey);
    const missing = await query(a, 'SELECT * FROM no_such_table', {}, narrow.apiKey);
    const badCol = await query(a, 'SELECT no_such_col FROM employee', {}, narrow.apiKey);
    const goodCol = await query(a, 'SELECT birth_date FROM employee', {}, narrow.apiKey);
    expect(ungranted.kind).toBe('refused');
    expect(ungranted.sc.message).not.toMatch(/employee_id/);
    expect(ungranted.sc.message.replace(/employee/g, 'X')).toBe(missing.sc.message.replace(/no_such_table/g, 'X'));
    expect(badCol.sc.message.replace(/no_such_col/g, 'C')).toBe(goodCol.sc.message.replace(/birth_date/g, 'C'));
  });

  // ---------------------------------------------------------------------------------------------
  // V5 (medium): upstream connection details reach the agent.
  // ---------------------------------------------------------------------------------------------
  test('V5 reader role, database name, server address, port and version are returned (each probe on its own)', async () => {
    const port = new URL(a.env.sourceUrl).port || '5432';
    const probes: Array<[string, RegExp | string]> = [
      ['SELECT current_user AS u', a.env.demo.readerRole],
      ['SELECT session_user AS u', a.env.demo.readerRole],
      ['SELECT user AS u', a.env.demo.readerRole],
      ['SELECT current_database() AS d', a.env.demo.databaseName],
      ['SELECT current_catalog AS d', a.env.demo.databaseName],
      ["SELECT current_setting('port') AS p", new RegExp(`"${port}"`)],
      ["SELECT current_setting('listen_addresses') AS l", /127\.0\.0\.1|localhost|\*/],
      ['SELECT version() AS v', /PostgreSQL \d+/],
      ["SELECT current_setting('server_version') AS v", /\d+\.\d+/],
      ['SELECT pg_get_userbyid(10) AS su', /"postgres"|"root"/],
    ];
    const leaked: string[] = [];
    for (const [sql, secret] of probes) {
      const r = await query(a, sql);
      const hit = typeof secret === 'string' ? r.raw.includes(secret) : secret.test(JSON.stringify(r.rows));
      if (r.kind === 'rows' && hit) leaked.push(`${sql} → ${JSON.stringify(r.rows).slice(0, 120)}`);
    }
    expect(leaked).toEqual([]);
  });

  // ---------------------------------------------------------------------------------------------
  // V6 (low, demo configuration): the unmasked fax column carries the masked phone number.
  // ---------------------------------------------------------------------------------------------
  test('V6 the demo masks customer.phone but not customer.fax, which often holds the same number', async () => {
    const same = (await a.admin.query('SELECT customer_id, phone FROM customer WHERE fax = phone ORDER BY customer_id LIMIT 1')).rows[0];
    expect(same).toBeDefined();
    const r = await query(a, `SELECT customer_id, fax FROM customer WHERE customer_id = ${same.customer_id}`);
    expect(leaks(r.raw, same.phone)).toBe(false);
  });
});
