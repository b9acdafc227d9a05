/**
 * Reads through PostgresSourceConnector against the machine's PostgreSQL (sql-safety layers 4 and 6):
 * read-only, time-limited connections from startup parameters, one round trip per read, the
 * agent's SQL unwrapped over the extended protocol, row and byte caps, connection hygiene,
 * statement timeouts and cancellation (issue 5 item 5).
 */
import { PostgresSourceConnector, SourceError, type ReadResult } from '../../../src/sources/postgres/connector';
import { scanCatalog } from '../../../src/sources/postgres/catalog';
import { NAMED_STATEMENT_CHARS_PER_CONNECTION, NAMED_STATEMENT_MAX_CHARS, STATEMENTS_PER_CONNECTION } from '../../../src/sources/postgres/portal-read';
import { jsonText, RawJson } from '../../../src/sources/postgres/raw-json';
import { createSourceDb, sleep, waitFor, type SourceDb } from './source-db';
import { startProxy, type Proxy } from './fakes';

const BIG = { maxRows: 1000, maxBytes: 10_000_000 };
let src: SourceDb;
const open: PostgresSourceConnector[] = [];
function connector(overrides: Parameters<SourceDb['settings']>[0] = {}, id = 'chinook'): PostgresSourceConnector {
  const c = new PostgresSourceConnector(id, src.settings(overrides));
  open.push(c);
  return c;
}
async function pidOf(c: PostgresSourceConnector): Promise<number> {
  return (await c.read('SELECT pg_backend_pid() AS pid', [], BIG)).rows[0].pid as number;
}

beforeAll(async () => {
  src = await createSourceDb('conn_read', { extraSql: 'CREATE SEQUENCE il_seq;' });
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
});
afterAll(async () => {
  await src?.drop();
});

