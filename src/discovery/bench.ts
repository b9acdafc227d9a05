/**
 * Building blocks for the discovery benchmark (bench/, issue 4 "Done when"): generate N documents
 * deterministically, index them into the control database, and time searches with and without
 * filters. Nothing here is used by the gateway itself.
 */
import { performance } from 'node:perf_hooks';
import type { ControlDb } from '../control/db';
import { putSource } from '../control/sources';
import { indexAssets } from './indexer';
import { searchAssets, type DiscoverFilters } from './search';
import type { DiscoveryScope } from './access';
import type { AssetInput, IndexResult } from './types';

const WORDS = (
  'account alert api approval archive audit backup billing build cache certificate change checklist cluster config contract customer ' +
  'dashboard database deploy disk dns escalation export failover firewall incident invoice kubernetes latency ledger license login ' +
  'maintenance metric migration monitor network onboarding outage pager password patch payment payroll permission pipeline policy ' +
  'postgres privacy queue recovery refund release replica report restore retention review rollback rotation runbook schedule secret ' +
  'security server service session shipment storage subscription support ticket timeout token training upgrade vacation vendor ' +
  'vulnerability warehouse webhook'
).split(' ');
const TYPES = ['runbook', 'policy', 'guide', 'ticket', 'spec', 'faq'];
const CATEGORIES = [['operations', 'runbooks'], ['operations', 'oncall'], ['security', 'policies'], ['security', 'incidents'], ['hr', 'onboarding'], ['hr', 'benefits'], ['product', 'docs'], ['product', 'api'], ['support', 'tickets'], ['finance']];
const AUDIENCES = [[], [], ['staff'], ['security'], ['hr'], ['staff', 'security']];
const SERVICES = ['payments-api', 'ledger', 'search', 'auth', 'notifications', 'billing-worker', 'gateway', 'reports'];

/** A small deterministic PRNG (mulberry32) so generated corpora are reproducible. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * `n` generated documents for source `sourceId`: titles of 3–6 words and bodies of `bodyWords`
 * words (default 120) over a 100-word operations vocabulary, with document types, two-level
 * categories, audiences, service entities, timestamps over 2024–2025 and a few links. Same seed →
 * same corpus.
 */
export function generateDocuments(sourceId: string, n: number, opts: { seed?: number; bodyWords?: number } = {}): AssetInput[] {
  const rnd = prng(opts.seed ?? 42);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
  const words = (k: number) => Array.from({ length: k }, () => pick(WORDS)).join(' ');
  const out: AssetInput[] = [];
  const start = Date.UTC(2024, 0, 1);
  const span = Date.UTC(2026, 0, 1) - start;
  for (let i = 0; i < n; i++) {
    const cat = pick(CATEGORIES);
    const links = rnd() < 0.3 && i > 0 ? [`${sourceId}:doc-${String(Math.floor(rnd() * i)).padStart(6, '0')}.md`] : [];
    out.push({
      assetId: `${sourceId}:doc-${String(i).padStart(6, '0')}.md`,
      documentType: pick(TYPES),
      title: words(3 + Math.floor(rnd() * 4)),
      body: words(opts.bodyWords ?? 120),
      categoryPath: cat,
      timestamp: new Date(start + Math.floor(rnd() * span)).toISOString(),
      audience: pick(AUDIENCES),
      entities: rnd() < 0.6 ? [{ type: 'service', value: pick(SERVICES) }] : [],
      links,
    });
  }
  return out;
}

/** Registers (or updates) a documents source for generated items (its path is never read). */
export async function registerGeneratedSource(db: ControlDb, sourceId: string): Promise<void> {
  await putSource(db, { id: sourceId, type: 'documents', name: `Generated corpus ${sourceId}`, settings: { path: `/nonexistent/generated/${sourceId}` } });
}

/** Registers the source and indexes `n` generated documents into it; resolves to the index counts. */
export async function indexGeneratedCorpus(db: ControlDb, sourceId: string, n: number, opts: { seed?: number; bodyWords?: number } = {}): Promise<IndexResult> {
  await registerGeneratedSource(db, sourceId);
  return indexAssets(db, sourceId, 'documents', generateDocuments(sourceId, n, opts));
}

/** A scope that sees every asset of the source with audience `staff` (for benchmarks). */
export function benchScope(sourceId: string, extra: Partial<DiscoveryScope> = {}): DiscoveryScope {
  return { sourceId, action: 'discover', allow: ['*'], deny: [], audiences: ['staff'], hiddenDocumentTypes: [], hiddenCategoryPrefixes: [], ...extra };
}

/** Latency summary in milliseconds. */
export interface LatencySummary {
  runs: number;
  p50: number;
  p99: number;
  mean: number;
  max: number;
}

