/**
 * The masks PostgreSQL applies (src/sql/mask-sql.ts) give what the gateway's applyMask gives for
 * the same value: partial for strings (e-mail shapes, short values, non-ASCII, '@' at either end)
 * and numbers, '***' for types the gateway does not read as a string or a number, hash tokens equal
 * through hashTokenFromDigest, and the statement wrapper's shapes on a real server.
 */
import pg from 'pg';
import { ADMIN_URL } from '../../helpers/pg';
import { initSqlParser } from '../../../src/sql/analyze';
import { identifierAsStored, maskExpression, maskedStatement, statementText } from '../../../src/sql/mask-sql';
import { applyMask, hashTokenFromDigest } from '../../../src/sql/redaction';

let c: pg.Client;
beforeAll(async () => {
  await initSqlParser();
  c = new pg.Client({ connectionString: ADMIN_URL });
  await c.connect();
});
afterAll(async () => c?.end());

async function masked(method: 'full' | 'partial' | 'hash' | 'null', value: unknown, type: string): Promise<unknown> {
  const r = await c.query(`SELECT ${maskExpression('q.v', method)} AS m FROM (SELECT $1::${type} AS v) AS q`, [value]);
  return r.rows[0].m;
}

const STRINGS = ['luisg@embraer.com.br', 'a@b.co', 'x@y', '@example.com', 'name@', 'a@@b.org', 'ab', 'abc', 'abcd', 'abcdefgh', 'abcdefghijklmnop', '+55 (12) 3923-5555', 'ünïcødé@dömäin.dé', 'emoji😀@mail.io', 'a.b.c.d@sub.domain.travel', 'plain text, no at sign at all', '', ' spaced @ x . y '];

test.each(STRINGS)('partial of %j is the gateway’s', async (s) => {
  expect(await masked('partial', s, 'text')).toBe(applyMask(s, 'partial'));
  expect(await masked('partial', s, 'varchar')).toBe(applyMask(s, 'partial'));
});

test('partial of numbers is the gateway’s; other types and nulls follow applyMask on their mapped text (issue 23)', async () => {
  for (const n of [7, 1234, 123456789, -98765]) expect(await masked('partial', n, 'int4')).toBe(applyMask(n, 'partial'));
  expect(await masked('partial', '12345678901234567890', 'numeric')).toBe(applyMask('12345678901234567890', 'partial'));
  expect(await masked('partial', '9007199254740993', 'int8')).toBe(applyMask('9007199254740993', 'partial'));
  expect(await masked('partial', true, 'bool')).toBe('***');
  // A date's mapped form is its text (spec/value-mapping-v1.json), so partial works on that text.
  expect(await masked('partial', '2024-05-06', 'date')).toBe('***06');
  expect(await masked('partial', '2024-05-06', 'date')).toBe(applyMask('2024-05-06', 'partial'));
  expect(await masked('partial', '{"a":"secretvalue"}', 'jsonb')).toBe('***');
  expect(await masked('partial', null, 'text')).toBeNull();
  expect(await masked('full', null, 'text')).toBe('***');
  expect(await masked('full', 'secret', 'text')).toBe('***');
  expect(await masked('null', 'secret', 'text')).toBeNull();
  expect(await masked('hash', null, 'text')).toBeNull();
});

test('hash tokens from the source’s digest equal the gateway’s tokens', async () => {
  for (const s of STRINGS) {
    const digest = (await masked('hash', s, 'text')) as string;
    expect(digest).toMatch(/^[0-9a-f]{64}$/);
    expect(hashTokenFromDigest(digest, 'k3y')).toBe(applyMask(s, 'hash', 'k3y'));
  }
  expect(hashTokenFromDigest('ab', '')).toBe('***');
  expect(hashTokenFromDigest(null, 'k3y')).toBeNull();
});

test('statementText drops a trailing semicolon and what follows it, by UTF-8 offsets', () => {
  expect(statementText('SELECT 1')).toBe('SELECT 1');
  expect(statementText("SELECT 'é😀' AS x; -- trailing")).toBe("SELECT 'é😀' AS x");
  expect(statementText('  /* lead */ SELECT 2 ;  ')).toBe('SELECT 2 ');
  expect(statementText('SELECT 1; SELECT 2')).toBeNull();
});

