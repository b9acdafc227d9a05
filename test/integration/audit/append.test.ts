/**
 * The audit writer's statement on real PostgreSQL (issue 13, src/audit/append.ts): named
 * statements parsed once per connection and reused for any batch size, the batch's
 * statement_timeout applying to the append only (past it nothing is stored and the session's
 * setting is untouched), a rejected batch not breaking the next one on the same connection, and the
 * chain still verifying.
 */
import pg from 'pg';
import { appendAuditRows, AUDIT_IDLE_TIMEOUT_MS, openAuditPool, toolCallRow } from '../../../src/audit/writer';
import { ChainLane } from '../../../src/audit/chain';
import { verifyAuditChain } from '../../../src/audit/verify';
import { holdChainLock, toolCallEvent } from '../../helpers/audit-events';
import { freshControlDb, type TestControlDb } from '../control/control-db';

let t: TestControlDb;
let pool: pg.Pool;
beforeAll(async () => {
  t = await freshControlDb('ctl_auditappend');
  pool = new pg.Pool({ connectionString: t.db.url, max: 1 });
  pool.on('error', () => undefined); // the idle client terminated on purpose below
});
afterAll(async () => {
  await pool.end();
  await t.cleanup();
});

const rows = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => toolCallRow(toolCallEvent(`${prefix}_${i}`)));
const stored = async (prefix: string) =>
  (await t.db.pool.query<{ request_id: string; batch_id: string }>('SELECT request_id, batch_id::text FROM audit_events WHERE request_id LIKE $1 ORDER BY id', [`${prefix}_%`])).rows;

test('batches of 1, 3 and 8 events: one batch each, two statements prepared once on the connection', async () => {
  const ids = [];
  for (const n of [1, 3, 8]) ids.push(await appendAuditRows(pool, rows(`req_ap${n}`, n), 2000));
  for (const [i, n] of [1, 3, 8].entries()) {
    const r = await stored(`req_ap${n}`);
    expect(r.map((x) => x.request_id)).toEqual(Array.from({ length: n }, (_, k) => `req_ap${n}_${k}`));
    expect(new Set(r.map((x) => x.batch_id))).toEqual(new Set([ids[i]]));
  }
  const c = await pool.connect();
  try {
    const ps = await c.query('SELECT name, statement FROM pg_prepared_statements ORDER BY name');
    expect(ps.rows).toEqual([
      { name: 'interlock_audit_append_v2', statement: 'SELECT interlock_audit_append_v2($1) AS b' },
      { name: 'interlock_audit_timeout', statement: "SELECT set_config('statement_timeout', $1, true)" },
    ]);
    expect((await c.query('SHOW statement_timeout')).rows).toEqual([{ statement_timeout: '0' }]);
  } finally {
    c.release();
  }
  expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, firstMismatch: null });
});

test('past its statement_timeout a batch stores nothing (57014), and the next batch on the connection commits', async () => {
  // Hold the chain lock so the append waits past its 150 ms bound.
  const holder = await t.db.pool.connect();
  try {
    await holdChainLock(holder);
    const started = Date.now();
    await expect(appendAuditRows(pool, rows('req_late', 2), 150)).rejects.toMatchObject({ code: '57014' });
    expect(Date.now() - started).toBeLessThan(1500);
  } finally {
    await holder.query('ROLLBACK');
    holder.release();
  }
  expect(await stored('req_late')).toEqual([]);
  const id = await appendAuditRows(pool, rows('req_after', 1), 2000);
  expect(await stored('req_after')).toEqual([{ request_id: 'req_after_0', batch_id: id }]);
});

test('a batch the database rejects (23514) leaves the connection usable; a new connection prepares again', async () => {
  // Rows are normalised before they are sent, so only a constraint the writer cannot know about rejects one.
  await t.db.pool.query("ALTER TABLE audit_events ADD CONSTRAINT test_no_poison CHECK (coalesce(details->>'note', '') <> 'poison')");
  try {
    const bad = [{ ...rows('req_bad', 1)[0], details: { note: 'poison' } }];
    await expect(appendAuditRows(pool, bad, 2000)).rejects.toMatchObject({ code: '23514' });
  } finally {
    await t.db.pool.query('ALTER TABLE audit_events DROP CONSTRAINT test_no_poison');
  }
  const c = await pool.connect();
  const pid = (await c.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0].p;
  c.release();
  await t.db.pool.query('SELECT pg_terminate_backend($1)', [pid]);
  // The pool's idle client died: the next batch fails with a connection error or runs on a fresh
  // connection, which has no prepared statements yet and must parse them.
  await appendAuditRows(pool, rows('req_fresh', 1), 2000).catch(() => appendAuditRows(pool, rows('req_fresh', 1), 2000));
  expect((await stored('req_fresh')).map((r) => r.request_id)).toEqual(['req_fresh_0']);
  expect(await stored('req_bad')).toEqual([]);
  expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, firstMismatch: null });
});