/** p50/p99/mean/max of `samples` (ms). */
export function summarise(samples: number[]): LatencySummary {
  const s = [...samples].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))] ?? 0;
  const r = (x: number) => Math.round(x * 100) / 100;
  return { runs: s.length, p50: r(q(0.5)), p99: r(q(0.99)), mean: r(s.reduce((a, b) => a + b, 0) / (s.length || 1)), max: r(s[s.length - 1] ?? 0) };
}

/** `count` two-word queries drawn from the generator's vocabulary (deterministic). */
export function benchQueries(count: number, seed = 7): string[] {
  const rnd = prng(seed);
  return Array.from({ length: count }, () => `${WORDS[Math.floor(rnd() * WORDS.length)]} ${WORDS[Math.floor(rnd() * WORDS.length)]}`);
}

/**
 * Times `queries` through searchAssets (the interlock_discover path without HTTP) with `limit`
 * (default 10), after `warmup` untimed runs (default 10). Resolves to the latency summary.
 */
export async function timeSearches(db: ControlDb, scope: DiscoveryScope, queries: string[], opts: { filters?: DiscoverFilters; limit?: number; warmup?: number; expandRelated?: boolean } = {}): Promise<LatencySummary> {
  for (const q of queries.slice(0, opts.warmup ?? 10)) await searchAssets(db.pool, scope, { query: q, filters: opts.filters, limit: opts.limit ?? 10 });
  const samples: number[] = [];
  for (const q of queries) {
    const t = performance.now();
    await searchAssets(db.pool, scope, { query: q, filters: opts.filters, limit: opts.limit ?? 10, expandRelated: opts.expandRelated });
    samples.push(performance.now() - t);
  }
  return summarise(samples);
}

/** The benchmark report of benchDiscovery. Times in milliseconds. */
export interface DiscoveryBenchReport {
  documents: number;
  indexMs: number;
  reindexUnchangedMs: number;
  unfiltered: LatencySummary;
  filtered: LatencySummary;
  restricted: LatencySummary;
  expanded: LatencySummary;
}

/**
 * The whole benchmark: index `documents` generated documents (default 10,000) into source
 * `sourceId` (default "bench-docs"), re-index them unchanged, then time `queries` searches
 * (default 200) four ways: no filters; with filters (document types, category prefix, time
 * range); under a restricted scope (category patterns, deny, hidden type and prefix); and with
 * expand_related. `log` receives progress lines.
 */
export async function benchDiscovery(db: ControlDb, opts: { documents?: number; queries?: number; sourceId?: string; log?: (line: string) => void } = {}): Promise<DiscoveryBenchReport> {
  const n = opts.documents ?? 10_000;
  const sourceId = opts.sourceId ?? 'bench-docs';
  const log = opts.log ?? (() => undefined);
  await registerGeneratedSource(db, sourceId);
  const items = generateDocuments(sourceId, n);
  let t = performance.now();
  await indexAssets(db, sourceId, 'documents', items, [], { onProgress: (p) => p.phase === 'write' && p.done % 2000 === 0 && log(`indexing ${p.done}/${p.total}`) });
  const indexMs = Math.round(performance.now() - t);
  t = performance.now();
  await indexAssets(db, sourceId, 'documents', items);
  const reindexUnchangedMs = Math.round(performance.now() - t);
  await db.pool.query('ANALYZE assets');
  log(`indexed ${n} documents in ${indexMs} ms (unchanged re-index ${reindexUnchangedMs} ms)`);
  const queries = benchQueries(opts.queries ?? 200);
  const scope = benchScope(sourceId);
  const unfiltered = await timeSearches(db, scope, queries);
  log(`unfiltered p50 ${unfiltered.p50} ms p99 ${unfiltered.p99} ms`);
  const filters: DiscoverFilters = { documentTypes: ['runbook', 'policy', 'guide'], categoryPath: ['operations'], timeRange: { from: '2024-06-01T00:00:00Z', to: '2025-06-01T00:00:00Z' } };
  const filtered = await timeSearches(db, scope, queries, { filters });
  log(`filtered p50 ${filtered.p50} ms p99 ${filtered.p99} ms`);
  const restricted = await timeSearches(db, benchScope(sourceId, { allow: ['operations/*', 'security/policies', 'product/*'], deny: ['product/api/*'], hiddenDocumentTypes: ['faq'], hiddenCategoryPrefixes: [['security', 'incidents']] }), queries);
  log(`restricted scope p50 ${restricted.p50} ms p99 ${restricted.p99} ms`);
  const expanded = await timeSearches(db, scope, queries, { expandRelated: true });
  log(`expand_related p50 ${expanded.p50} ms p99 ${expanded.p99} ms`);
  return { documents: n, indexMs, reindexUnchangedMs, unfiltered, filtered, restricted, expanded };
}
