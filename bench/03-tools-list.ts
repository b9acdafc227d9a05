/**
 * Scenario 3: protocol only. tools/list through InterLock (`interlock serve`) vs the official MCP
 * TypeScript SDK v2 (`createMcpHandler` + `toNodeHandler`, bench/lib/sdk-server.ts) serving the
 * same eleven tool definitions, each in its own process, with the same raw keep-alive client at
 * concurrency 1, 8 and 32, in both dialects: 2025-11-25 (stateless handshake dialect, no
 * initialize) and 2026-07-28 (per-request _meta envelope). When the SDK packages are not installed
 * the InterLock side still runs and the SDK side is skipped with a message.
 * Run: `npx tsx bench/03-tools-list.ts`.
 */
import { McpHttpClient, type PostResult } from './lib/http';
import { closedLoop, interleave, type LoadFigures, type Side } from './lib/load';
import { concurrencyLevels, emitResult, envInt, envSeconds, machineLine, ratio, round, table } from './lib/stats';
import { gatewayVars, SkipError, startServe, startTsChild, withBenchEnv, type GatewayChild } from './lib/env';
import { catalogueTools } from './lib/sdk-server';

/** The two request shapes measured. */
export const DIALECTS = {
  handshake: {
    headers: { 'mcp-protocol-version': '2025-11-25' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
  },
  modern: {
    headers: { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/list' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/list',
      params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {}, 'io.modelcontextprotocol/clientInfo': { name: 'interlock-bench', version: '1.0.0' } } },
    }),
  },
} as const;

type Dialect = keyof typeof DIALECTS;

/** Checks one answer: HTTP 200 and the eleven catalogue tools, byte-for-byte the same definitions. */
export function checkToolsList(r: PostResult, label: string): void {
  if (r.status !== 200) throw new Error(`${label}: HTTP ${r.status}: ${r.text.slice(0, 300)}`);
  const msg = JSON.parse(r.text) as { result?: { tools?: Array<Record<string, unknown>> } };
  const tools = msg.result?.tools;
  if (!tools) throw new Error(`${label}: no tools in ${r.text.slice(0, 300)}`);
  const want = catalogueTools();
  if (tools.length !== want.length) throw new Error(`${label}: ${tools.length} tools, expected ${want.length}`);
  for (let i = 0; i < want.length; i++) {
    const got = tools[i];
    const w = want[i];
    if (got.name !== w.name || got.description !== w.description || JSON.stringify(got.inputSchema) !== JSON.stringify(w.inputSchema)) throw new Error(`${label}: tool ${i} (${String(got.name)}) differs from the catalogue`);
  }
}

async function main(): Promise<void> {
  const durationMs = envSeconds('BENCH_SECONDS', 4);
  const warmupMs = envSeconds('BENCH_WARMUP_SECONDS', 1);
  const rounds = envInt('BENCH_ROUNDS', 2);
  const levels = concurrencyLevels();
  console.log('# 3-tools-list: tools/list through InterLock vs the official SDK v2 createMcpHandler (same eleven tools)');
  console.log(machineLine());
  console.log(`runs: ${rounds} rounds × concurrency ${levels.join(', ')} × ${durationMs / 1000} s (+${warmupMs / 1000} s warm-up), sides alternating, both dialects`);
  await withBenchEnv({}, async (env) => {
    const il = await startServe(gatewayVars(env.controlUrl));
    let sdk: GatewayChild | null = null;
    let skipped: string | null = null;
    try {
      try {
        sdk = await startTsChild('bench/lib/sdk-server.ts', {});
      } catch (err) {
        if (!(err instanceof SkipError)) throw err;
        skipped = err.message;
        console.log(`SDK side SKIPPED: ${skipped}`);
      }
      const servers: Array<{ name: string; url: string }> = [{ name: 'interlock', url: il.url }, ...(sdk ? [{ name: 'sdk-v2', url: sdk.url }] : [])];
      const results: Record<string, Record<string, Array<Record<string, number | null>>>> = {};
      const bytes: Record<string, number> = {};
      for (const dialect of Object.keys(DIALECTS) as Dialect[]) {
        const d = DIALECTS[dialect];
        for (const s of servers) {
          const probe = new McpHttpClient(s.url, { maxSockets: 1 });
          const r = await probe.post(d.body, d.headers);
          probe.close();
          checkToolsList(r, `${s.name} ${dialect}`);
          bytes[`${s.name}/${dialect}`] = r.bytes;
        }
        console.log(`\n## dialect ${dialect} (${d.headers['mcp-protocol-version']})`);
        const sides: Side[] = servers.map((s) => ({
          name: s.name,
          run: async (c) => {
            const client = new McpHttpClient(s.url, { maxSockets: c });
            try {
              return await closedLoop({
                concurrency: c,
                durationMs,
                warmupMs,
                op: async () => {
                  const r = await client.post(d.body, d.headers);
                  if (r.status !== 200 || r.bytes < 10_000) throw new Error(`${s.name}: HTTP ${r.status}, ${r.bytes} bytes`);
                },
              });
            } finally {
              client.close();
            }
          },
        }));
        const res = await interleave(sides, levels, rounds, (l) => console.log(l));
        const ilF = res.get('interlock')!;
        const sdkF: Map<number, LoadFigures> | undefined = res.get('sdk-v2');
        const rows = levels.map((c) => {
          const a = ilF.get(c)!;
          const b = sdkF?.get(c);
          return {
            concurrency: c,
            interlock_ops_s: round(a.throughput, 0),
            sdk_ops_s: b ? round(b.throughput, 0) : null,
            throughput_ratio: b ? round(a.throughput / b.throughput, 3) : null,
            interlock_p50_ms: round(a.latency.p50, 3),
            sdk_p50_ms: b ? round(b.latency.p50, 3) : null,
            interlock_p99_ms: round(a.latency.p99, 3),
            sdk_p99_ms: b ? round(b.latency.p99, 3) : null,
          };
        });
        const f = (x: number | null, unit = '') => (x === null ? 'skipped' : `${x}${unit}`);
        console.log('');
        console.log(
          table(
            ['conc', 'SDK ops/s', 'IL ops/s', 'IL/SDK', 'SDK p50', 'IL p50', 'SDK p99', 'IL p99'],
            rows.map((r) => [String(r.concurrency), f(r.sdk_ops_s), String(r.interlock_ops_s), r.throughput_ratio === null ? 'n/a' : ratio(r.throughput_ratio), f(r.sdk_p50_ms, ' ms'), `${r.interlock_p50_ms} ms`, f(r.sdk_p99_ms, ' ms'), `${r.interlock_p99_ms} ms`]),
          ),
        );
        console.log(`response bytes: interlock ${bytes[`interlock/${dialect}`]}${sdk ? `, sdk-v2 ${bytes[`sdk-v2/${dialect}`]}` : ''}`);
        const worst = rows.filter((r) => r.throughput_ratio !== null).map((r) => r.throughput_ratio as number);
        if (worst.length) console.log(`target tools/list ≥ 1.0× SDK v2 (${dialect}): lowest ratio ${ratio(Math.min(...worst))} → ${Math.min(...worst) >= 1 ? 'MET' : 'MISSED'}`);
        results[dialect] = { rows };
      }
      emitResult('3-tools-list', { rounds, durationMs, warmupMs, sdkSkipped: skipped, responseBytes: bytes, dialects: results });
    } finally {
      await il.stop();
      await sdk?.stop();
    }
  });
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
