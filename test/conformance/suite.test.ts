/**
 * The conformance suite against the real in-process InterLock: every rule must pass. The seed is
 * random unless CONFORMANCE_SEED is set; a failure prints it with the shrunk counterexample.
 *
 * InterLock is reached through a proxy that only applies repairInterLock: the known disagreements of
 * src/ with the settled spec, each pinned below by an `it.failing` test stating the spec's answer. When
 * src/ is fixed, that test passes, jest reports it, and the repair and the pin are deleted.
 */
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import { runConformance, type RunReport } from '../../conformance/run';
import { loadSpec } from '../../conformance/spec';
import { profileOf } from '../../conformance/profiles';
import { startTestServer, type TestServer } from '../helpers/server';
import * as http from 'node:http';
import { startBrokenProxy, repairInterLock, INTERLOCK_REPAIRS, MUTATIONS, type BrokenProxy } from './broken-proxy';

const seed = process.env.CONFORMANCE_SEED ? Number(process.env.CONFORMANCE_SEED) : (Date.now() % 2_147_483_647) | 0;
const spec = loadSpec();
let server: TestServer;
/** InterLock behind repairInterLock. */
let repaired: BrokenProxy;

beforeAll(async () => {
  server = await startTestServer();
  repaired = await startBrokenProxy(server.url, MUTATIONS.identity!, { repair: repairInterLock });
});
afterAll(async () => {
  await repaired?.close();
  await server?.close();
});

/** The report's failure lines (empty when everything passed), so a failing expectation shows the counterexamples. */
function failuresOf(lines: string[]): string {
  return lines.filter((l) => !l.startsWith('PASS') && !l.startsWith('SKIP') && !/^\[[a-z0-9-]+\]$/.test(l)).join('\n');
}

describe('conformance suite against InterLock', () => {
  it('passes every rule with an API key (50 runs per property)', async () => {
    const lines: string[] = [];
    const report: RunReport = await runConformance({ url: repaired.url, apiKey: server.apiKey, numRuns: 50, seed, log: (l) => lines.push(l) });
    expect({ seed, failures: failuresOf(lines.slice(0, -1)) }).toEqual({ seed, failures: '' });
    expect(report.failures).toBe(0);
    expect(report.checks.filter((c) => c.skipped)).toEqual([]);
    // The default run is the whole contract: both protocol profiles, with the contract's catalogue, each
    // rule reported under its own profile, the profiles in order.
    expect({ profiles: report.profiles, catalogue: report.catalogue }).toEqual({ profiles: ['mcp-stateless', 'interlock-v1'], catalogue: 'contract' });
    expect(report.checks.every((c) => c.profile === profileOf(c.rule))).toBe(true);
    expect(lines.filter((l) => /^\[[a-z0-9-]+\]$/.test(l))).toEqual(['[mcp-stateless]', '[interlock-v1]']);
    // Every check of protocol-v1.json is exercised, by a property and by at least one example.
    for (const id of spec.checkIds) {
      const c = report.checks.find((x) => x.rule === id);
      expect(c?.details.some((d) => d.kind === 'property' && d.runs === 50)).toBe(true);
      expect(c?.details.some((d) => d.kind === 'example')).toBe(true);
    }
    // Each property reaches its own rule at least once in 50 runs (the generators are aimed, not just random).
    // CLIENT-CAPABILITY can only fire for a tool that declares a required capability; no catalogue tool does.
    const canFire = (rule: string) => rule !== 'CLIENT-CAPABILITY' || spec.tools.some((t) => t.requiredClientCapabilities);
    const hits = report.checks
      .filter((c) => spec.checkIds.includes(c.rule) && canFire(c.rule))
      .map((c) => [c.rule, (c.details.find((d) => d.kind === 'property')?.coverage?.[c.rule] ?? 0) > 0]);
    expect(hits.filter(([, hit]) => !hit)).toEqual([]);
    expect(hits.length).toBe(spec.checkIds.length - (canFire('CLIENT-CAPABILITY') ? 0 : 1));
  });

  it('skips only the authenticated argument checks without an API key, and still passes', async () => {
    const report = await runConformance({ url: repaired.url, numRuns: 20, seed });
    expect(report.failures).toBe(0);
    expect(report.checks.filter((c) => c.skipped).map((c) => c.rule)).toEqual(['TOOL-ARGUMENTS']);
  });
});

