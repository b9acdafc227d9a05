/**
 * The control connections' startup options (src/control/targets.ts controlStartupOptions,
 * ControlClient): READ COMMITTED always (the database-sealed audit chains refuse appends at any
 * other level), and an `options` parameter in the URL, the settings' own `options` (the operator
 * pool's lock_timeout) and PGOPTIONS are kept beside it instead of one replacing the others.
 */
import pg from 'pg';
import { createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { controlClient, controlPool, controlStartupOptions, CONTROL_ISOLATION_OPTION } from '../../../src/control/targets';

jest.setTimeout(60_000);

let temp: TempDatabase;
beforeAll(async () => {
  temp = await createTempDatabase('startopt');
  const c = new pg.Client({ connectionString: temp.url });
  await c.connect();
  try {
    await c.query(`ALTER DATABASE "${temp.name}" SET default_transaction_isolation = 'repeatable read'`);
  } finally {
    await c.end();
  }
});
afterAll(async () => temp?.drop());

const settings = async (q: { query: pg.Client['query'] }) => {
  const one = async (name: string) => ((await (q.query as (s: string) => Promise<pg.QueryResult>)(`SHOW ${name}`)).rows[0] as Record<string, string>)[name];
  return { isolation: await one('transaction_isolation'), statementTimeout: await one('statement_timeout'), lockTimeout: await one('lock_timeout') };
};
const withUrlOptions = (url: string, options: string) => `${url}${url.includes('?') ? '&' : '?'}options=${encodeURIComponent(options)}`;

test('the order of the parts: resolved, then own when the URL replaced it, then the isolation', () => {
  expect(controlStartupOptions(undefined, undefined)).toBe(CONTROL_ISOLATION_OPTION);
  expect(controlStartupOptions('-c lock_timeout=5', '-c lock_timeout=5')).toBe(`-c lock_timeout=5 ${CONTROL_ISOLATION_OPTION}`);
  expect(controlStartupOptions('-c statement_timeout=9', '-c lock_timeout=5')).toBe(`-c statement_timeout=9 -c lock_timeout=5 ${CONTROL_ISOLATION_OPTION}`);
});

test("a URL's options parameter keeps the isolation and the settings' own options (the settings' win on the same name)", async () => {
  const url = withUrlOptions(temp.url, '-c statement_timeout=4321 -c lock_timeout=1111');
  const c = controlClient(url, { options: '-c lock_timeout=2222' } as pg.ClientConfig);
  await c.connect();
  try {
    expect(await settings(c)).toEqual({ isolation: 'read committed', statementTimeout: '4321ms', lockTimeout: '2222ms' });
  } finally {
    await c.end();
  }
  const pool = controlPool(url);
  try {
    expect(await settings(pool as unknown as pg.Client)).toEqual({ isolation: 'read committed', statementTimeout: '4321ms', lockTimeout: '1111ms' });
  } finally {
    await pool.end();
  }
});

test('PGOPTIONS is kept beside the isolation when neither the URL nor the settings name options', async () => {
  const before = process.env.PGOPTIONS;
  process.env.PGOPTIONS = '-c statement_timeout=3333';
  try {
    const c = controlClient(temp.url);
    await c.connect();
    try {
      expect(await settings(c)).toEqual({ isolation: 'read committed', statementTimeout: '3333ms', lockTimeout: '0' });
    } finally {
      await c.end();
    }
  } finally {
    if (before === undefined) delete process.env.PGOPTIONS;
    else process.env.PGOPTIONS = before;
  }
});
