/**
 * Agent SQL cannot move a pinned session setting (issue 22, item 2): the analyser refuses every
 * statement form that changes a setting of src/sources/postgres/session-settings.ts — SET (session,
 * LOCAL), RESET, DISCARD, SET inside ALTER ROLE/DATABASE, and set_config() in any position or
 * spelling — before anything is sent. (A server-side change would also end the connection:
 * test/integration/sources/session-settings.test.ts.)
 */
import { initSqlParser } from '../../../src/sql/analyze';
import { PINNED_SESSION_SETTINGS } from '../../../src/sources/postgres/session-settings';
import { refused } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

describe.each(PINNED_SESSION_SETTINGS.map((s) => [s.name] as const))('%s', (name) => {
  const quoted = `"${name}"`;
  test.each([
    `SET ${name} = 'x'`,
    `SET ${name} TO DEFAULT`,
    `SET SESSION ${name} = 'x'`,
    `SET LOCAL ${name} = 'x'`,
    `set ${quoted} = 'x'`,
    `RESET ${name}`,
    `ALTER ROLE CURRENT_USER SET ${name} = 'x'`,
    `ALTER DATABASE postgres SET ${name} = 'x'`,
  ])('%s is statement_not_allowed', (sql) => {
    expect(refused(sql).code).toBe('statement_not_allowed');
  });

  test.each([
    `SELECT set_config('${name}', 'x', false)`,
    `SELECT pg_catalog.set_config('${name}', 'x', true)`,
    `SELECT "set_config"('${name}', 'x', false)`,
    `SELECT 1 WHERE EXISTS (SELECT set_config('${name}', 'x', false))`,
    `WITH c AS (SELECT set_config('${name}', 'x', false) AS v) SELECT v FROM c`,
  ])('%s is function_not_allowed', (sql) => {
    expect(refused(sql).code).toBe('function_not_allowed');
  });
});

test.each(['RESET ALL', 'DISCARD ALL', 'SET TIME ZONE LOCAL', "SET TIME ZONE 'America/New_York'", "SET NAMES 'LATIN1'", 'SET XML OPTION DOCUMENT'])('%s is statement_not_allowed', (sql) => {
  expect(refused(sql).code).toBe('statement_not_allowed');
});