/**
 * Issue 30 item 1: every profile gives the same verdicts alone as together. `mcp-stateless` alone
 * (InterLock's catalogue read from its tools/list, MCP mode) must pass with and without a key; without
 * one, the rule that needs a key is skipped with that reason, properties and examples alike.
 */
describe('mcp-stateless alone against InterLock', () => {
  it('passes every rule with a key (server catalogue, MCP mode)', async () => {
    const lines: string[] = [];
    const report = await runConformance({ url: server.url, apiKey: server.apiKey, profiles: ['mcp-stateless'], numRuns: 30, seed, log: (l) => lines.push(l) });
    expect({ seed, failures: failuresOf(lines.slice(0, -1)) }).toEqual({ seed, failures: '' });
    expect({ catalogue: report.catalogue, profiles: report.profiles, failures: report.failures }).toEqual({ catalogue: 'server', profiles: ['mcp-stateless'], failures: 0 });
    expect(report.checks.filter((c) => c.skipped).map((c) => c.rule)).toEqual([]);
  }, 300_000);

  it('without a key, passes and skips TOOL-ARGUMENTS saying it needs --api-key', async () => {
    const lines: string[] = [];
    const report = await runConformance({ url: server.url, profiles: ['mcp-stateless'], numRuns: 30, seed, log: (l) => lines.push(l) });
    expect({ seed, failures: failuresOf(lines.slice(0, -1)) }).toEqual({ seed, failures: '' });
    expect(report.failures).toBe(0);
    expect(report.checks.filter((c) => c.skipped).map((c) => [c.rule, c.skipped])).toEqual([['TOOL-ARGUMENTS', 'needs --api-key']]);
  }, 300_000);
});

/**
 * Issue 30, "Must show": no wrong verdict on InterLock in any profile alone. interlock-v1 alone judges
 * the contract's own rules (the catalogue, results, AUTH, interlock.strict) and must pass with a key.
 */
describe('interlock-v1 alone against InterLock', () => {
  it('passes every rule with a key', async () => {
    const lines: string[] = [];
    const report = await runConformance({ url: server.url, apiKey: server.apiKey, profiles: ['interlock-v1'], numRuns: 30, seed, log: (l) => lines.push(l) });
    expect({ seed, failures: failuresOf(lines.slice(0, -1)) }).toEqual({ seed, failures: '' });
    expect({ catalogue: report.catalogue, profiles: report.profiles, failures: report.failures }).toEqual({ catalogue: 'contract', profiles: ['interlock-v1'], failures: 0 });
  }, 300_000);
});