describe('results', () => {
  test('fields, rows and rowsArray, with bound parameters and parsed types', async () => {
    const c = connector();
    const r = await c.read('SELECT artist_id, name FROM artist WHERE artist_id = ANY($1::int[]) ORDER BY 1', [[1, 2]], BIG);
    expect(r.fields).toEqual([
      { name: 'artist_id', dataTypeId: 23 },
      { name: 'name', dataTypeId: 1043 },
    ]);
    expect(r.rows).toEqual([
      { artist_id: 1, name: 'AC/DC' },
      { artist_id: 2, name: 'Accept' },
    ]);
    expect(r.rowsArray).toEqual([
      [1, 'AC/DC'],
      [2, 'Accept'],
    ]);
    expect(r.truncated).toBe(false);
    expect(r.bytes).toBe(Buffer.byteLength(JSON.stringify(r.rows)));
  });

  test('duplicate column names: the later wins in rows, rowsArray keeps both; "__proto__" is a plain key', async () => {
    const c = connector();
    const r = await c.read(`SELECT 1 AS a, 2 AS a, '{"polluted":true}'::json AS "__proto__"`, [], BIG);
    expect(r.rows[0].a).toBe(2);
    expect(r.rowsArray[0]).toEqual([1, 2, new RawJson('{"polluted":true}')]);
    expect(Object.getPrototypeOf(r.rows[0])).toBe(Object.prototype);
    expect(Object.keys(r.rows[0])).toEqual(['a', '__proto__']);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(jsonText(r.rows[0])).toBe('{"a":2,"__proto__":{"polluted":true}}');
  });

  test('row cap: the portal fetches maxRows + 1; truncated only when more rows exist', async () => {
    const c = connector();
    const total = Number((await c.read('SELECT count(*) AS n FROM genre', [], BIG)).rows[0].n);
    const capped = await c.read('SELECT * FROM genre ORDER BY 1', [], { maxRows: 5, maxBytes: 1e6 });
    expect(capped.rows).toHaveLength(5);
    expect(capped.truncated).toBe(true);
    const exact = await c.read('SELECT * FROM genre ORDER BY 1', [], { maxRows: total, maxBytes: 1e6 });
    expect(exact.rows).toHaveLength(total);
    expect(exact.truncated).toBe(false);
    const zero = await c.read('SELECT * FROM genre', [], { maxRows: 0, maxBytes: 1e6 });
    expect(zero.rows).toHaveLength(0);
    expect(zero.truncated).toBe(true);
    const none = await c.read('SELECT * FROM genre WHERE false', [], { maxRows: 0, maxBytes: 1e6 });
    expect(none.truncated).toBe(false);
    expect(none.fields.map((f) => f.name)).toEqual(['genre_id', 'name']);
  });

  test('a huge set is not materialised: generate_series(1, 1e9) with maxRows 3 returns at once', async () => {
    const c = connector();
    const t0 = Date.now();
    const r = await c.read('SELECT generate_series(1, 1000000000) AS g', [], { maxRows: 3, maxBytes: 1e6 });
    expect(r.rows).toEqual([{ g: 1 }, { g: 2 }, { g: 3 }]);
    expect(r.truncated).toBe(true);
    expect(Date.now() - t0).toBeLessThan(2000);
  });

  test('byte cap: rows stop before the JSON size passes maxBytes; bytes is the exact JSON size (UTF-8); no row fitting is result_too_large', async () => {
    const c = connector();
    const sql = `SELECT g, repeat('é', 50) AS s FROM generate_series(1, 100) g`;
    const full = await c.read(sql, [], BIG);
    expect(full.bytes).toBe(Buffer.byteLength(JSON.stringify(full.rows), 'utf8'));
    const firstRow = Buffer.byteLength(JSON.stringify([full.rows[0]]), 'utf8');
    for (const maxBytes of [0, 2, 50]) {
      // Not even the first row fits: refused, as when the wire budget stops the first row.
      await expect(c.read(sql, [], { maxRows: 1000, maxBytes })).rejects.toMatchObject({ code: 'result_too_large', sourceFailure: false });
    }
    for (const maxBytes of [firstRow, 1000, full.bytes - 1, full.bytes]) {
      const r: ReadResult = await c.read(sql, [], { maxRows: 1000, maxBytes });
      const size = Buffer.byteLength(JSON.stringify(r.rows), 'utf8');
      expect(r.bytes).toBe(size);
      if (maxBytes >= 2) expect(r.bytes).toBeLessThanOrEqual(maxBytes);
      expect(r.truncated).toBe(maxBytes < full.bytes);
      expect(r.rowsArray).toHaveLength(r.rows.length);
    }
  });

  test("the agent's SQL is never wrapped: trailing comments and quoted semicolons work", async () => {
    const c = connector();
    expect((await c.read('SELECT 1 AS x -- a trailing comment', [], BIG)).rows).toEqual([{ x: 1 }]);
    expect((await c.read("SELECT 'a;b' AS x /* c */", [], BIG)).rows).toEqual([{ x: 'a;b' }]);
    expect((await c.read('TABLE media_type', [], { maxRows: 1, maxBytes: 1e6 })).truncated).toBe(true);
  });
});

