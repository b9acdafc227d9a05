/**
 * Approved writes through PostgresSourceConnector (sql-safety layer 5): a separate writer role,
 * BEGIN; statement; COMMIT on one connection, rollback on error, safe error messages,
 * cancellation and statement timeouts.
 */
import { PostgresSourceConnector, SourceError } from '../../../src/sources/postgres/connector';
import { createSourceDb, sleep, waitFor, type SourceDb } from './source-db';

const BIG = { maxRows: 1000, maxBytes: 1e7 };
let src: SourceDb;
const open: PostgresSourceConnector[] = [];
function connector(overrides: Parameters<SourceDb['settings']>[0] = {}, id = 'w'): PostgresSourceConnector {
  const c = new PostgresSourceConnector(id, src.settings(overrides));
  open.push(c);
  return c;
}
async function count(where = 'true'): Promise<number> {
  return (await src.admin.query(`SELECT count(*)::int AS n FROM notes WHERE ${where}`)).rows[0].n;
}

beforeAll(async () => {
  src = await createSourceDb('conn_write', {
    chinook: false,
    extraSql: `CREATE TABLE notes (id int PRIMARY KEY, body text NOT NULL, who text NOT NULL DEFAULT current_user);`,
  });
});
beforeEach(async () => {
  await src.admin.query('TRUNCATE notes');
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
});
afterAll(async () => {
  await src?.drop();
});

test('a write runs as the writer role, commits, and returns rowCount', async () => {
  const c = connector();
  await expect(c.write('INSERT INTO notes (id, body) VALUES ($1, $2), ($3, $4)', [1, 'a', 2, 'b'])).resolves.toEqual({ rowCount: 2 });
  await expect(c.write('UPDATE notes SET body = body || $1', ['!'])).resolves.toEqual({ rowCount: 2 });
  await expect(c.write('DELETE FROM notes WHERE id = $1', [99])).resolves.toEqual({ rowCount: 0 });
  const rows = (await src.admin.query('SELECT id, body, who FROM notes ORDER BY id')).rows;
  expect(rows).toEqual([
    { id: 1, body: 'a!', who: src.writerRole },
    { id: 2, body: 'b!', who: src.writerRole },
  ]);
  // Reads keep using the reader role on their own pool.
  expect((await c.read('SELECT current_user AS u', [], BIG)).rows[0].u).toBe(src.readerRole);
});

test('the writer connection is left idle (no open transaction) and reused', async () => {
  const c = connector({ pool_size: 1 });
  await c.write('INSERT INTO notes (id, body) VALUES (1, $1)', ['x']);
  await c.write('INSERT INTO notes (id, body) VALUES (2, $1)', ['y']);
  const w = (await src.activity()).filter((a) => a.usename === src.writerRole);
  expect(w).toHaveLength(1);
  expect(w[0].state).toBe('idle');
  expect(w[0].backend_xid).toBeNull();
});

