/**
 * Issue 30 item 1 ("Every profile gives the same verdicts alone as together; rules that need a key say so
 * and skip with a reason when none is given"), checked through the CLI against a live InterLock: each
 * protocol profile run alone and both together, with and without a key, on two seeds, properties and fixed
 * examples (the third profile, sql-gateway, alone and together: sql-pack.test.ts). Every rule must
 * get the same verdict alone as together, InterLock must pass every rule, and TOOL-ARGUMENTS (which needs
 * an authenticated call) is skipped saying so exactly when no key is given.
 */
import { main } from '../../conformance/cli';
import { startTestServer, type TestServer } from '../helpers/server';

jest.setTimeout(300_000);

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

/** Runs the CLI with --json and returns rule → verdict ('PASS', 'FAIL' or 'SKIP: <reason>'). */
async function verdicts(args: string[]): Promise<{ code: number; rules: Record<string, string> }> {
  const out: string[] = [];
  const code = await main(['--url', server.url, '--num-runs', '8', '--json', ...args], (s) => out.push(s));
  const report = JSON.parse(out.join('\n')) as { cases: Array<{ rule: string; passed: boolean; skipped?: string }> };
  return { code, rules: Object.fromEntries(report.cases.map((c) => [c.rule, c.skipped ? `SKIP: ${c.skipped}` : c.passed ? 'PASS' : 'FAIL'])) };
}

describe.each([11, 12])('InterLock, seed %i: each profile alone gives the verdicts it gives together', (seed) => {
  it.each([
    ['with a key', true],
    ['without a key', false],
  ])('%s', async (_label, withKey) => {
    const key = withKey ? ['--api-key', server.apiKey] : [];
    const s = ['--seed', String(seed)];
    const together = await verdicts([...key, ...s]);
    const stateless = await verdicts(['--profile', 'mcp-stateless', ...key, ...s]);
    const interlock = await verdicts(['--profile', 'interlock-v1', ...key, ...s]);
    // Alone, each profile reports exactly its own rules, each with the verdict it has in the joint run.
    const pick = (r: Record<string, string>, rules: string[]) => Object.fromEntries(rules.map((k) => [k, r[k]]));
    expect(stateless.rules).toEqual(pick(together.rules, Object.keys(stateless.rules)));
    expect(interlock.rules).toEqual(pick(together.rules, Object.keys(interlock.rules)));
    expect(Object.keys(stateless.rules).length + Object.keys(interlock.rules).length).toBe(Object.keys(together.rules).length);
    // InterLock passes every rule in every run; only TOOL-ARGUMENTS needs the key, and says so.
    expect([together.code, stateless.code, interlock.code]).toEqual([0, 0, 0]);
    const notPassed = Object.entries(together.rules).filter(([, v]) => v !== 'PASS');
    expect(notPassed).toEqual(withKey ? [] : [['TOOL-ARGUMENTS', 'SKIP: needs --api-key']]);
  });
});