describe('value mapping of types new to the source (issue 23)', () => {
  test('an enum array on first sight is loaded from pg_type and its rows decoded again: the statement runs once; a read the wire budget ended is decoded again and trimmed to the byte cap', async () => {
    const suffix = Math.random().toString(36).slice(2, 8);
    await src.admin.query(`CREATE TYPE il_mood_${suffix} AS ENUM ('sad', 'happy'); GRANT USAGE ON TYPE il_mood_${suffix} TO ${src.readerRole}`);
    const proxy: Proxy = await startProxy({ host: src.host, port: src.port });
    try {
      const c = connector({ host: '127.0.0.1', port: proxy.port, pool_size: 1 });
      await c.read('SELECT 1', [], BIG); // opens the connection
      proxy.reset();
      const small = await c.read(`SELECT '{sad,happy}'::il_mood_${suffix}[] AS m FROM pg_catalog.generate_series(1, 3)`, [], BIG);
      expect(small.rowsArray).toEqual([[['sad', 'happy']], [['sad', 'happy']], [['sad', 'happy']]]);
      expect(small.rows).toEqual([{ m: ['sad', 'happy'] }, { m: ['sad', 'happy'] }, { m: ['sad', 'happy'] }]);
      expect(small.truncatedBy).toBeNull();
      expect(small.bytes).toBe(Buffer.byteLength(JSON.stringify(small.rows), 'utf8'));
      // The read (Parse/Bind/Describe/Execute/Sync), then pg_type's lookup: no second Execute of the read.
      expect(proxy.clientMessages).toEqual(['P', 'B', 'D', 'E', 'S', 'P', 'B', 'D', 'E', 'S']);
      // Known now: the next read decodes as it goes.
      proxy.reset();
      expect((await c.read(`SELECT '{happy}'::il_mood_${suffix}[] AS m`, [], BIG)).rowsArray).toEqual([[['happy']]]);
      expect(proxy.clientMessages).toEqual(['P', 'B', 'D', 'E', 'S']);
    } finally {
      await proxy.close();
    }
    // The redecoded JSON is longer than the text was ('{sad,happy}' → ["sad","happy"]): rows are dropped from the end to the byte cap.
    // Ten rows of text take 201 bytes of JSON, ten decoded 221: a cap of 210 keeps nine, as a read with the type known does.
    const tenRows = `SELECT '{sad,happy}'::il_mood_${suffix}[] AS m FROM pg_catalog.generate_series(1, 10)`;
    const fresh = connector();
    const capped = await fresh.read(tenRows, [], { maxRows: 100, maxBytes: 210 });
    expect({ truncated: capped.truncated, truncatedBy: capped.truncatedBy, bytes: capped.bytes, rows: capped.rowsArray.length }).toEqual({ truncated: true, truncatedBy: 'max_bytes', bytes: 199, rows: 9 });
    expect(capped.rowsArray).toEqual(Array.from({ length: 9 }, () => [['sad', 'happy']]));
    const warm = await fresh.read(tenRows, [], { maxRows: 100, maxBytes: 210 });
    expect({ truncatedBy: warm.truncatedBy, bytes: warm.bytes, rows: warm.rowsArray }).toEqual({ truncatedBy: 'max_bytes', bytes: 199, rows: capped.rowsArray });
    // A fresh connector (fresh decoders) and a read far past the wire budget.
    const big = await connector().read(`SELECT '{sad,happy,NULL}'::il_mood_${suffix}[] AS m, pg_catalog.repeat('x', 100) AS pad FROM pg_catalog.generate_series(1, 200000)`, [], { maxRows: 1_000_000, maxBytes: 50_000 });
    expect(big.truncated).toBe(true);
    expect(big.truncatedBy).toBe('max_bytes');
    expect(big.rowsArray.length).toBeGreaterThan(100);
    for (const row of big.rowsArray) expect(row[0]).toEqual(['sad', 'happy', null]);
    expect(big.bytes).toBe(Buffer.byteLength(JSON.stringify(big.rows), 'utf8'));
    expect(big.bytes).toBeLessThanOrEqual(50_000);
  });
});