test('a constraint violation rolls back, names only the SQLSTATE class, keeps the connection', async () => {
  const c = connector({ pool_size: 1, breaker: { failure_threshold: 1 } });
  await c.write('INSERT INTO notes (id, body) VALUES (1, $1)', ['secret-value-1']);
  const err = await c.write('INSERT INTO notes (id, body) VALUES (2, $1), (1, $1)', ['secret-value-2']).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(SourceError);
  expect(err).toMatchObject({ code: 'execution_failed', sqlState: '23505', sourceFailure: false });
  expect((err as Error).message).toBe('tool execution failed: the statement failed (integrity_constraint_violation)');
  expect(JSON.stringify(err)).not.toMatch(/secret-value|notes|pkey|Key \(/);
  expect(await count()).toBe(1); // row 2 rolled back with the failed statement
  expect(c.breakerState()).toBe('closed');
  const w = (await src.activity()).filter((a) => a.usename === src.writerRole);
  expect(w).toHaveLength(1);
  expect(w[0].state).toBe('idle');
});

test('stacked statements are refused (extended protocol): nothing is committed', async () => {
  const c = connector();
  const err = await c.write(`INSERT INTO notes (id, body) VALUES (1, 'x'); DELETE FROM notes`, []).catch((e: unknown) => e);
  expect(err).toMatchObject({ code: 'execution_failed', sqlState: '42601' });
  expect(await count()).toBe(0);
});

test('a statement that ends the transaction itself is refused and its connection dropped', async () => {
  const c = connector({ pool_size: 1 });
  await expect(c.write('COMMIT', [])).rejects.toMatchObject({ code: 'execution_failed' });
  await expect(c.write('INSERT INTO notes (id, body) VALUES (5, $1)', ['ok'])).resolves.toEqual({ rowCount: 1 });
});

test('without a writer role, write() fails without touching the network; the reader role cannot write', async () => {
  const noWriter = connector({ writer: undefined });
  await expect(noWriter.write('INSERT INTO notes (id, body) VALUES (1, $1)', ['x'])).rejects.toMatchObject({ code: 'execution_failed', sourceFailure: false });
  const asReader = connector({ writer: { user: src.readerRole } });
  await expect(asReader.write('INSERT INTO notes (id, body) VALUES (1, $1)', ['x'])).rejects.toMatchObject({ code: 'execution_failed', sqlState: '42501' });
  expect(await count()).toBe(0);
});

test('abort cancels the write in PostgreSQL within 1 s; nothing is committed', async () => {
  const c = connector();
  const ac = new AbortController();
  const p = c.write(`INSERT INTO notes (id, body) SELECT 1, 'late' FROM pg_sleep(30)`, [], { signal: ac.signal });
  p.catch(() => undefined);
  let pid = 0;
  await waitFor(async () => {
    pid = (await src.activity()).find((a) => a.state === 'active' && a.query.includes('pg_sleep(30)'))?.pid ?? 0;
    return pid !== 0;
  }, 2000);
  expect(pid).not.toBe(0);
  await sleep(300);
  const t0 = Date.now();
  ac.abort();
  await expect(p).rejects.toMatchObject({ code: 'cancelled' });
  const gone = await waitFor(async () => {
    const a = (await src.activity()).find((x) => x.pid === pid);
    return !a || a.state !== 'active';
  }, 1000);
  expect(gone).toBeGreaterThanOrEqual(0);
  expect(Date.now() - t0).toBeLessThan(1000);
  await sleep(100);
  expect(await count()).toBe(0);
  await expect(c.write('INSERT INTO notes (id, body) VALUES (2, $1)', ['after'])).resolves.toEqual({ rowCount: 1 });
});

test('statement_timeout on a write maps to statement_timeout and rolls back', async () => {
  const c = connector({ statement_timeout_ms: 300 });
  const err = await c.write(`INSERT INTO notes (id, body) SELECT 1, 'slow' FROM pg_sleep(3)`, []).catch((e: unknown) => e);
  expect(err).toMatchObject({ code: 'statement_timeout' });
  expect(await count()).toBe(0);
});

test('lock_timeout: a write blocked by another session fails (statement error, not a source failure)', async () => {
  const c = connector({ lock_timeout_ms: 200, breaker: { failure_threshold: 1 } });
  await src.admin.query(`INSERT INTO notes (id, body) VALUES (1, 'locked')`);
  await src.admin.query('BEGIN');
  try {
    await src.admin.query('SELECT * FROM notes WHERE id = 1 FOR UPDATE');
    const err = await c.write(`UPDATE notes SET body = 'x' WHERE id = 1`, []).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'execution_failed', sqlState: '55P03', sourceFailure: false });
  } finally {
    await src.admin.query('ROLLBACK');
  }
  expect(c.breakerState()).toBe('closed');
});

test('task hw: a write guard that raises 22012 stops the statement in its transaction: nothing written, functionsChanged, the connection kept idle and reused', async () => {
  const c = connector({ pool_size: 1 });
  const tripped = { text: 'SELECT 1 WHERE 1 / ($1::int * 0) = 1', values: ['1'] };
  await expect(c.write('INSERT INTO notes (id, body) VALUES (1, $1)', ['guarded'], { guard: tripped })).resolves.toEqual({ rowCount: 0, functionsChanged: true });
  expect(await count()).toBe(0);
  // A guard that passes (no rows) lets the statement run in the same transaction.
  await expect(c.write('INSERT INTO notes (id, body) VALUES (2, $1)', ['ok'], { guard: { text: 'SELECT 1 WHERE false', values: [] } })).resolves.toEqual({ rowCount: 1 });
  expect(await count()).toBe(1);
  const w = (await src.activity()).filter((a) => a.usename === src.writerRole);
  expect(w).toHaveLength(1);
  expect(w[0].state).toBe('idle');
  expect(w[0].backend_xid).toBeNull();
});

test('task hw: a write guard that fails otherwise (another SQLSTATE, or rows) fails the write, rolled back', async () => {
  const c = connector();
  const bad = c.write('INSERT INTO notes (id, body) VALUES (1, $1)', ['x'], { guard: { text: 'SELECT $1::int', values: ['not a number'] } });
  await expect(bad).rejects.toBeInstanceOf(SourceError);
  await expect(bad).rejects.toMatchObject({ code: 'execution_failed', sqlState: '22P02' });
  await expect(c.write('INSERT INTO notes (id, body) VALUES (1, $1)', ['x'], { guard: { text: 'SELECT 1 WHERE $1::int = 1', values: ['1'] } })).rejects.toMatchObject({ code: 'execution_failed' });
  expect(await count()).toBe(0);
});
