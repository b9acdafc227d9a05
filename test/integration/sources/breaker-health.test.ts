/**
 * The breaker counts only source health (issue 10, Build 4), on real PostgreSQL: one identity
 * sending statements that make PostgreSQL raise an internal error from bad argument input
 * (`array_in` with type 0 → XX000), data exceptions (22012) and undefined objects (42P01) many
 * times over a failure threshold of 2 never opens the circuit, and another identity's reads are
 * answered throughout. A real source failure (the backend terminated by an administrator, 57P01)
 * still counts.
 */
import { PostgresSourceConnector } from '../../../src/sources/postgres/connector';
import { createSourceDb, sleep, waitFor, type SourceDb } from './source-db';

jest.setTimeout(60_000);

const CALL = { maxRows: 100, maxBytes: 1_000_000 };
let src: SourceDb;
const open: PostgresSourceConnector[] = [];
function connector(): PostgresSourceConnector {
  const c = new PostgresSourceConnector('health', src.settings({ breaker: { failure_threshold: 2, reset_timeout_ms: 60_000 } }));
  open.push(c);
  return c;
}

beforeAll(async () => {
  src = await createSourceDb('conn_health', { chinook: false, extraSql: 'CREATE TABLE t (id int); INSERT INTO t VALUES (1);' });
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
});
afterAll(async () => {
  await src?.drop();
});

test('internal errors from argument input, data exceptions and undefined objects never open the circuit', async () => {
  const c = connector();
  const statements: Array<[string, string]> = [
    ["SELECT array_in('{1}'::cstring, 0, 0)", 'XX000'],
    ['SELECT 1 / 0', '22012'],
    ['SELECT * FROM no_such_table', '42P01'],
  ];
  for (let round = 0; round < 10; round++) {
    for (const [sql, sqlState] of statements) {
      await expect(c.read(sql, [], { ...CALL, identityId: 'hostile' })).rejects.toMatchObject({ code: 'execution_failed', sourceFailure: false, sqlState });
    }
    expect(c.breakerState()).toBe('closed');
    expect((await c.read('SELECT id FROM t', [], { ...CALL, identityId: 'bystander' })).rows).toEqual([{ id: 1 }]);
  }
});

test('a backend terminated by an administrator (57P01) is a source failure and counts', async () => {
  const c = connector();
  for (let i = 0; i < 2; i++) {
    const running = c.read('SELECT pg_sleep(5)', [], CALL).catch((e: unknown) => e);
    expect(await waitFor(async () => (await src.activity()).some((a) => a.query === 'SELECT pg_sleep(5)' && a.state === 'active'), 5000)).toBeGreaterThanOrEqual(0);
    await src.admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND query = 'SELECT pg_sleep(5)'", [src.db.name]);
    expect(await running).toMatchObject({ code: 'execution_failed', sourceFailure: true });
    await sleep(50);
  }
  expect(c.breakerState()).toBe('open');
});
