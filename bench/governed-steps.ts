/**
 * interlock_query's own per-call work for a repeated uncached point read, in one process, on two
 * compiled trees (A/B; issue 28, task p28): `BEFORE_ROOT/dist` and this checkout's `dist`, each its
 * queryHandler over its own DbGovernanceStore on one provisioned control database (the demo
 * identity's real grants, the demo's masking policies, Chinook's scanned catalogue; the store
 * answers from memory and reloads every 2 s as in the gateway), its ResultCache at bench 08's
 * uncached setting (1 ms: every key made, looked up and stored), a memory rate limiter and a
 * connector whose guards (standaloneGuard, functionGuard, relationTrees) are the real
 * PostgresSourceConnector's but whose `read` answers one Chinook track row without a round trip.
 * So a call is steps 1½–8 as the gateway runs them minus the source's wire and the audit: the part
 * the governed-statement change (one lookup for steps 3–4 onwards) touches.
 * After a warm-up of each side (BENCH_WARMUP_SECONDS, default 3, in two turns), alternating rounds of
 * BENCH_OPS (default 50,000) sequential awaited calls, BENCH_ROUNDS (default 7);
 * prints ns per call (median) per side and the ratio.
 * Run: `npm run -s build; BEFORE_ROOT=/path/to/built/checkout flock /tmp/bench.lock npx tsx bench/governed-steps.ts`.
 */
import path from 'node:path';
import { ROOT, withBenchEnv, type BenchEnv } from './lib/env';
import { POINT_SQL, TRACKS } from './lib/point-read';
import { envInt, machineLine, table } from './lib/stats';

type Call = (i: number) => Promise<unknown>;

/** Builds the call of one compiled tree at `root` over `env`. */
function side(root: string, env: BenchEnv): Call {
  const load = (rel: string) => require(path.join(root, 'dist', 'src', rel)) as Record<string, unknown>;
  const { queryHandler } = load('pipeline/query.js') as { queryHandler: (d: unknown) => (args: unknown, ctx: unknown) => Promise<{ kind: string }> };
  const { DbGovernanceStore } = load('governance/db-store.js') as { DbGovernanceStore: new (db: unknown) => { loadCatalog(id: string): unknown; getSource(id: string): unknown } };
  const { ResultCache } = load('pipeline/cache.js') as { ResultCache: new (o: unknown) => unknown };
  const { AnalysisCache } = load('pipeline/analysis-cache.js') as { AnalysisCache: new () => unknown };
  const { memoryRateLimiter } = load('pipeline/05-rate-limit.js') as { memoryRateLimiter: (s: unknown) => unknown };
  const { initSqlParser } = load('sql/analyze.js') as { initSqlParser: () => void };
  const { PostgresSourceConnector } = load('sources/postgres/connector.js') as { PostgresSourceConnector: new (id: string, s: unknown) => Record<string, (...a: unknown[]) => unknown> };
  initSqlParser();
  const store = new DbGovernanceStore(env.db);
  const connectors = new Map<unknown, unknown>();
  const reader = (s: { id: string; settings: unknown }) => {
    let c = connectors.get(s.settings);
    if (!c) {
      const real = new PostgresSourceConnector(s.id, s.settings);
      c = {
        read: async () => ({ fields: [{ name: 'track_id' }, { name: 'name' }, { name: 'album_id' }, { name: 'genre_id' }, { name: 'composer' }, { name: 'milliseconds' }, { name: 'unit_price' }], rowsArray: [[3, 'Fast As a Shark', 3, 1, 'F. Baltes, S. Kaufman, U. Dirkscneider & W. Hoffman', 230619, '0.99']], truncated: false }),
        standaloneGuard: real.standaloneGuard.bind(real),
        relationTrees: real.relationTrees.bind(real),
        functionGuard: real.functionGuard.bind(real),
      };
      connectors.set(s.settings, c);
    }
    return c;
  };
  const handler = queryHandler({
    store,
    connectors: { reader },
    rateLimiter: memoryRateLimiter({ perIdentity: { points: 1e9, windowSeconds: 60 }, perSource: { points: 1e9, windowSeconds: 60 } }),
    cache: new ResultCache({ ttlMs: 1, maxBytes: 32 * 1024 * 1024 }),
    analysisCache: new AnalysisCache(),
    catalog: (s: { id: string }) => store.loadCatalog(s.id),
    maskSecret: 'bench',
  });
  const identity = { id: env.demo.identityId, name: 'demo-agent', keyId: env.demo.keyId };
  const signal = new AbortController().signal;
  return async (i) => {
    const out = await handler({ source_id: 'chinook', sql: POINT_SQL, params: [1 + (i % TRACKS)] }, { requestId: 'r', apiKey: env.apiKey, identity, dialect: 'modern', protocolVersion: '2026-07-28', toolName: 'interlock_query', canonicalTool: 'interlock_query', signal, notify: () => undefined, auditDetails: {} });
    if (out.kind !== 'result') throw new Error(`not a result: ${JSON.stringify(out)}`);
  };
}

async function main(): Promise<void> {
  const before = process.env.BEFORE_ROOT;
  if (!before) throw new Error('BEFORE_ROOT (a checkout with dist/ built) is required');
  const ops = envInt('BENCH_OPS', 50_000);
  const rounds = envInt('BENCH_ROUNDS', 7);
  console.log(`# governed-steps: before = ${before}/dist vs after = ${ROOT}/dist, ${rounds} rounds × ${ops} calls`);
  console.log(machineLine());
  await withBenchEnv({}, async (env) => {
    const sides = { before: side(path.resolve(before), env), after: side(ROOT, env) };
    const ns: Record<string, number[]> = { before: [], after: [] };
    // Warm each side for BENCH_WARMUP_SECONDS (default 3) in turn, twice: JIT tiers, store, caches.
    const warmMs = envInt('BENCH_WARMUP_SECONDS', 3) * 1000;
    for (let pass = 0; pass < 2; pass++) {
      for (const s of Object.values(sides)) for (let i = 0, until = Date.now() + warmMs / 2; Date.now() < until; i++) await s(i);
    }
    for (let r = 0; r < rounds; r++) {
      for (const name of (r % 2 ? ['after', 'before'] : ['before', 'after']) as Array<keyof typeof sides>) {
        const t0 = process.hrtime.bigint();
        for (let i = 0; i < ops; i++) await sides[name](i);
        ns[name].push(Number(process.hrtime.bigint() - t0) / ops);
      }
    }
    const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    console.log(table(['side', 'ns per call (median)', 'rounds'], Object.keys(ns).map((k) => [k, med(ns[k]).toFixed(0), ns[k].map((x) => x.toFixed(0)).join(', ')])));
    console.log(`after ÷ before: ${(med(ns.after) / med(ns.before)).toFixed(3)}; per round: ${ns.after.map((a, i) => (a / ns.before[i]).toFixed(2)).join(', ')}; saved ${((med(ns.before) - med(ns.after)) / 1000).toFixed(2)} µs per call`);
  });
}

void main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
