/**
 * Scenario 6: discovery. Indexes 10,000 generated documents (src/discovery generateDocuments /
 * indexAssets) as a documents source of the provisioned control database, grants demo-agent the
 * demo handbook role on it (discover everything addressed to staff or to no audience), and times,
 * query by query and alternately:
 * - interlock_discover through POST /mcp on an `interlock serve` child (the whole tool: identity,
 *   arguments, scope from grants and policies, rate limit, search, audit), without and with filters;
 * - the governed search in-process (searchAssets with the same scope: visibility rules in SQL,
 *   filters, ranking, snippets), also with a restricted scope and with expand_related;
 * - two ungoverned baselines: the same full-text SQL without any visibility predicate (same
 *   ranking, snippet and limit), without and with the same filters, and a plain ILIKE scan of the
 *   bodies (unranked, no snippet).
 * Latencies are sequential (one search at a time). Run: `npx tsx bench/06-discovery.ts`.
 */
import { performance } from 'node:perf_hooks';
import { benchQueries, benchScope, generateDocuments, searchAssets, type DiscoverFilters } from '../src/discovery';
import { putSource } from '../src/control/sources';
import { upsertRole } from '../src/control/roles';
import { grantRole } from '../src/control/grants';
import { HANDBOOK_ROLE } from '../src/discovery/handbook';
import { McpHttpClient, structuredResult } from './lib/http';
import { gatewayVars, startServe, withBenchEnv } from './lib/env';
import { indexAssets } from '../src/discovery/indexer';
import type { Queryable } from '../src/discovery/search';
import { emitResult, envInt, machineLine, ratio, round, summarize, table, type Summary } from './lib/stats';

const SOURCE = 'bench-docs';
const HEADLINE = 'StartSel=<b>, StopSel=</b>, MaxWords=35, MinWords=12, MaxFragments=2, FragmentDelimiter=" … "';
const FILTERS: DiscoverFilters = { documentTypes: ['runbook', 'policy', 'guide'], categoryPath: ['operations'], timeRange: { from: '2024-06-01T00:00:00Z', to: '2025-06-01T00:00:00Z' } };

/** The full-text search without governance: same ranking, snippet and limit; only the source and (optionally) the filters. */
async function rawFts(db: Queryable, query: string, limit: number, filtered: boolean): Promise<number> {
  const filterSql = filtered ? " AND a.document_type = ANY($5::text[]) AND a.category_path[1] = $6 AND a.ts >= $7::timestamptz AND a.ts <= $8::timestamptz" : '';
  const params: unknown[] = [query, SOURCE, limit + 1, HEADLINE];
  if (filtered) params.push(FILTERS.documentTypes, FILTERS.categoryPath![0], FILTERS.timeRange!.from, FILTERS.timeRange!.to);
  const r = await db.query(
    `SELECT m.asset_id, m.title, m.score, ts_headline('english'::regconfig, left(m.body, 100000), m.q, $4) AS snippet
       FROM (SELECT a.asset_id, a.title, a.body, q.q, ts_rank_cd(a.tsv, q.q, 32)::float8 AS score
               FROM assets a, (SELECT websearch_to_tsquery('english'::regconfig, $1) AS q) q
              WHERE a.source_id = $2 AND a.tsv @@ q.q${filterSql}
              ORDER BY score DESC, a.asset_id LIMIT $3) m
      ORDER BY m.score DESC, m.asset_id`,
    params,
  );
  return r.rowCount ?? 0;
}

/** A plain ILIKE scan: documents of the source whose body contains every word, first `limit` by id. */
async function ilikeScan(db: Queryable, query: string, limit: number): Promise<number> {
  const words = query.split(/\s+/).filter(Boolean);
  const conds = words.map((_, i) => `body ILIKE $${i + 3}`).join(' AND ');
  const r = await db.query(`SELECT asset_id, title FROM assets WHERE source_id = $1 AND ${conds} ORDER BY asset_id LIMIT $2`, [SOURCE, limit, ...words.map((w) => `%${w}%`)]);
  return r.rowCount ?? 0;
}

