/**
 * The per-call pieces issue 28 item 3 changed, timed in one process on two compiled trees (A/B):
 * `BEFORE_ROOT/dist` and this checkout's `dist` (both made by `npm run build`), loaded side by side
 * and run in alternating rounds, so the shared machine's load hits both alike. Far less noisy than
 * the end-to-end bench/cost-per-call.ts, whose paired rounds move ±40 % on a loaded machine while
 * these pieces are a few µs of a ~500–1,000 µs call. Pieces (each what one uncached point read by
 * the demo identity does):
 *  - `caller facts`: the evaluator's per-source answers query.ts asks for outside the guard
 *    (roleNames for the policy subject, hasRowRules twice), on one evaluator built once (as
 *    evaluatorFor shares it), with the demo role;
 *  - `guard`: standaloneGuardFor on a read of one catalogued standalone table (hierarchySensitive:
 *    hasReadDeny, statements().deny, hasRowRules, the demo policies; then the catalogue's tree and
 *    the guard text), the analysis and catalogue objects reused as the analysis cache hands them out;
 *  - `result-cache key`: ResultCache.key of a point read's parts (the miss path's key);
 *  - `result-cache miss`: key, lookup and store of a one-row result on a 30 s cache (the whole miss
 *    path of the result cache; every key new, so the cache fills to its byte budget and evicts). Its
 *    figure moves 0.8–1.7× between runs of one build (the two sides share one heap, and this piece
 *    is mostly the collector's): read it only across several runs.
 *  - `result-cache miss, 1 ms`: the same on a 1 ms cache (bench 08's uncached side), whose entries
 *    expire while the loop runs (h28k: a store sweeps expired entries once per time to live);
 *  - `query cache key`: the key of a point read as query.ts builds it: cacheKey (with the catalogue
 *    and policies by content) over the hashed access fingerprint (accessFingerprintOf) where the
 *    tree has them, else ResultCache.key over the JSON access fingerprint (~1 KB) as before;
 *  - `call cancellation`: one tools/call's cancellation object and the abort listeners a point read
 *    adds and removes on it (pool checkout, reader, audit wait), never aborted: transport/call-abort.js
 *    CallAbort where the tree has it, else AbortController;
 *  - `audit batch texts`: a writer lane's texts of a batch of two point-read events (the hashed text
 *    and the stored columns): chain.ts batchTexts where the tree has it (each event's details
 *    serialised once), else eventsText and eventColumns as the lane called them before; per batch,
 *    so per call it is about half the figure (~2 events per batch at c=8);
 *  - `audit row normalise`: normalizeAuditRow of one point read's event, its time as toISOString
 *    writes it (the lane's first step per event, per call);
 *  - `metrics`: GatewayMetrics.observeToolCall and observeRequest of one served tools/call (per call;
 *    no scrape between: where the tree holds counts until a scrape, their flush is per scrape);
 *  - `refusal metrics`: the same for one refusal at capacity (its over-capacity event, 429, 0 s; issue 29);
 *  - `request id`: newRequestId (one per call and per refusal at capacity);
 *  - `row value bytes`: the wire budget's count of one point read's row, raw-json.js jsonBytes of
 *    each value of POINT_SQL's row of Chinook's track 3 (three strings, four numbers; h28z);
 *  - `answer render`: a point read's answer from its outcome, as answerCall makes it: queryResult of
 *    a fresh one-row array (its rowsText included), renderOutcome, resultResponse and serializeMessage
 *    (h28e: the complete envelope in one literal);
 *  - `inflight register`: one tools/call's registration in the InflightRegistry and its removal,
 *    with seven other calls of the same key in flight (h28e: no key string, no closure);
 *  - `tool-call row`: writer.js toolCallRow of a point read's event (h28e: no Object.entries pairs);
 *  - `lane values`: a lane's statement values for a batch of two point-read events ($1–$8 and
 *    eventValues), as ChainLane.append builds them: pushed in place where the tree's eventValues
 *    takes `out` (h28e), else spread into the literal as before;
 *  - `analysis keys` (h28l): AnalysisCache.analyse and policyKey of one point read (both hits), the
 *    complexity limits made per call where the tree's cache keys them by content, one frozen object
 *    per settings where it keys frozen ones by identity (the tree's query.ts does so).
 * Prints ns per operation, median of BENCH_ROUNDS (default 7) rounds of BENCH_OPS (default 200,000).
 * Run: `BEFORE_ROOT=/path/to/built/checkout npx tsx bench/hot-path-parts.ts`.
 */