test("the gateway's audit pool (task h28c): each append statement is planned once per connection, never per batch, and idle connections are kept a minute", async () => {
  const audit = openAuditPool(t.db.url, 2000, undefined, 1);
  try {
    const lane = new ChainLane(audit);
    for (let i = 0; i < 7; i++) await lane.append(rows(`req_plan${i}`, 2), 2000);
    await lane.append(rows('req_plan_one', 1), 2000);
    const c = await audit.connect();
    try {
      expect((await c.query('SHOW plan_cache_mode')).rows).toEqual([{ plan_cache_mode: 'force_generic_plan' }]);
      // PostgreSQL's default plans a prepared statement anew for each of its first five executions (custom plans).
      expect((await c.query("SELECT name, generic_plans::int AS generic, custom_plans::int AS custom FROM pg_prepared_statements WHERE name LIKE 'interlock_audit_append_v3_%' ORDER BY name")).rows).toEqual([
        { name: 'interlock_audit_append_v3_1', generic: 1, custom: 0 },
        { name: 'interlock_audit_append_v3_2', generic: 7, custom: 0 },
      ]);
    } finally {
      c.release();
    }
    expect((audit as unknown as { options: { idleTimeoutMillis: number } }).options.idleTimeoutMillis).toBe(60_000);
    expect(AUDIT_IDLE_TIMEOUT_MS).toBe(60_000);
  } finally {
    await audit.end();
  }
  expect((await stored('req_plan')).length).toBe(15);
  expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, firstMismatch: null });
});

test("the gateway's audit pool: the statement_timeout comes with the connection, a batch sends only the append, and past that timeout it stores nothing (57014)", async () => {
  const audit = openAuditPool(t.db.url, 400); // connections start with statement_timeout 360 ms
  try {
    // Open the connection first: a batch that spends more than the 40 ms slack waiting for a new
    // connection (a loaded machine) rightly sends its own set_config, which is not what this tests.
    (await audit.connect()).release();
    const lane = new ChainLane(audit);
    await lane.append(rows('req_sess', 1), 400);
    const c = await audit.connect();
    try {
      expect((await c.query('SHOW statement_timeout')).rows).toEqual([{ statement_timeout: '360ms' }]);
      expect((await c.query('SELECT name FROM pg_prepared_statements ORDER BY name')).rows).toEqual([{ name: 'interlock_audit_append_v3_1' }]);
    } finally {
      c.release();
    }
    const holder = await t.db.pool.connect();
    try {
      await holdChainLock(holder); // also locks audit_batches against the format-3 INSERT
      await expect(lane.append(rows('req_sess_late', 1), 400)).rejects.toMatchObject({ code: '57014' });
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    expect(await stored('req_sess_late')).toEqual([]);
    await lane.append(rows('req_sess_after', 1), 400);
    expect((await stored('req_sess_after')).map((r) => r.request_id)).toEqual(['req_sess_after_0']);
  } finally {
    await audit.end();
  }
  expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, firstMismatch: null });
});

test("the gateway's audit pool: a committed batch leaves no client-side read timer behind (h28k: pg's query_timeout timer is cleared only through the submission's callback)", async () => {
  // openAuditPool gives its client a query_timeout (commit timeout + 1 s). Before h28k, AuditAppend
  // never called the callback pg wraps around that timer: each batch's timer stayed armed (holding
  // the batch) for 3 s after its commit, then fired for nothing.
  const audit = openAuditPool(t.db.url, 2000, undefined, 1);
  const timeouts = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
  try {
    const lane = new ChainLane(audit);
    await lane.append(rows('req_timer0', 1), 2000); // connects, reads the anchors, leaves the idle client's timer
    const before = timeouts();
    for (let i = 1; i <= 3; i++) await lane.append(rows(`req_timer${i}`, 2), 2000);
    expect(timeouts()).toBe(before);
  } finally {
    await audit.end();
  }
  expect((await stored('req_timer')).length).toBe(7);
});
