/**
 * The refusal prose of step 3 (task hnu41 item 2): the star advice only when the statement selects
 * `*` or `table.*`, decided by the parser's scanner from the text alone (never by what exists).
 */
import { DENIED_MESSAGE, DENIED_MESSAGE_NO_STAR, deniedText, selectsStar } from '../../../src/pipeline/03-authorize';
import { initSqlParser } from '../../../src/sql/analyze';

beforeAll(() => initSqlParser());

test('a star or table.* in a select list or RETURNING counts; count(*), multiplication, strings and comments do not', () => {
  const cases: Array<[string, boolean]> = [
    ['SELECT * FROM t', true],
    ['select distinct * from t', true],
    ['SELECT a, * FROM t', true],
    ['SELECT e.* FROM employee e', true],
    ['SELECT public.t.* FROM public.t', true],
    ['DELETE FROM t RETURNING *', true],
    ['SELECT count(*) FROM t', false],
    ['SELECT a * b FROM t', false],
    ["SELECT a FROM t WHERE b = '*'", false],
    ['SELECT a /* SELECT * */ FROM t', false],
    ["SELECT emp_id FROM employee WHERE ssn LIKE '1%'", false],
  ];
  expect(cases.map(([sql]) => [sql, selectsStar(sql)])).toEqual(cases);
  expect([deniedText('SELECT * FROM t'), deniedText('SELECT a FROM t'), deniedText(undefined)]).toEqual([DENIED_MESSAGE, DENIED_MESSAGE_NO_STAR, DENIED_MESSAGE]);
  expect(DENIED_MESSAGE_NO_STAR).not.toContain('*');
  // fx45 item 4: no read deny among the caller's roles, no star advice (a typo'd table is not a denied column).
  expect([deniedText('SELECT * FROM artists', false), deniedText('SELECT * FROM t', true), deniedText(undefined, false)]).toEqual([DENIED_MESSAGE_NO_STAR, DENIED_MESSAGE, DENIED_MESSAGE]);
});
