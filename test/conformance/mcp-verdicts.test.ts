/**
 * Issue 31 items 3, 4 and 6, against a live server built on the SDK v1 StreamableHTTPServerTransport
 * (sdk-v1-reference.ts) behind a proxy that answers an empty batch `[]` with 400 -32600 (as the SDK's
 * stateless example the implementer ran does), so every mcp-stateless rule but ORIGIN passes:
 *  - item 3: the mcp-stateless profile gives the same verdict on every rule run alone and next to
 *    interlock-v1 (it is always judged in MCP mode, on the server's own catalogue);
 *  - item 4: with any value as --api-key (the server checks none), TOOL-ARGUMENTS runs and passes: the
 *    SDK answers invalid arguments with a tool result isError true, which no MUST forbids;
 *  - item 6: the NO-BATCH verdict is the same on seeds 1..8 (a batch of initialize alone with an
 *    unsupported or 2026-07-28 MCP-Protocol-Version may be served, as each half is alone).
 */
import { runConformance, type RunReport } from '../../conformance/run';
import { startBrokenProxy, type BrokenProxy } from './broken-proxy';
import { startSdkV1Server } from './sdk-v1-reference';
import type { ReferenceServer } from './sdk-reference';

jest.setTimeout(300_000);

const V1_MAP = { tools: { list: 'list_items' }, arguments: {}, fixed: {} };
let sdk: ReferenceServer;
let proxy: BrokenProxy;
beforeAll(async () => {
  sdk = await startSdkV1Server();
  proxy = await startBrokenProxy(sdk.url, {
    name: 'empty batch refused',
    onRequest: (req) => (req.body.trim() === '[]' ? { status: 400, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32600, message: 'empty batch' } }) } : undefined),
  });
});
afterAll(async () => {
  await proxy?.close();
  await sdk?.close();
});

/** rule → 'PASS' | 'FAIL' | 'SKIP' for the rules of `profile`. */
function verdicts(report: RunReport, profile: string): Record<string, string> {
  return Object.fromEntries(report.checks.filter((c) => c.profile === profile).map((c) => [c.rule, c.skipped ? 'SKIP' : c.passed ? 'PASS' : 'FAIL']));
}

describe('item 3: mcp-stateless alone and next to interlock-v1', () => {
  it.each([1, 2])('seed %i: every mcp-stateless rule gets the same verdict (only ORIGIN fails)', async (seed) => {
    const alone = await runConformance({ url: proxy.url, profiles: ['mcp-stateless'], seed, numRuns: 20, apiKey: 'any-value', toolMap: V1_MAP });
    const together = await runConformance({ url: proxy.url, seed, numRuns: 20, apiKey: 'any-value', toolMap: V1_MAP });
    expect(verdicts(together, 'mcp-stateless')).toEqual(verdicts(alone, 'mcp-stateless'));
    expect(Object.entries(verdicts(alone, 'mcp-stateless')).filter(([, v]) => v !== 'PASS')).toEqual([['ORIGIN', 'FAIL']]);
  });
});

describe('item 4: TOOL-ARGUMENTS against a server that checks no key', () => {
  it('runs with any --api-key value and passes (invalid arguments as a tool result with isError true)', async () => {
    const report = await runConformance({ url: proxy.url, profiles: ['mcp-stateless'], rules: ['TOOL-ARGUMENTS'], seed: 1, numRuns: 30, apiKey: 'any-value', toolMap: V1_MAP });
    const c = report.checks.find((x) => x.rule === 'TOOL-ARGUMENTS')!;
    expect({ skipped: c.skipped, passed: c.passed, counterexample: c.counterexample }).toEqual({ skipped: undefined, passed: true, counterexample: undefined });
  });
});

describe('item 6: NO-BATCH does not depend on the seed', () => {
  it('seeds 1..8 give the same verdict (PASS) on a fixed server', async () => {
    const out: Array<[number, string]> = [];
    for (let seed = 1; seed <= 8; seed++) {
      const report = await runConformance({ url: proxy.url, profiles: ['mcp-stateless'], rules: ['NO-BATCH'], seed, numRuns: 100, toolMap: V1_MAP });
      const c = report.checks.find((x) => x.rule === 'NO-BATCH')!;
      out.push([seed, c.passed ? 'PASS' : `FAIL ${c.counterexample ?? ''}`]);
    }
    expect(out).toEqual([1, 2, 3, 4, 5, 6, 7, 8].map((s) => [s, 'PASS']));
  });
});