import path from 'node:path';
import { ROOT } from './lib/env';
import { POINT_SQL } from './lib/point-read';
import { envInt, machineLine, table } from './lib/stats';

type Piece = (n: number) => void;

/** Builds the pieces from one compiled tree at `root`. */
function pieces(root: string): Record<string, Piece> {
  const load = (rel: string) => require(path.join(root, 'dist', 'src', rel)) as Record<string, unknown>;
  const { AccessEvaluator } = load('governance/evaluator.js') as { AccessEvaluator: new (g: unknown[]) => { roleNames(s: string): string[]; hasRowRules(s: string): boolean; statements(s: string): unknown } };
  const { standaloneGuardFor } = load('pipeline/hierarchy-check.js') as { standaloneGuardFor: (i: unknown) => unknown };
  const { standaloneGuard } = load('sources/postgres/hierarchy.js') as { standaloneGuard: (r: unknown) => unknown };
  const { ResultCache } = load('pipeline/cache.js') as { ResultCache: new (o?: unknown) => { key(p: unknown): string; get(k: string): unknown; set(k: string, v: unknown): void } };
  const { DEMO_ROLE, demoPolicies } = load('demo/provision.js') as { DEMO_ROLE: unknown; demoPolicies: (s: string) => unknown[] };
  const ev = new AccessEvaluator([{ sourceId: 'chinook', role: DEMO_ROLE }]);
  const policies = demoPolicies('chinook');
  const analysis = { ok: true, kind: 'read', statement: 'SelectStmt', reads: [{ schema: 'public', table: 'track' }], writes: [], viewSources: [] };
  const catalog = { relations: [{ schema: 'public', name: 'track', kind: 'table', columns: [] }, { schema: 'public', name: 'album', kind: 'table', columns: [] }] };
  const connector = { standaloneGuard, relationTrees: async () => [] };
  const cache = new ResultCache();
  const missCache = new ResultCache({ ttlMs: 30_000, maxBytes: 32 * 1024 * 1024 });
  const missCache1 = new ResultCache({ ttlMs: 1, maxBytes: 32 * 1024 * 1024 });
  const { rowsText } = load('pipeline/rows-json.js') as { rowsText: (rows: object[]) => string };
  const accessFingerprint = JSON.stringify([ev.statements('chinook'), 'mask:customer.email=partial;customer.phone=full']);
  const chain = load('audit/chain.js') as { batchTexts?: (rows: unknown[]) => { text: string; columns: string[] }; eventColumns: (rows: unknown[]) => string[] };
  const { eventsText, normalizeAuditRow } = load('audit/event-text.js') as { eventsText: (rows: unknown[]) => string; normalizeAuditRow: (row: unknown) => unknown };
  const batchTexts = chain.batchTexts ?? ((rows: unknown[]) => ({ text: eventsText(rows), columns: chain.eventColumns(rows) }));
  const event = (i: number) => ({
    kind: 'tool_call', time: '2026-12-04T18:00:00.123456Z', request_id: `req_${i}`, identity_id: 'id-1', key_id: 'k1', tool: 'interlock_query', canonical_tool: 'interlock_query',
    dialect: 'modern', protocol_version: '2025-11-25', decision: 'allowed', reason_code: null, source_id: 'chinook', action: 'read', fingerprint: '8a4f2c1b9d3e7f60',
    relations: ['public.track'], row_count: 1, duration_ms: 2.125, approval_id: null, operator: null,
    details: { source_id: 'chinook', action: 'read', fingerprint: '8a4f2c1b9d3e7f60', relations: ['public.track'], row_count: 1, cached: false },
  });
  const auditBatch = [normalizeAuditRow(event(1)), normalizeAuditRow(event(2))];
  const rawEvents = Array.from({ length: 1024 }, (_, i) => ({ ...event(i), time: new Date(1_796_000_000_000 + i).toISOString() }));
  const { GatewayMetrics } = load('observability/metrics.js') as { GatewayMetrics: new (src: unknown, labels: unknown) => { observeToolCall(e: unknown): void; observeRequest(m: string, d: string, s: number, sec: number): void } };
  const metrics = new GatewayMetrics(
    { ready: async () => true, circuitStates: () => ({}), pendingApprovals: async () => 0, cacheStats: () => ({ hits: 0, misses: 0, entries: 0 }) },
    { tools: () => new Set(['interlock_query']), sources: () => new Set(['chinook']) },
  );
  const { jsonBytes } = load('sources/postgres/raw-json.js') as { jsonBytes: (v: unknown) => number };
  const trackRow = [3, 'Fast As a Shark', 3, 1, 'F. Baltes, S. Kaufman, U. Dirkscneider & W. Hoffman', 230619, '0.99']; // POINT_SQL's columns
  const toolCallEvent = { canonicalTool: 'interlock_query', decision: 'allowed', reasonCode: null, durationMs: 3.2, details: { source_id: 'chinook' } };
  // What dispatch.ts overCapacityEvent hands the metrics for a refusal at capacity (no source, duration 0).
  const refusalEvent = { canonicalTool: 'interlock_query', decision: 'refused', reasonCode: 'rate_limited', durationMs: 0, details: { over_capacity: true } };
  const { newRequestId } = load('protocol/dispatch.js') as { newRequestId: () => string };
  const query = load('pipeline/query.js') as { cacheKey?: (c: unknown, p: unknown, catalog: object, policies: object) => string; accessFingerprintOf?: (st: unknown, f: string, checked?: boolean) => string };
  const restrictionsFingerprint = 'mask:customer.email=partial;customer.phone=full';
  const queryAccess = query.accessFingerprintOf ? query.accessFingerprintOf(ev.statements('chinook'), restrictionsFingerprint, true) : accessFingerprint;
  const queryKey = query.cacheKey
    ? (params: unknown[]) => query.cacheKey!(cache, { sourceId: 'chinook', sql: POINT_SQL, params, maxRows: 100, accessFingerprint: queryAccess }, catalog, policies as object)
    : (params: unknown[]) => cache.key({ sourceId: 'chinook', sql: POINT_SQL, params, maxRows: 100, accessFingerprint: queryAccess });
  let Cancel: new () => { signal: AbortSignal };
  try {
    Cancel = (load('transport/call-abort.js') as { CallAbort: new () => { signal: AbortSignal } }).CallAbort;
  } catch {
    Cancel = AbortController;
  }
  const { queryResult } = load('pipeline/query.js') as { queryResult: (rows: object[], t: boolean, c: boolean, m: string[]) => unknown };
  const { renderOutcome, serializeMessage } = load('protocol/tool-results.js') as { renderOutcome: (o: unknown, d: string, v: string, r: string) => { result?: unknown }; serializeMessage: (m: unknown) => string };
  const { resultResponse } = load('transport/jsonrpc.js') as { resultResponse: (id: unknown, r: unknown) => unknown };
  const { InflightRegistry } = load('protocol/dispatch.js') as { InflightRegistry: new () => { add(k: string | null, id: unknown, f: (r: string) => void): unknown; remove?(k: string | null, id: unknown, f: (r: string) => void): void } };
  const { toolCallRow } = load('audit/writer.js') as { toolCallRow: (e: unknown) => unknown };
  const eventValues = (chain as unknown as { eventValues: unknown }).eventValues as (rows: unknown[], d?: readonly string[], out?: unknown[]) => unknown[];
  const marker: unknown[] = [];
  const valuesInPlace = eventValues([], undefined, marker) === marker;
  const { canonicalAuditJson } = load('audit/event-text.js') as { canonicalAuditJson: (v: unknown) => string };
  const auditDetails = auditBatch.map((r) => canonicalAuditJson((r as { details: unknown }).details));
  const registry = new InflightRegistry();
  const apiKey = 'il_live_0123456789abcdefghijklmnopqrstuvwxyzABCD';
  const held = Array.from({ length: 7 }, (_, i) => (_r: string) => void i);
  held.forEach((f, i) => registry.add(apiKey, i + 2, f));
  const pointEvent = { requestId: 'req_00000000abcd', time: '2026-12-04T18:00:00.123Z', identityId: 'id-1', keyId: 'k1', tool: 'interlock_query', canonicalTool: 'interlock_query', dialect: 'handshake', protocolVersion: '2025-11-25', decision: 'allowed', reasonCode: null, durationMs: 2,
    details: { source_id: 'chinook', action: 'read', fingerprint: '8a4f2c1b9d3e7f60', relations: ['public.track'], row_count: 1, cached: false } };
  // h28l: the analysis cache's two keys per call (statement key and policy key) for the same statement,
  // catalogue, grants and policies — the catalogue and grants as objects the store hands out again,
  // the complexity limits as query.ts passes them (complexityLimitsFromSettings of the same settings).
  const { AnalysisCache } = load('pipeline/analysis-cache.js') as { AnalysisCache: (new () => { analyse(k: unknown, c: () => unknown): { policy(pk: string, c: () => unknown): unknown } }) & { policyKey(p: unknown, s: unknown): string } };
  const { complexityLimitsFromSettings } = load('sql/complexity.js') as { complexityLimitsFromSettings: (s: unknown) => unknown };
  const analyses = new AnalysisCache();
  const grants = [{ sourceId: 'chinook', role: DEMO_ROLE }];
  const settings = { pool_size: 5 };
  const frozenComplexity = Object.freeze(complexityLimitsFromSettings(settings) as object);
  // The tree's query.ts freezes one limits object per settings (h28l) when its analysis cache keys frozen ones by identity.
  const afterTree = /keyPrefix/.test(require('node:fs').readFileSync(path.join(root, 'dist', 'src', 'pipeline', 'analysis-cache.js'), 'utf8'));
  const subject = { identityId: 'id-1', identityName: 'demo-agent', roles: ev.roleNames('chinook'), sourceId: 'chinook' };
  const analysed = { analysis: { ok: true }, relations: [], denied: null };
  const policyVerdict = { ok: true };
  let sink = 0;
  return {
    'analysis keys': (n) => {
      for (let i = 0; i < n; i++) {
        const complexity = afterTree ? frozenComplexity : complexityLimitsFromSettings(settings);
        const c = analyses.analyse({ sourceId: 'chinook', sql: POINT_SQL, catalog, grants, complexity }, () => analysed);
        sink += c.policy(AnalysisCache.policyKey(policies, subject), () => policyVerdict) === policyVerdict ? 1 : 0;
      }
    },
    'answer render': (n) => {
      for (let i = 0; i < n; i++) {
        const o = queryResult([{ track_id: i, name: 'For Those About To Rock', album_id: 1, genre_id: 1, composer: null, milliseconds: 343719, unit_price: '0.99' }], false, false, []);
        sink += serializeMessage(resultResponse(1, renderOutcome(o, 'handshake', '2025-11-25', 'req_00000000abcd').result)).length;
      }
    },
    'inflight register': (n) => {
      for (let i = 0; i < n; i++) {
        const f = (_r: string) => void i;
        // Before h28e: add returns the removal; after: remove(key, id, f).
        const unregister = registry.add(apiKey, 1, f);
        if (typeof unregister === 'function') unregister();
        else registry.remove!(apiKey, 1, f);
      }
    },
    'tool-call row': (n) => {
      for (let i = 0; i < n; i++) if (toolCallRow(pointEvent)) sink++;
    },
    'lane values': (n) => {
      for (let i = 0; i < n; i++) {
        if (valuesInPlace) {
          const values: unknown[] = ['2026-12-04T18:00:00.123Z', '2', null, null, 'chain', '1', null, null];
          sink += eventValues(auditBatch, auditDetails, values).length;
        } else {
          const values: unknown[] = ['2026-12-04T18:00:00.123Z', '2', null, null, 'chain', '1', null, null, ...eventValues(auditBatch, auditDetails)];
          sink += values.length;
        }
      }
    },
    'caller facts': (n) => {
      for (let i = 0; i < n; i++) {
        sink += ev.roleNames('chinook').length;
        if (ev.hasRowRules('chinook')) sink++;
        if (ev.hasRowRules('chinook')) sink++;
      }
    },
    guard: (n) => {
      for (let i = 0; i < n; i++) {
        const subject = { identityId: 'id-1', identityName: 'demo-agent', roles: ['demo-analyst'], sourceId: 'chinook' };
        if (standaloneGuardFor({ connector, evaluator: ev, sourceId: 'chinook', analysis, catalog, policies, subject })) sink++;
      }
    },
    'result-cache key': (n) => {
      for (let i = 0; i < n; i++) sink += cache.key({ sourceId: 'chinook', sql: POINT_SQL, params: [1 + (i % 3503)], maxRows: 100, accessFingerprint }).length;
    },
    'result-cache miss': (n) => {
      // A miss as query.ts runs it: key, lookup, store of a one-row result (the entry's text already made, as the answer makes it).
      for (let i = 0; i < n; i++) {
        const key = missCache.key({ sourceId: 'chinook', sql: POINT_SQL, params: [i], maxRows: 100, accessFingerprint });
        if (missCache.get(key)) sink++;
        const rows = [{ track_id: i, name: 'For Those About To Rock', album_id: 1, genre_id: 1, composer: null, milliseconds: 343719, unit_price: '0.99' }];
        rowsText(rows);
        missCache.set(key, { rows, truncated: false, maskedColumns: [] });
      }
    },
    'result-cache miss, 1 ms': (n) => {
      // The same on a 1 ms cache (bench 08's uncached side): entries expire as the loop runs (h28k: a store sweeps them).
      for (let i = 0; i < n; i++) {
        const key = missCache1.key({ sourceId: 'chinook', sql: POINT_SQL, params: [i], maxRows: 100, accessFingerprint });
        if (missCache1.get(key)) sink++;
        const rows = [{ track_id: i, name: 'For Those About To Rock', album_id: 1, genre_id: 1, composer: null, milliseconds: 343719, unit_price: '0.99' }];
        rowsText(rows);
        missCache1.set(key, { rows, truncated: false, maskedColumns: [] });
      }
    },
    'query cache key': (n) => {
      for (let i = 0; i < n; i++) sink += queryKey([1 + (i % 3503)]).length;
    },
    'call cancellation': (n) => {
      const onAbort = () => undefined;
      for (let i = 0; i < n; i++) {
        const { signal } = new Cancel();
        for (let k = 0; k < 3; k++) {
          signal.addEventListener('abort', onAbort, { once: true });
          signal.removeEventListener('abort', onAbort);
        }
        if (signal.aborted) sink++;
      }
    },
    'audit batch texts': (n) => {
      for (let i = 0; i < n; i++) sink += batchTexts(auditBatch).text.length;
    },
    'audit row normalise': (n) => {
      // The lane's first step per event: normalizeAuditRow of a point read's event (time as toISOString writes it).
      for (let i = 0; i < n; i++) sink += (normalizeAuditRow(rawEvents[i & 1023]) as { time: string }).time.length;
    },
    metrics: (n) => {
      // What a served tools/call records: its tool call and its MCP request (GatewayMetrics).
      for (let i = 0; i < n; i++) {
        metrics.observeToolCall(toolCallEvent);
        metrics.observeRequest('tools/call', 'modern', 200, 0.004);
      }
    },
    'refusal metrics': (n) => {
      // What a refusal at capacity records (issue 29): its tool call and its MCP request (429, 0 s).
      for (let i = 0; i < n; i++) {
        metrics.observeToolCall(refusalEvent);
        metrics.observeRequest('tools/call', 'modern', 429, 0);
      }
    },
    'request id': (n) => {
      // One request id per refusal at capacity (and per call).
      for (let i = 0; i < n; i++) sink += newRequestId().length;
    },
    'row value bytes': (n) => {
      for (let i = 0; i < n; i++) for (const v of trackRow) sink += jsonBytes(v);
    },
    get sink(): Piece {
      return () => void sink;
    },
  };
}

