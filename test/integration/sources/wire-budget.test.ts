/**
 * The wire budget on real PostgreSQL (issue 10, Build 1), through PostgresSourceConnector: a row
 * that would take a read past its byte budget ends the read before pg decodes it. Rows before it
 * are answered with `truncated: true`; when not even one row fits the read is refused
 * `result_too_large`. The statement is cancelled and its connection destroyed; the source stays
 * healthy and other identities' reads are answered meanwhile. Values above V8's longest string
 * (about 512 M characters, which used to crash the process while pg decoded the row) are built
 * three ways: a `$1` parameter to repeat, `||` concatenation, and the string_agg aggregate.
 * Bounded: statement_timeout 30 s, run serially (`--runInBand` is not needed: one file, one worker).
 */
import { PostgresSourceConnector } from '../../../src/sources/postgres/connector';
import { createSourceDb, waitFor, type SourceDb } from './source-db';

jest.setTimeout(120_000);

const CALL = { maxRows: 1000, maxBytes: 4 * 1024 * 1024 };
let src: SourceDb;
let c: PostgresSourceConnector;

beforeAll(async () => {
  src = await createSourceDb('conn_wire', { chinook: false, extraSql: 'CREATE TABLE small (id int); INSERT INTO small SELECT generate_series(1, 3);' });
  c = new PostgresSourceConnector('wire', src.settings({ statement_timeout_ms: 30_000, pool_size: 4, max_concurrent_per_identity: 2 }));
});
afterAll(async () => {
  await c?.close();
  await src?.drop();
});

/** Reads by another identity while `hostile` runs: every one must be answered with its row. */
async function othersAnswered(hostile: Promise<unknown>): Promise<number> {
  let answered = 0;
  let done = false;
  void hostile.finally(() => (done = true));
  do {
    const r = await c.read('SELECT count(*)::int AS n FROM small', [], { ...CALL, identityId: 'bystander' });
    expect(r.rows).toEqual([{ n: 3 }]);
    answered++;
  } while (!done);
  return answered;
}

/** No backend of the source still runs a statement (the cancelled one ended; its connection is gone). */
async function noStatementLeft(): Promise<void> {
  expect(await waitFor(async () => (await src.activity()).every((a) => a.state !== 'active'), 20_000)).toBeGreaterThanOrEqual(0);
}

describe('a row past the budget ends the read before it is decoded', () => {
  test('rows before it are answered, truncated', async () => {
    const sql = "SELECT i, CASE WHEN i < 3 THEN 'small' ELSE repeat('x', 50000000) END AS v FROM generate_series(1, 5) AS i";
    const r = await c.read(sql, [], { ...CALL, identityId: 'hostile' });
    expect(r.truncated).toBe(true);
    expect(r.rows).toEqual([
      { i: 1, v: 'small' },
      { i: 2, v: 'small' },
    ]);
    expect(c.breakerState()).toBe('closed');
    await noStatementLeft();
  });

  test('not even one row fits: result_too_large, and the next read on the source works', async () => {
    await expect(c.read("SELECT repeat('x', 10000000) AS v", [], { ...CALL, identityId: 'hostile' })).rejects.toMatchObject({ code: 'result_too_large', sourceFailure: false });
    expect((await c.read('SELECT 1 AS one', [], CALL)).rows).toEqual([{ one: 1 }]);
  });

  test('many small rows stop at the running total', async () => {
    const r = await c.read("SELECT repeat('y', 1000) AS v FROM generate_series(1, 100000)", [], { maxRows: 100_000, maxBytes: 1024 * 1024, identityId: 'hostile' });
    expect(r.truncated).toBe(true);
    expect(r.rows.length).toBeGreaterThan(500);
    expect(r.rows.length).toBeLessThan(1400);
  });
});

describe('values past 512 M characters: the call is answered, the process and the source stay up', () => {
  test.each([
    ['a $1 parameter to repeat', "SELECT repeat('x', $1::int) AS v", [600_000_000]],
    ['|| concatenation', "SELECT repeat('x', 300000000) || repeat('y', 300000000) AS v", []],
    ['the string_agg aggregate', "SELECT string_agg(repeat('z', 1000000), '') AS v FROM generate_series(1, 600)", []],
  ])('%s', async (_how, sql, params) => {
    const hostile = c.read(sql as string, params as unknown[], { ...CALL, identityId: 'hostile' });
    const outcome = hostile.then(
      () => 'answered',
      (e: { code?: string }) => e.code,
    );
    expect(await othersAnswered(outcome)).toBeGreaterThan(0);
    expect(await outcome).toBe('result_too_large');
    expect(c.breakerState()).toBe('closed');
    await noStatementLeft();
  });
});