describe('interlock-conformance CLI', () => {
  const bin = path.join(__dirname, '..', '..', 'conformance', 'bin', 'interlock-conformance.js');
  const run = (args: string[]): Promise<{ code: number | null; out: string }> =>
    new Promise((resolve) => {
      const child = spawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (c: Buffer) => (out += c.toString()));
      child.stderr.on('data', (c: Buffer) => (out += c.toString()));
      child.on('close', (code) => resolve({ code, out }));
    });
  let proxy: BrokenProxy | undefined;
  afterEach(async () => {
    await proxy?.close();
    proxy = undefined;
  });

  it('prints one line per rule and exits 0 when everything passes', async () => {
    const { code, out } = await run(['--url', repaired.url, '--api-key', server.apiKey, '--num-runs', '5', '--seed', '7']);
    expect(out).toMatch(/^PASS {2}HOST {2}\(5 generated, \d+ example\(s\)\)$/m);
    expect(out).toMatch(/^PASS {2}MCP-NAME /m);
    const passLines = out.split('\n').filter((l) => l.startsWith('PASS  ')).length;
    expect(passLines).toBeGreaterThanOrEqual(spec.checkIds.length);
    expect(out).toContain(`\n${passLines} passed, 0 failed (profiles mcp-stateless, interlock-v1; seed 7, 5 runs per property)\n`);
    // Cross-cutting shape rules are reported too, each under its profile.
    expect(out).toMatch(/^\[interlock-v1\]$[\s\S]*^PASS {2}tools {2}\(checked on every answer\)$/m);
    expect(code).toBe(0);
  }, 60_000);

  it('exits 1 and prints the counterexample when a rule fails', async () => {
    proxy = await startBrokenProxy(server.url, MUTATIONS.getAnswered200!);
    // One screen by default: the failing rule, its first violations and how to replay it with details.
    const compact = await run(['--url', proxy.url, '--num-runs', '5', '--seed', '7', '--rule', 'HTTP-METHOD']);
    expect(compact.out).toMatch(/^FAIL {2}HTTP-METHOD .*\n {6}.*expected HTTP 405, got 200\n/m);
    expect(compact.out).toContain('      replay with details: --rule HTTP-METHOD --seed 7 --num-runs 5 --verbose\n');
    expect(compact.out).not.toContain('  Request:');
    expect(compact.code).toBe(1);
    const { code, out } = await run(['--url', proxy.url, '--num-runs', '5', '--seed', '7', '--rule', 'HTTP-METHOD', '--verbose']);
    expect(out).toMatch(/^FAIL {2}HTTP-METHOD /m);
    expect(out).toContain('  Request:\n    GET /mcp');
    expect(out).toContain('[HTTP-METHOD] expected HTTP 405, got 200');
    expect(out).toMatch(/^0 passed, 1 failed \(profiles mcp-stateless, interlock-v1; seed 7, 5 runs per property\)$/m);
    expect(code).toBe(1);
  }, 60_000);

  it('exits 2 on usage errors and unreachable servers', async () => {
    expect((await run([])).code).toBe(2);
    const down = await run(['--url', 'http://127.0.0.1:9/mcp', '--num-runs', '1']);
    expect(down.out).toContain('cannot reach');
    expect(down.code).toBe(2);
  }, 60_000);

  it('exits 2 with one line when the server refuses the --api-key (trial nu40: it read as contract failures)', async () => {
    const refused = await run(['--url', server.url, '--api-key', 'il_live_wrongwrongwrongwrongwrong', '--num-runs', '1', '--rule', 'TOOL-ARGUMENTS']);
    expect(refused).toEqual({ code: 2, out: 'error: conformance: the server refused the API key (on a tools/call of interlock_list_sources it answered unauthorized (invalid_api_key)): check --api-key (a key of a running server, not revoked)\n' });
    // A server that refuses the key with HTTP 401 (as the 2026-07-28 dialect does).
    const gate = http.createServer((req, res) => {
      res.writeHead(req.headers.authorization ? 401 : 400, { 'content-type': 'application/json', 'www-authenticate': 'Bearer' });
      res.end('{}');
    });
    await new Promise<void>((r) => gate.listen(0, '127.0.0.1', r));
    try {
      const port = (gate.address() as { port: number }).port;
      expect(await run(['--url', `http://127.0.0.1:${port}/mcp`, '--api-key', 'k', '--num-runs', '1'])).toEqual({
        code: 2,
        out: 'error: conformance: the server refused the API key (HTTP 401 on a tools/call of interlock_list_sources): check --api-key (a key of a running server, not revoked)\n',
      });
    } finally {
      await new Promise((r) => gate.close(r));
    }
  }, 60_000);
});

/** One POST to InterLock itself (no proxy): status and parsed JSON body. */
function post(url: string, headers: Record<string, string>, body: string): Promise<{ status: number; json: unknown }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { hostname: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...headers } },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, json: text === '' ? undefined : (JSON.parse(text) as unknown) }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('InterLock agrees with the settled spec at former disagreements (no repairs remain)', () => {
  it('needs no repairs', () => {
    expect(Object.keys(INTERLOCK_REPAIRS)).toEqual([]);
  });
  // VERSION-HEADER: "notifications and responses are checked against the header alone (id null)".
  it('a posted response with an unsupported MCP-Protocol-Version gets -32022 with id null', async () => {
    const res = await post(server.url, { 'MCP-Protocol-Version': '2099-01-01' }, '{"jsonrpc":"2.0","id":4,"result":{}}');
    expect(res.status).toBe(400);
    expect(res.json).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32022 } });
  });
});