function main(): void {
  // BENCH_PIECES (piece names joined by |) times only those.
  const before = process.env.BEFORE_ROOT;
  if (!before) throw new Error('BEFORE_ROOT (a checkout with dist/ built) is required');
  const ops = envInt('BENCH_OPS', 200_000);
  const rounds = envInt('BENCH_ROUNDS', 7);
  console.log(`# hot-path-parts: before = ${before}/dist vs after = ${ROOT}/dist, ${rounds} rounds × ${ops} ops`);
  console.log(machineLine());
  const sides = { before: pieces(path.resolve(before)), after: pieces(ROOT) };
  const only = process.env.BENCH_PIECES?.split('|');
  const names = Object.keys(sides.after).filter((k) => k !== 'sink' && (!only || only.includes(k)));
  const ns: Record<string, Record<string, number[]>> = { before: {}, after: {} };
  for (const side of Object.keys(sides) as Array<keyof typeof sides>) for (const n of names) sides[side][n](ops / 10); // warm the JIT
  for (let r = 0; r < rounds; r++) {
    for (const n of names) {
      const order = (r % 2 ? ['after', 'before'] : ['before', 'after']) as Array<keyof typeof sides>;
      for (const side of order) {
        const t0 = process.hrtime.bigint();
        sides[side][n](ops);
        (ns[side][n] ??= []).push(Number(process.hrtime.bigint() - t0) / ops);
      }
    }
  }
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(table(['piece', 'before ns/op', 'after ns/op', 'saved µs/call', 'after/before'], names.map((n) => [n, med(ns.before[n]).toFixed(0), med(ns.after[n]).toFixed(0), ((med(ns.before[n]) - med(ns.after[n])) / 1000).toFixed(2), `${(med(ns.after[n]) / med(ns.before[n])).toFixed(2)}×`])));
}

main();