describe('layer 4: read-only, extended protocol, one round trip', () => {
  test('stacked statements are refused by PostgreSQL (extended protocol); nothing runs', async () => {
    const c = connector();
    const before = (await c.read('SELECT count(*)::int AS n FROM artist', [], BIG)).rows[0].n;
    const err = await c.read('SELECT 1; DELETE FROM artist', [], BIG).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SourceError);
    expect(err).toMatchObject({ code: 'execution_failed', sqlState: '42601', sourceFailure: false });
    expect((await c.read('SELECT count(*)::int AS n FROM artist', [], BIG)).rows[0].n).toBe(before);
  });

  test('connections start read-only: writes (also in a CTE) fail with 25006 even for a role that could write', async () => {
    const c = connector({ reader: { user: src.writerRole } });
    for (const sql of [
      `INSERT INTO genre VALUES (9999, 'x')`,
      `WITH d AS (DELETE FROM genre WHERE genre_id = 1 RETURNING *) SELECT * FROM d`,
      `SELECT nextval('il_seq')`,
    ]) {
      const err = await c.read(sql, [], BIG).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'execution_failed', sqlState: '25006' });
    }
    const r = await c.read(`SELECT count(*)::int AS n FROM genre WHERE genre_id IN (1, 9999)`, [], BIG);
    expect(r.rows[0].n).toBe(1);
  });

  test('startup parameters fix read-only and the timeouts; a read leaves the session unchanged and idle', async () => {
    const c = connector({ pool_size: 1, statement_timeout_ms: 7000, lock_timeout_ms: 1500, idle_in_transaction_timeout_ms: 9000 });
    const pid = await pidOf(c);
    for (let i = 0; i < 20; i++) await c.read('SELECT * FROM track LIMIT 50', [], { maxRows: 10, maxBytes: 1e6 });
    await c.read('SELECT 1 FROM nope', [], BIG).catch(() => undefined); // a plain statement error keeps the connection
    const state = await c.withReader(async (client) => {
      const r = await client.query(`SELECT current_setting('default_transaction_read_only') AS ro,
        current_setting('transaction_read_only') AS tro, current_setting('statement_timeout') AS st,
        current_setting('lock_timeout') AS lt, current_setting('idle_in_transaction_session_timeout') AS it,
        pg_backend_pid() AS pid, current_user AS who, now() = statement_timestamp() AS fresh_tx`);
      return { row: r.rows[0], tx: client.getTransactionStatus() };
    });
    expect(state.row).toEqual({ ro: 'on', tro: 'on', st: '7s', lt: '1500ms', it: '9s', pid, who: src.readerRole, fresh_tx: true });
    expect(state.tx).toBe('I');
    const mine = (await src.activity()).filter((a) => a.pid === pid);
    expect(mine).toHaveLength(1);
    expect(mine[0].state).toBe('idle');
    expect(mine[0].backend_xid).toBeNull();
  });

  test('one round trip per read: Parse/Bind/Describe/Execute/Sync in one flight, no BEGIN/SET/ROLLBACK', async () => {
    const proxy: Proxy = await startProxy({ host: src.host, port: src.port });
    try {
      const c = connector({ host: '127.0.0.1', port: proxy.port, pool_size: 1 });
      await c.read('SELECT 1', [], BIG); // opens the connection
      for (const [sql, params, maxRows] of [
        ['SELECT name FROM artist WHERE artist_id < $1', [50], 10],
        ['SELECT 1 AS one', [], 10],
        ['SELECT 1 FROM no_such_table', [], 10],
      ] as Array<[string, unknown[], number]>) {
        proxy.reset();
        await c.read(sql, params, { maxRows, maxBytes: 1e6 }).catch(() => undefined);
        expect(proxy.flights).toBe(1);
        expect(proxy.clientMessages).toEqual(['P', 'B', 'D', 'E', 'S']);
      }
      // A text seen before on the connection binds its named statement: no Parse, and no Describe
      // (its columns are known: a prepared statement's result type is fixed, 0A000 otherwise).
      proxy.reset();
      const again = await c.read('SELECT name FROM artist WHERE artist_id < $1', [3], { maxRows: 10, maxBytes: 1e6 });
      expect(proxy.flights).toBe(1);
      expect(proxy.clientMessages).toEqual(['B', 'E', 'S']);
      expect(again.fields).toEqual([{ name: 'name', dataTypeId: expect.any(Number) }]);
      expect(again.rows).toEqual([{ name: 'AC/DC' }, { name: 'Accept' }]);
      // A text whose Parse failed has no name: it is parsed again.
      proxy.reset();
      await c.read('SELECT 1 FROM no_such_table', [], { maxRows: 10, maxBytes: 1e6 }).catch(() => undefined);
      expect(proxy.clientMessages).toEqual(['P', 'B', 'D', 'E', 'S']);
      expect(proxy.connections).toBe(1);
    } finally {
      await proxy.close();
    }
  });

  test('named statements: one per text on the connection, exactly that text; a new connection parses again', async () => {
    const proxy: Proxy = await startProxy({ host: src.host, port: src.port });
    try {
      const c = connector({ host: '127.0.0.1', port: proxy.port, pool_size: 1 });
      const text = 'SELECT artist_id, name FROM artist WHERE artist_id = $1';
      for (const id of [1, 2, 3]) expect((await c.read(text, [id], BIG)).rows).toEqual([expect.objectContaining({ artist_id: id })]);
      const ps = await c.read("SELECT name, statement, parameter_types::text AS types FROM pg_prepared_statements WHERE statement NOT LIKE '%pg_prepared_statements%' ORDER BY name", [], BIG);
      expect(ps.rows).toEqual([{ name: 'interlock_r1', statement: text, types: '{integer}' }]);
      // COPY destroys the connection: its names go with it, and the fresh connection parses again.
      await c.read('COPY (SELECT 1) TO STDOUT', [], BIG).catch(() => undefined);
      await sleep(200); // the old connection's Terminate
      proxy.reset();
      expect((await c.read(text, [4], BIG)).rows).toEqual([expect.objectContaining({ artist_id: 4 })]);
      // The fresh connection first verifies the pinned settings it is not told in ParameterStatus
      // (one statement per connection, issue 22 item 2), then parses the text again.
      expect(proxy.clientMessages).toEqual(['P', 'B', 'D', 'E', 'S', 'P', 'B', 'D', 'E', 'S']);
      expect(proxy.connections).toBe(2);
    } finally {
      await proxy.close();
    }
  });

  test('a catalogue change under a named statement is not a failure: the text is parsed again, once', async () => {
    await src.admin.query('CREATE TABLE il_changing (id int PRIMARY KEY, a text); INSERT INTO il_changing VALUES (1, $$x$$); GRANT SELECT ON il_changing TO ' + src.readerRole);
    try {
      const c = connector({ pool_size: 1, breaker: { failure_threshold: 1, reset_timeout_ms: 60_000 } });
      const text = 'SELECT * FROM il_changing WHERE id = $1';
      for (let i = 0; i < 6; i++) expect((await c.read(text, [1], BIG)).rows).toEqual([{ id: 1, a: 'x' }]);
      const nameOf = async () => (await c.read('SELECT name FROM pg_prepared_statements WHERE statement = $1', [text], BIG)).rows.map((r) => r.name);
      const before = await nameOf();
      expect(before).toHaveLength(1);
      await src.admin.query('ALTER TABLE il_changing ADD COLUMN b int DEFAULT 7');
      const r = await c.read(text, [1], BIG);
      expect(r.rows).toEqual([{ id: 1, a: 'x', b: 7 }]);
      expect(r.fields.map((f) => f.name)).toEqual(['id', 'a', 'b']);
      expect(c.breakerState()).toBe('closed');
      // PostgreSQL refused the stale plan (0A000): the text was parsed under a new name, the old one closed.
      const after = await nameOf();
      expect(after).toHaveLength(1);
      expect(after).not.toEqual(before);
    } finally {
      await src.admin.query('DROP TABLE il_changing');
    }
  });

  test('a named statement read without Describe never answers with stale columns: a renamed column or a changed type is parsed again', async () => {
    await src.admin.query('CREATE TABLE il_renaming (id int PRIMARY KEY, a text); INSERT INTO il_renaming VALUES (1, $$12$$); GRANT SELECT ON il_renaming TO ' + src.readerRole);
    const proxy: Proxy = await startProxy({ host: src.host, port: src.port });
    try {
      const c = connector({ host: '127.0.0.1', port: proxy.port, pool_size: 1 });
      const text = 'SELECT * FROM il_renaming WHERE id = $1';
      for (let i = 0; i < 3; i++) expect((await c.read(text, [1], BIG)).rows).toEqual([{ id: 1, a: '12' }]);
      proxy.reset();
      await c.read(text, [1], BIG);
      expect(proxy.clientMessages).toEqual(['B', 'E', 'S']); // the kept columns
      await src.admin.query('ALTER TABLE il_renaming RENAME COLUMN a TO renamed');
      const renamed = await c.read(text, [1], BIG);
      expect(renamed.fields.map((f) => f.name)).toEqual(['id', 'renamed']);
      expect(renamed.rows).toEqual([{ id: 1, renamed: '12' }]);
      await src.admin.query('ALTER TABLE il_renaming ALTER COLUMN renamed TYPE int USING renamed::int');
      const retyped = await c.read(text, [1], BIG);
      expect(retyped.fields).toEqual([{ name: 'id', dataTypeId: 23 }, { name: 'renamed', dataTypeId: 23 }]);
      expect(retyped.rows).toEqual([{ id: 1, renamed: 12 }]);
      proxy.reset();
      await c.read(text, [1], BIG);
      expect(proxy.clientMessages).toEqual(['B', 'E', 'S']); // the new name's columns are kept in turn
      expect(c.breakerState()).toBe('closed');
    } finally {
      await proxy.close();
      await src.admin.query('DROP TABLE il_renaming');
    }
  });

  test(`at most ${STATEMENTS_PER_CONNECTION} named statements per connection: the least recently used is closed`, async () => {
    const c = connector({ pool_size: 1 }, 'lru');
    const texts = Array.from({ length: STATEMENTS_PER_CONNECTION + 5 }, (_, i) => `SELECT ${i} AS n`);
    for (const t of texts) await c.read(t, [], BIG);
    const ps = await c.read('SELECT statement FROM pg_prepared_statements ORDER BY name', [], BIG);
    const left = ps.rows.map((r) => r.statement);
    expect(left).toHaveLength(STATEMENTS_PER_CONNECTION);
    expect(left).toContain('SELECT statement FROM pg_prepared_statements ORDER BY name');
    expect(left).toContain(texts[texts.length - 1]);
    expect(left).not.toContain(texts[5]);
  });

  test(`a text over ${NAMED_STATEMENT_MAX_CHARS} characters runs as the unnamed statement and is never kept (red team F1)`, async () => {
    const c = connector({ pool_size: 1 }, 'long');
    const long = `SELECT 1 AS n WHERE '${'x'.repeat(NAMED_STATEMENT_MAX_CHARS)}' <> ''`;
    for (let i = 0; i < 3; i++) expect((await c.read(long, [], BIG)).rows).toEqual([{ n: 1 }]);
    const ps = await c.read('SELECT name, length(statement) AS chars FROM pg_prepared_statements ORDER BY name', [], BIG);
    expect(ps.rows).toEqual([{ name: 'interlock_r1', chars: 'SELECT name, length(statement) AS chars FROM pg_prepared_statements ORDER BY name'.length }]);
  });

  test(`at most ${NAMED_STATEMENT_CHARS_PER_CONNECTION} characters of named statements per connection: the least recently used go first`, async () => {
    const c = connector({ pool_size: 1 }, 'chars');
    // 40 distinct texts of about 4,000 characters: 160,000 in all, over the per-connection budget.
    const texts = Array.from({ length: 40 }, (_, i) => `SELECT ${i} AS n WHERE '${'y'.repeat(NAMED_STATEMENT_MAX_CHARS - 64)}' <> ''`);
    for (const t of texts) await c.read(t, [], BIG);
    const ps = await c.read('SELECT statement FROM pg_prepared_statements ORDER BY name', [], BIG);
    const kept = ps.rows.map((r) => r.statement as string);
    const chars = kept.reduce((n, t) => n + t.length, 0);
    expect(chars).toBeLessThanOrEqual(NAMED_STATEMENT_CHARS_PER_CONNECTION);
    expect(kept).toContain(texts[39]);
    expect(kept).not.toContain(texts[0]);
    expect(kept.filter((t) => texts.includes(t)).length).toBe(Math.floor((NAMED_STATEMENT_CHARS_PER_CONNECTION - 'SELECT statement FROM pg_prepared_statements ORDER BY name'.length) / texts[39].length));
  });

  test('a statement that changes a reported session parameter fails and its connection is destroyed', async () => {
    const c = connector({ pool_size: 1 });
    const pid = await pidOf(c);
    const err = await c.read(`SELECT set_config('default_transaction_read_only', 'off', false)`, [], BIG).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'execution_failed', sourceFailure: false });
    const after = await c.read(`SELECT pg_backend_pid() AS pid, current_setting('default_transaction_read_only') AS ro`, [], BIG);
    expect(after.rows[0].pid).not.toBe(pid);
    expect(after.rows[0].ro).toBe('on');
  });

  test('COPY over a read is refused and its connection destroyed', async () => {
    const c = connector({ pool_size: 1 });
    const pid = await pidOf(c);
    const err = await c.read('COPY (SELECT 1) TO STDOUT', [], BIG).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'execution_failed' });
    expect(await pidOf(c)).not.toBe(pid);
  });

  test('statement errors (syntax, unknown table, permission) do not count against the breaker', async () => {
    const c = connector({ breaker: { failure_threshold: 2, reset_timeout_ms: 60_000 } });
    await src.admin.query(`CREATE TABLE IF NOT EXISTS secret_t (x int)`);
    for (const sql of ['SELEC 1', 'SELECT * FROM no_such_table', 'SELECT * FROM secret_t', 'SELECT 1/0', 'SELECT 1; SELECT 2']) {
      for (let i = 0; i < 3; i++) {
        const err = await c.read(sql, [], BIG).catch((e: unknown) => e);
        expect(err).toMatchObject({ code: 'execution_failed', sourceFailure: false });
        expect((err as SourceError).message).not.toMatch(/secret_t|no_such_table|SELEC/);
      }
    }
    expect(c.breakerState()).toBe('closed');
  });

  test('concurrent reads share a small pool; pool size bounds the sessions', async () => {
    const c = connector({ pool_size: 2 }, 'concurrent');
    const results = await Promise.all(Array.from({ length: 12 }, (_, i) => c.read('SELECT $1::int AS i, pg_sleep(0.02)', [i], BIG)));
    expect(results.map((r) => r.rows[0].i)).toEqual(Array.from({ length: 12 }, (_, i) => i));
    const sessions = (await src.activity()).filter((a) => a.application_name === 'interlock:concurrent:reader');
    expect(sessions.length).toBeLessThanOrEqual(2);
  });

  test('waiting too long for a pooled connection answers source_busy (retry hint) and is not a source failure', async () => {
    const c = connector({ pool_size: 1, connect_timeout_ms: 300, breaker: { failure_threshold: 1 } });
    const long = c.read('SELECT pg_sleep(1.2)', [], BIG);
    await sleep(50);
    const err = await c.read('SELECT 1', [], BIG).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'source_busy', sourceFailure: false, retryAfterMs: 1000 });
    await long;
    expect(c.breakerState()).toBe('closed');
  });

  test('withReader lends a read-only connection to the catalog scanner and takes it back', async () => {
    const c = connector({ pool_size: 1 });
    const pid = await pidOf(c);
    const cat = await c.withReader((client) => scanCatalog(client));
    expect(cat.relations.some((r) => r.name === 'artist')).toBe(true);
    expect(await pidOf(c)).toBe(pid);
    await expect(c.withReader(async () => Promise.reject(new Error('boom at db.internal:5432')))).rejects.toMatchObject({ code: 'execution_failed' });
    expect(await pidOf(c)).not.toBe(pid); // destroyed after fn threw
    const left = await c.withReader(async (client) => {
      await client.query('BEGIN');
      return client.query('SELECT pg_backend_pid() AS pid');
    });
    expect(await pidOf(c)).not.toBe(left.rows[0].pid); // a transaction left open: destroyed
  });
});