async function timed<T>(fn: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const t = performance.now();
  const value = await fn();
  return { ms: performance.now() - t, value };
}

async function main(): Promise<void> {
  const n = envInt('BENCH_DOCUMENTS', 10_000);
  const nQueries = envInt('BENCH_QUERIES', 100);
  const limit = 10;
  console.log(`# 6-discovery: ${n} generated documents; interlock_discover and the governed search vs raw full-text SQL and an ILIKE scan`);
  console.log(machineLine());
  await withBenchEnv({}, async (env) => {
    const db = env.db;
    await putSource(db, { id: SOURCE, type: 'documents', name: 'Generated corpus', settings: { path: `/nonexistent/generated/${SOURCE}` } });
    await upsertRole(db, HANDBOOK_ROLE);
    await grantRole(db, { identityId: env.demo.identityId, roleName: HANDBOOK_ROLE.name, sourceId: SOURCE });
    const docs = generateDocuments(SOURCE, n);
    let t = performance.now();
    const indexed = await indexAssets(db, SOURCE, 'documents', docs);
    const indexMs = performance.now() - t;
    t = performance.now();
    await indexAssets(db, SOURCE, 'documents', docs);
    const reindexMs = performance.now() - t;
    await db.pool.query('ANALYZE assets');
    console.log(`indexed ${n} documents in ${(indexMs / 1000).toFixed(1)} s (${((n * 1000) / indexMs).toFixed(0)} documents/s); unchanged re-index ${(reindexMs / 1000).toFixed(2)} s; ${JSON.stringify(indexed).slice(0, 160)}`);

    const gw = await startServe(gatewayVars(env.controlUrl));
    const client = new McpHttpClient(gw.url, { apiKey: env.apiKey, maxSockets: 1 });
    const discoverArgs = (q: string, filtered: boolean): Record<string, unknown> => ({
      source_id: SOURCE,
      query: q,
      limit,
      ...(filtered ? { document_types: FILTERS.documentTypes, category_path: FILTERS.categoryPath, time_range: FILTERS.timeRange } : {}),
    });
    const viaMcp = async (q: string, filtered: boolean) => {
      const sc = structuredResult(await client.callTool('interlock_discover', discoverArgs(q, filtered)));
      if (!Array.isArray(sc.hits)) throw new Error(`interlock_discover answered ${JSON.stringify(sc).slice(0, 200)}`);
      return sc as { hits: unknown[] };
    };
    try {
      const queries = benchQueries(nQueries);
      const scope = benchScope(SOURCE);
      const restricted = benchScope(SOURCE, { allow: ['operations/*', 'security/policies', 'product/*'], deny: ['product/api/*'], hiddenDocumentTypes: ['faq'], hiddenCategoryPrefixes: [['security', 'incidents']] });
      type Key = 'mcp' | 'governed' | 'rawFts' | 'ilike' | 'mcpFiltered' | 'governedFiltered' | 'rawFtsFiltered' | 'governedRestricted' | 'governedExpanded';
      const runs: Record<Key, () => (q: string) => Promise<unknown>> = {
        mcp: () => (q) => viaMcp(q, false),
        mcpFiltered: () => (q) => viaMcp(q, true),
        governed: () => (q) => searchAssets(db.pool, scope, { query: q, limit }),
        rawFts: () => (q) => rawFts(db.pool, q, limit, false),
        ilike: () => (q) => ilikeScan(db.pool, q, limit),
        governedFiltered: () => (q) => searchAssets(db.pool, scope, { query: q, limit, filters: FILTERS }),
        rawFtsFiltered: () => (q) => rawFts(db.pool, q, limit, true),
        governedRestricted: () => (q) => searchAssets(db.pool, restricted, { query: q, limit }),
        governedExpanded: () => (q) => searchAssets(db.pool, scope, { query: q, limit, expandRelated: true }),
      };
      const keys: Key[] = ['mcp', 'governed', 'rawFts', 'ilike', 'mcpFiltered', 'governedFiltered', 'rawFtsFiltered', 'governedRestricted', 'governedExpanded'];
      const fns = Object.fromEntries(keys.map((k) => [k, runs[k]()])) as Record<Key, (q: string) => Promise<unknown>>;
      for (const q of queries.slice(0, 20)) for (const k of keys) await fns[k](q); // warm-up
      const samples = Object.fromEntries(keys.map((k) => [k, [] as number[]])) as Record<Key, number[]>;
      let hits = 0;
      for (let i = 0; i < queries.length; i++) {
        const q = queries[i];
        const order = i % 2 === 0 ? keys : [...keys].reverse();
        for (const k of order) {
          const r = await timed(() => fns[k](q));
          samples[k].push(r.ms);
          if (k === 'mcp') hits += (r.value as { hits: unknown[] }).hits.length;
        }
      }
      const s = Object.fromEntries(keys.map((k) => [k, summarize(samples[k])])) as Record<Key, Summary>;
      const msf = (x: number) => `${x.toFixed(2)} ms`;
      const label: Record<Key, string> = {
        mcp: 'interlock_discover over /mcp, no filters',
        mcpFiltered: 'interlock_discover over /mcp, filters',
        governed: 'governed search in-process, no filters',
        rawFts: '  baseline: raw FTS SQL, no governance',
        ilike: '  baseline: ILIKE scan',
        governedFiltered: 'governed search in-process, filters (type, category, time)',
        rawFtsFiltered: '  baseline: raw FTS SQL, same filters',
        governedRestricted: 'governed search, restricted scope (allow/deny/hidden)',
        governedExpanded: 'governed search, expand_related',
      };
      console.log(`\n${queries.length} two-word queries, limit ${limit}, average ${(hits / queries.length).toFixed(1)} hits per unfiltered query\n`);
      console.log(table(['search', 'p50', 'p99', 'mean'], keys.map((k) => [label[k], msf(s[k].p50), msf(s[k].p99), msf(s[k].mean)])));
      // Present the rows grouped: unfiltered, then filtered, then the informational variants.
      console.log(`\nratios (p50): interlock_discover / raw FTS ${ratio(s.mcp.p50 / s.rawFts.p50)} (filtered ${ratio(s.mcpFiltered.p50 / s.rawFtsFiltered.p50)}); in-process governed / raw FTS ${ratio(s.governed.p50 / s.rawFts.p50)} (filtered ${ratio(s.governedFiltered.p50 / s.rawFtsFiltered.p50)}); interlock_discover / ILIKE scan ${ratio(s.mcp.p50 / s.ilike.p50)}`);
      console.log(`added by the tool over /mcp vs the in-process governed search (p50): ${msf(s.mcp.p50 - s.governed.p50)} unfiltered, ${msf(s.mcpFiltered.p50 - s.governedFiltered.p50)} filtered`);
      emitResult('6-discovery', {
        documents: n,
        indexMs: round(indexMs, 0),
        reindexUnchangedMs: round(reindexMs, 0),
        queries: queries.length,
        limit,
        ms: Object.fromEntries(keys.map((k) => [k, { p50: round(s[k].p50, 3), p99: round(s[k].p99, 3), mean: round(s[k].mean, 3) }])),
        ratios: {
          mcpOverRawFts: round(s.mcp.p50 / s.rawFts.p50, 3),
          filteredMcpOverRawFts: round(s.mcpFiltered.p50 / s.rawFtsFiltered.p50, 3),
          governedOverRawFts: round(s.governed.p50 / s.rawFts.p50, 3),
          filteredGovernedOverRawFts: round(s.governedFiltered.p50 / s.rawFtsFiltered.p50, 3),
          mcpOverIlike: round(s.mcp.p50 / s.ilike.p50, 3),
        },
      });
    } finally {
      client.close();
      await gw.stop();
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
