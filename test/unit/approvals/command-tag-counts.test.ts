/**
 * hnu42 finding 1: which approved writes keep their command tag's row count
 * (src/approvals/row-write.ts commandTagCountsEveryChange) and which are counted by the server.
 */
import { commandTagCountsEveryChange } from '../../../src/approvals/row-write';
import { initSqlParser } from '../../../src/sql/parser';

beforeAll(async () => initSqlParser());

test.each([
  ['INSERT INTO t VALUES (1)', true],
  ['UPDATE t SET a = 1 WHERE id = 2', true],
  ['DELETE FROM t', true],
  ['MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE', true],
  ['WITH x AS (UPDATE t SET a = a + 1 RETURNING 1) SELECT 1 WHERE false', false],
  ['WITH x AS (DELETE FROM t RETURNING *) INSERT INTO u SELECT * FROM x', false],
  ['WITH x AS (SELECT 1) UPDATE t SET a = 1', false],
  ['SELECT f()', false],
  ['not sql at all', false],
])('%s → %s', (sql, tag) => {
  expect(commandTagCountsEveryChange(sql)).toBe(tag);
});