test('the wrapper runs on a real server by column names, keeps order and parameters; repeated names are refused', async () => {
  const cols = [
    { index: 0, name: 'id', method: null },
    { index: 1, name: 'v', method: 'full' as const },
    { index: 2, name: 'neg', method: null },
  ];
  const w = maskedStatement('SELECT g AS id, g::text AS v, -g AS neg FROM generate_series(1, $1::int) g ORDER BY g DESC -- c', cols);
  if (!w || !('sql' in w)) throw new Error('expected a wrapped statement');
  const r = await c.query({ text: w.sql, values: [3], rowMode: 'array' });
  expect(r.fields.map((f) => f.name)).toEqual(['id', 'v', 'neg']);
  expect(r.rows).toEqual([[3, '***', -3], [2, '***', -2], [1, '***', -1]]);
  const quoted = maskedStatement('SELECT 1 AS "we""ird", 2 AS b', [{ index: 0, name: 'we"ird', method: 'full' }, { index: 1, name: 'b', method: null }]);
  if (!quoted || !('sql' in quoted)) throw new Error('expected a wrapped statement');
  expect((await c.query(quoted.sql)).rows).toEqual([{ 'we"ird': '***', b: 2 }]);
  expect(maskedStatement('SELECT 1 AS a', [{ index: 0, name: 'a', method: null }])).toEqual({ sql: 'SELECT 1 AS a' });
  expect(maskedStatement('SELECT 1 AS a, 2 AS a', [{ index: 0, name: 'a', method: 'full' }, { index: 1, name: 'a', method: null }])).toEqual({ refused: 'output columns share the name "a" while masked columns are involved; give each output column its own alias.' });
  // Names equal in their first 63 bytes are the same name to PostgreSQL.
  const long = 'x'.repeat(63);
  expect(identifierAsStored(`${long}é`)).toBe(long);
  expect(identifierAsStored(`${'x'.repeat(62)}é`)).toBe('x'.repeat(62));
  expect(maskedStatement('SELECT 1', [{ index: 0, name: `${long}1`, method: 'full' }, { index: 1, name: `${long}2`, method: null }])).toHaveProperty('refused');
});

test('partial judges a domain by its base type and uses the output function’s text, the mapped text the gateway reads', async () => {
  await c.query('BEGIN');
  try {
    await c.query("CREATE DOMAIN pg_temp.il_mail AS text; CREATE TYPE pg_temp.il_mood AS ENUM ('okvalue'); CREATE DOMAIN pg_temp.il_day AS date");
    const cases: Array<[string, string, unknown]> = [
      ["'luisg@embraer.com.br'::pg_temp.il_mail", 'luisg@embraer.com.br', 'text'],
      ["'okvalue'::pg_temp.il_mood", 'okvalue', 'enum'],
      ["'10.0.0.3'::inet", '10.0.0.3', 'inet'],
      ["'12:34:56'::time", '12:34:56', 'time'],
      ["'ab      '::char(8)", 'ab      ', 'bpchar'],
      ["'2024-01-15 12:00'::timestamp", '2024-01-15 12:00:00', 'timestamp'],
      ["'\\x00ff10'::bytea", '\\x00ff10', 'bytea'],
      ["'1 day 02:00'::interval", '1 day 02:00:00', 'interval'],
    ];
    for (const [expr, asRead] of cases) {
      const r = await c.query(`SELECT ${maskExpression('q.v', 'partial')} AS m, ${maskExpression('q.v', 'hash')} AS h FROM (SELECT ${expr} AS v) AS q`);
      expect(r.rows[0].m).toBe(applyMask(asRead, 'partial'));
      expect(hashTokenFromDigest(r.rows[0].h, 'k3y')).toBe(applyMask(asRead, 'hash', 'k3y'));
    }
    const day = await c.query(`SELECT ${maskExpression('q.v', 'partial')} AS m FROM (SELECT '2024-05-06'::pg_temp.il_day AS v) AS q`);
    expect(day.rows[0].m).toBe(applyMask('2024-05-06', 'partial'));
    const json = await c.query(`SELECT ${maskExpression('q.v', 'partial')} AS m FROM (SELECT '{"a": "secretvalue"}'::jsonb AS v) AS q`);
    expect(json.rows[0].m).toBe('***');
    const arr = await c.query(`SELECT ${maskExpression('q.v', 'partial')} AS m FROM (SELECT ARRAY['secretvalue'] AS v) AS q`);
    expect(arr.rows[0].m).toBe('***');
  } finally {
    await c.query('ROLLBACK');
  }
});