describe('timeouts and cancellation (issue 5 item 5)', () => {
  test('statement_timeout maps to statement_timeout; the connection is replaced; server-enforced timeouts do not open the breaker', async () => {
    const c = connector({ pool_size: 1, statement_timeout_ms: 300, breaker: { failure_threshold: 1, reset_timeout_ms: 60_000 } });
    const pid = await pidOf(c);
    const t0 = Date.now();
    const err = await c.read('SELECT pg_sleep(5)', [], BIG).catch((e: unknown) => e);
    expect(Date.now() - t0).toBeLessThan(1500);
    expect(err).toBeInstanceOf(SourceError);
    expect(err).toMatchObject({ code: 'statement_timeout', sqlState: '57014', sourceFailure: false });
    expect((err as SourceError).message).toBe("The statement ran longer than the source's statement timeout and was cancelled.");
    expect(await pidOf(c)).not.toBe(pid);
    // One agent's slow statements must not make the source unavailable to everyone.
    for (let i = 0; i < 3; i++) await expect(c.read('SELECT pg_sleep(5)', [], BIG)).rejects.toMatchObject({ code: 'statement_timeout' });
    expect(c.breakerState()).toBe('closed');
    expect((await c.read('SELECT 1 AS ok', [], BIG)).rows).toEqual([{ ok: 1 }]);
  });

  test('abort cancels the running statement in PostgreSQL within 1 s, drops that connection, and the pool stays healthy', async () => {
    const c = connector({ pool_size: 2 });
    const ac = new AbortController();
    const p = c.read('SELECT pg_sleep(30)', [], { ...BIG, signal: ac.signal });
    p.catch(() => undefined);
    let pid = 0;
    expect(
      await waitFor(async () => {
        const a = (await src.activity()).find((x) => x.query === 'SELECT pg_sleep(30)' && x.state === 'active');
        pid = a?.pid ?? 0;
        return pid !== 0;
      }, 2000),
    ).toBeGreaterThanOrEqual(0);
    await sleep(Math.max(0, 300));
    const tAbort = Date.now();
    ac.abort();
    const err = await p.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SourceError);
    expect(err).toMatchObject({ code: 'cancelled', sourceFailure: false });
    expect(Date.now() - tAbort).toBeLessThan(200);
    const gone = await waitFor(async () => {
      const a = (await src.activity()).find((x) => x.pid === pid);
      return !a || a.state !== 'active' || a.query !== 'SELECT pg_sleep(30)';
    }, 1000);
    expect(gone).toBeGreaterThanOrEqual(0);
    expect(Date.now() - tAbort).toBeLessThan(1000);
    // Pool healthy: the cancelled session is gone for good, reads work at full pool width.
    expect(await waitFor(async () => !(await src.activity()).some((x) => x.pid === pid), 2000)).toBeGreaterThanOrEqual(0);
    const rs = await Promise.all([0, 1, 2, 3].map(() => c.read('SELECT pg_backend_pid() AS pid, pg_sleep(0.05)', [], BIG)));
    expect(rs.every((r) => r.rows[0].pid !== pid)).toBe(true);
    expect(c.breakerState()).toBe('closed');
  });

  test('aborts at any moment (before, during or right after sending) never leave the statement running', async () => {
    const c = connector({ pool_size: 3 }, 'race');
    await Promise.all([0, 1, 2].map(() => c.read('SELECT 1', [], BIG)));
    const tag = 'SELECT pg_sleep(30) /* abort race */';
    for (let i = 0; i < 30; i++) {
      const ac = new AbortController();
      const p = c.read(tag, [], { ...BIG, signal: ac.signal }).catch((e: SourceError) => e.code);
      const d = i % 6;
      if (d === 0) await new Promise((r) => setImmediate(r));
      else await sleep(d - 1);
      ac.abort();
      expect(await p).toBe('cancelled');
    }
    const left = await waitFor(async () => !(await src.activity()).some((a) => a.query === tag && a.state === 'active'), 1500);
    expect(left).toBeGreaterThanOrEqual(0);
    expect((await c.read('SELECT 1 AS ok', [], BIG)).rows).toEqual([{ ok: 1 }]);
  });

  test('an already-aborted signal rejects at once without touching the network', async () => {
    const proxy = await startProxy({ host: src.host, port: src.port });
    try {
      const c = connector({ host: '127.0.0.1', port: proxy.port });
      const ac = new AbortController();
      ac.abort();
      await expect(c.read('SELECT 1', [], { ...BIG, signal: ac.signal })).rejects.toMatchObject({ code: 'cancelled' });
      expect(proxy.connections).toBe(0);
    } finally {
      await proxy.close();
    }
  });

  test('an abort while waiting for a pooled connection rejects at once; the busy read is unaffected', async () => {
    const c = connector({ pool_size: 1 });
    const busy = c.read('SELECT pg_sleep(0.6) AS s, 1 AS ok', [], BIG);
    await sleep(50);
    const ac = new AbortController();
    const waiting = c.read('SELECT 2', [], { ...BIG, signal: ac.signal });
    await sleep(50);
    const t0 = Date.now();
    ac.abort();
    await expect(waiting).rejects.toMatchObject({ code: 'cancelled' });
    expect(Date.now() - t0).toBeLessThan(100);
    expect((await busy).rows[0].ok).toBe(1);
    expect((await c.read('SELECT 3 AS x', [], BIG)).rows).toEqual([{ x: 3 }]);
  });

  test('a connection cut mid-query is an opaque source failure and the pool recovers', async () => {
    const proxy = await startProxy({ host: src.host, port: src.port });
    try {
      const c = connector({ host: '127.0.0.1', port: proxy.port, pool_size: 1, breaker: { failure_threshold: 3 } });
      await c.read('SELECT 1', [], BIG);
      const p = c.read('SELECT pg_sleep(2)', [], BIG);
      await sleep(200);
      proxy.cutAll();
      const err = await p.catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'execution_failed', sourceFailure: true, message: 'tool execution failed' });
      expect((await c.read('SELECT 7 AS x', [], BIG)).rows).toEqual([{ x: 7 }]);
      expect(proxy.connections).toBe(2);
    } finally {
      await proxy.close();
    }
  });
});
