/**
 * Task nu48fix item 2: error texts a new user met that did not say what to do next.
 * (a) the invalid_api_key refusal names the next step (generic: ask the operator for a valid key);
 * (b) a source_id failing SourceId's pattern ("Chinook") says ids are lower case and to call interlock_list_sources;
 * (d) `identity attributes NAME name` (no `=`) says NAME=VALUE sets and NAME= removes (exit 2, before any database).
 * (c), the CLI's "not found" lines naming the list command, needs a control database: test/integration/cli/cli.test.ts.
 */
import { refusalInfo } from '../../../src/errors/vocabulary';
import { interlockToolBindings } from '../../../src/tools/registry';
import { runCli } from '../../../src/cli/main';

test('(a) invalid_api_key says to ask the operator for a valid key', () => {
  expect(refusalInfo('invalid_api_key')).toMatchObject({
    status: 'unauthorized',
    message: 'The API key is not valid: it is unknown, revoked or expired, or its identity is disabled. Ask the operator for a valid key.',
  });
});

test('(b) a source_id that is not a source id ("Chinook") says ids are lower case and to call interlock_list_sources, on every tool that takes one', () => {
  const tools = interlockToolBindings({});
  const expected = 'source_id "Chinook" is not a source id: source ids are lower case (letters, digits, _ and -); call interlock_list_sources for the ids you may use';
  expect(tools.find((b) => b.name === 'interlock_query')!.validate({ source_id: 'Chinook', sql: 'SELECT 1' })).toBe(expected);
  expect(tools.find((b) => b.name === 'interlock_discover')!.validate({ source_id: 'Chinook', query: 'x' })).toBe(expected);
  expect(tools.find((b) => b.name === 'interlock_describe_source')!.validate({ source_id: 'Chinook' })).toBe(expected);
  expect(tools.find((b) => b.name === 'agentgate_query')!.validate({ source_id: 'Chinook', sql: 'SELECT 1' })).toBe(expected);
});

test('(d) `identity attributes NAME name` without = says NAME=VALUE sets and NAME= removes (exit 2, nothing opened)', async () => {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(['identity', 'attributes', 'some-agent', 'employee_id'], { out: (x) => void out.push(x), err: (x) => void err.push(x) });
  expect({ code, out, err }).toEqual({
    code: 2,
    out: [],
    err: ['error: expected NAME=VALUE, got "employee_id": NAME=VALUE sets an attribute (e.g. employee_id=3), NAME= removes it'],
  });
});
