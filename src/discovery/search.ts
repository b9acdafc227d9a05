/**
 * Search, related documents and full content over the discovery index (issue 4, Build 4–6), on
 * PostgreSQL full-text search. Every statement is parameterised; every visibility rule and filter
 * is part of the WHERE clause, before ORDER BY/LIMIT (src/discovery/access.ts).
 *
 * Ranking: ts_rank_cd(tsv, query, 32) — cover density over the weighted vector (title A, body B),
 * normalised into [0, 1); ties by asset id. Snippets: ts_headline over the body (first 100,000
 * characters), matches between <b> and </b>.
 *
 * Column decisions (issue 12, src/discovery/fields.ts): a mapped row is searched only through the
 * fields its caller may see unmasked (src/discovery/field-sql.ts), filtered and related only on
 * such fields, and presented with hidden fields empty and masked fields masked.
 */
import type pg from 'pg';
import { cleanText } from './metadata';
import { categoryPrefixSql, SqlParams, visibilitySql, type DiscoveryScope } from './access';
import type { AssetEntity, DiscoverHit, DocumentContent, Relation, RelatedDocument } from './types';
import { entityKey } from './metadata';
import { fieldShownSql, matchSql, vectorSql } from './field-sql';
import { accessOf, presentItems, presentList, presentText, presentTime, stateOf, type RelationAccess } from './fields';
import { cutText } from '../errors/cut-text';

/** Anything with a pg-style query method (a pg.Pool, a client, or ControlDb.pool). */
export type Queryable = Pick<pg.Pool, 'query'>;

/** The narrowing filters of interlock_discover (all optional; combined with AND). */
export interface DiscoverFilters {
  /** Keeps assets whose source type is one of these. */
  sourceTypes?: string[];
  /** Keeps assets whose document type is one of these. */
  documentTypes?: string[];
  /** Keeps assets whose category path starts with this one (element-wise). Empty: no filter. */
  categoryPath?: string[];
  /** Keeps assets with a timestamp in [from, to] (inclusive; either end optional). Assets without a timestamp are left out. */
  timeRange?: { from?: string; to?: string };
  /** Keeps assets addressed to at least one of these audiences (assets without an audience are left out). */
  audience?: string[];
  /** Keeps assets carrying every one of these entities (type and value compared exactly). */
  entities?: AssetEntity[];
}

/** Options of searchAssets. */
export interface SearchOptions {
  /** Web-search syntax (websearch_to_tsquery): words, "quoted phrases", OR, -excluded. Any text is safe. */
  query: string;
  filters?: DiscoverFilters;
  /** Most entries returned (direct hits plus expansions), ≥ 1. */
  limit: number;
  /** Add assets related to the top three hits (expansion: true), taking at most floor(limit / 2) of the slots. */
  expandRelated?: boolean;
}

/** Number of top hits whose related assets are added by expand_related. */
export const EXPANSION_SEEDS = 3;
/** ts_headline options (sent as a parameter). */
const HEADLINE = 'StartSel=<b>, StopSel=</b>, MaxWords=35, MinWords=12, MaxFragments=2, FragmentDelimiter=" … "';
/** Salient terms of the seed that make up the similarity query. */
const SIMILAR_TERMS = 12;

function iso(d: Date | null): string | null {
  return d ? d.toISOString() : null;
}

function round(n: number): number {
  return Math.round(n * 1e6) / 1e6;
}

/** Query text safe for PostgreSQL (no NUL, no lone surrogate) and at most 1000 characters. */
export function cleanQuery(q: string): string {
  return cutText(cleanText(q), 1000);
}

/** SQLSTATE classes that say the database, not the query text, is at fault (connection, resources, operator intervention). */
const DATABASE_FAULT_CLASSES: ReadonlySet<string> = new Set(['08', '53', '57', '58']);

/**
 * Whether PostgreSQL refuses to turn `query` into a tsquery (issue 22 item 6): websearch_to_tsquery
 * raises for text such as a long run of `-` operators ("tsquery stack too small", XX000) or a word
 * too long (54000). Asked after a search failed, so the search itself costs nothing more: the
 * statement below holds only the agent's text as a parameter, so an error it raises that is not a
 * database fault (classes 08, 53, 57, 58) is the text's. Resolves true when the text is at fault.
 */
export async function tsqueryRefuses(db: Queryable, query: string): Promise<boolean> {
  try {
    await db.query("SELECT pg_catalog.numnode(pg_catalog.websearch_to_tsquery('english'::regconfig, $1)) AS n", [cleanQuery(query)]);
    return false;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && !DATABASE_FAULT_CLASSES.has(code.slice(0, 2));
  }
}

/**
 * The SQL conditions of the filters for rows aliased `a` (empty list: no condition). With `scope`,
 * a filter on a field the caller may not see unmasked matches no row of that relation, so a filter
 * confirms no hidden value. Exported for tests.
 */
export function filterSql(alias: string, f: DiscoverFilters, params: SqlParams, scope?: DiscoveryScope): string[] {
  const out: string[] = [];
  const shown = (field: Parameters<typeof fieldShownSql>[2]) => {
    if (!scope) return;
    const c = fieldShownSql(alias, scope, field, params);
    if (c !== 'TRUE') out.push(c);
  };
  if (f.sourceTypes && f.sourceTypes.length) out.push(`${alias}.source_type = ANY(${params.p(f.sourceTypes)}::text[])`);
  if (f.documentTypes && f.documentTypes.length) {
    shown('document_type');
    out.push(`${alias}.document_type = ANY(${params.p(f.documentTypes)}::text[])`);
  }
  if (f.categoryPath && f.categoryPath.length) {
    shown('category_path');
    out.push(categoryPrefixSql(alias, f.categoryPath.map(cleanText), params));
  }
  if (f.timeRange && (f.timeRange.from !== undefined || f.timeRange.to !== undefined)) {
    shown('timestamp');
    out.push(`${alias}.ts IS NOT NULL`);
    if (f.timeRange.from !== undefined) out.push(`${alias}.ts >= ${params.p(f.timeRange.from)}::timestamptz`);
    if (f.timeRange.to !== undefined) out.push(`${alias}.ts <= ${params.p(f.timeRange.to)}::timestamptz`);
  }
  if (f.audience && f.audience.length) {
    shown('audience');
    out.push(`${alias}.audience && ${params.p(f.audience.map(cleanText))}::text[]`);
  }
  if (f.entities && f.entities.length) {
    shown('entities');
    out.push(`${alias}.entity_keys @> ${params.p(f.entities.map((e) => entityKey({ type: cleanText(e.type), value: cleanText(e.value) })))}::text[]`);
  }
  return out;
}

/** The presented text fields of a row of `relation` (hidden empty, masked masked); `body` (when selected) gives the snippet of a restricted body. */
function presentRow(scope: DiscoveryScope, r: { relation: string | null; title: string; document_type: string; category_path: string[]; ts: Date | null; snippet?: string | null; body?: string | null }) {
  const access: RelationAccess | null = accessOf(scope.relations, r.relation);
  const body = stateOf(access, 'body');
  return {
    title: presentText(r.title, stateOf(access, 'title'), scope.maskSecret),
    document_type: presentText(r.document_type, stateOf(access, 'document_type'), scope.maskSecret),
    category_path: presentList(r.category_path, stateOf(access, 'category_path')),
    timestamp: presentTime(iso(r.ts), stateOf(access, 'timestamp')),
    snippet: r.snippet === undefined ? undefined : body === 'show' ? (r.snippet ?? '') : presentText(r.body ?? '', body, scope.maskSecret),
  };
}

interface HitRow {
  asset_id: string;
  relation: string | null;
  title: string;
  snippet: string | null;
  body: string | null;
  score: number;
  document_type: string;
  category_path: string[];
  ts: Date | null;
  source_id: string;
}

/**
 * Direct hits of `query` within the scope and filters, best first: at most `limit` rows, plus
 * whether more matched. Exported for benchmarks; interlock_discover uses searchAssets.
 */
export async function searchDirect(db: Queryable, scope: DiscoveryScope, query: string, filters: DiscoverFilters, limit: number): Promise<{ hits: DiscoverHit[]; more: boolean }> {
  const params = new SqlParams();
  const q = params.p(cleanQuery(query));
  const where = [visibilitySql('a', scope, params), ...filterSql('a', filters, params, scope), matchSql('a', scope, 'q.q', params)];
  const vector = vectorSql('a', scope, params);
  const lim = params.p(limit + 1);
  const headline = params.p(HEADLINE);
  const bodyShown = fieldShownSql('m', scope, 'body', params);
  const sql = `
    SELECT m.asset_id, m.relation, m.title, m.score, m.document_type, m.category_path, m.ts, m.source_id,
           CASE WHEN ${bodyShown} THEN ts_headline('english'::regconfig, left(m.body, 100000), m.q, ${headline}) END AS snippet,
           CASE WHEN ${bodyShown} THEN NULL ELSE m.body END AS body
      FROM (SELECT a.asset_id, a.relation, a.title, a.body, a.document_type, a.category_path, a.ts, a.source_id, q.q,
                   ts_rank_cd(${vector}, q.q, 32)::float8 AS score
              FROM assets a, (SELECT websearch_to_tsquery('english'::regconfig, ${q}) AS q) q
             WHERE ${where.join(' AND ')}
             ORDER BY score DESC, a.asset_id
             LIMIT ${lim}) m
     ORDER BY m.score DESC, m.asset_id`;
  const rows = (await db.query<HitRow>(sql, params.values)).rows;
  const more = rows.length > limit;
  return {
    more,
    hits: rows.slice(0, limit).map((r) => {
      const p = presentRow(scope, r);
      return {
        asset_id: r.asset_id,
        title: p.title,
        snippet: p.snippet ?? '',
        score: round(r.score),
        document_type: p.document_type,
        category_path: p.category_path,
        timestamp: p.timestamp,
        source_id: r.source_id,
        expansion: false,
      };
    }),
  };
}

/**
 * interlock_discover's search (spec/mcp-tools-v1.json interlock_discover): direct hits within the
 * scope and filters, best first, and with expandRelated the related assets of the top three hits
 * (same scope — hence same source — and same filters, round-robin across seeds, not already a
 * hit), marked expansion: true with related_to and relation. The list never holds more than
 * `limit` entries; expansions take at most floor(limit / 2) of them. `truncated` is true when more
 * direct hits matched than are returned.
 */
export async function searchAssets(db: Queryable, scope: DiscoveryScope, opts: SearchOptions): Promise<{ hits: DiscoverHit[]; truncated: boolean }> {
  const limit = Math.max(1, Math.floor(opts.limit));
  const filters = opts.filters ?? {};
  const direct = await searchDirect(db, scope, opts.query, filters, limit);
  if (!opts.expandRelated || direct.hits.length === 0 || limit < 2) return { hits: direct.hits, truncated: direct.more };
  const maxExp = Math.floor(limit / 2);
  const hitIds = new Set(direct.hits.map((h) => h.asset_id));
  // Seeds are hits that are certain to stay in the list (at least limit - maxExp direct hits stay).
  const seeds = direct.hits.slice(0, Math.min(EXPANSION_SEEDS, limit - maxExp));
  const perSeed = await Promise.all(seeds.map((s) => relatedAssets(db, scope, s.asset_id, maxExp + hitIds.size, { filters, query: opts.query })));
  const expansions: DiscoverHit[] = [];
  const taken = new Set<string>();
  for (let i = 0; expansions.length < maxExp; i++) {
    let any = false;
    for (let s = 0; s < seeds.length && expansions.length < maxExp; s++) {
      const r = perSeed[s][i];
      if (!r) continue;
      any = true;
      if (hitIds.has(r.asset_id) || taken.has(r.asset_id)) continue;
      taken.add(r.asset_id);
      expansions.push({
        asset_id: r.asset_id,
        title: r.title,
        snippet: r.snippet ?? '',
        score: r.score,
        document_type: r.document_type,
        category_path: r.category_path,
        timestamp: r.timestamp,
        source_id: scope.sourceId,
        expansion: true,
        related_to: seeds[s].asset_id,
        relation: r.relation,
      });
    }
    if (!any) break;
  }
  const nDirect = Math.min(direct.hits.length, limit - expansions.length);
  return { hits: [...direct.hits.slice(0, nDirect), ...expansions], truncated: direct.more || nDirect < direct.hits.length };
}

/** The source and category of an asset, read without any visibility rule (for resolving a seed's source). */
export async function assetSource(db: Queryable, assetId: string): Promise<{ sourceId: string; sourceType: string } | null> {
  const r = await db.query<{ source_id: string; source_type: string }>('SELECT source_id, source_type FROM assets WHERE asset_id = $1', [cleanText(assetId)]);
  return r.rows[0] ? { sourceId: r.rows[0].source_id, sourceType: r.rows[0].source_type } : null;
}

/** True when the asset exists in the scope's source and is visible under the scope. */
export async function assetVisible(db: Queryable, scope: DiscoveryScope, assetId: string): Promise<boolean> {
  const params = new SqlParams();
  const id = params.p(cleanText(assetId));
  const r = await db.query(`SELECT 1 FROM assets a WHERE a.asset_id = ${id} AND ${visibilitySql('a', scope, params)}`, params.values);
  return (r.rowCount ?? 0) > 0;
}

interface RelatedRow {
  asset_id: string;
  relation: string | null;
  body?: string | null;
  title: string;
  document_type: string;
  category_path: string[];
  ts: Date | null;
  prio: number;
  score: number;
  snippet?: string | null;
}

/**
 * Assets related to `assetId` within the scope (so within the scope's source only, whatever the
 * links say), each once with its strongest relation: link (either direction; score 1), entity
 * (shares at least one entity; score = shared entities), similar (shares some of the seed's 12
 * most salient terms — title terms first, then the most frequent; score = ts_rank, normalisation
 * 32, in [0, 1); ts_rank rather than ts_rank_cd because it is several times cheaper over the many
 * candidates an OR of terms matches). Ordered link, entity, similar, then
 * score, then asset id; at most `limit`. The seed itself is never returned; an unknown seed, or
 * one of another source, yields []. Visibility and `opts.filters` apply in every branch, before
 * any ranking or LIMIT. With
 * `opts.query`, each entry also carries a snippet highlighted for that query (used by expansion).
 * The seed's visibility is NOT checked here: callers check it first (assetVisible).
 */
export async function relatedAssets(
  db: Queryable,
  scope: DiscoveryScope,
  assetId: string,
  limit: number,
  opts: { filters?: DiscoverFilters; query?: string } = {},
): Promise<Array<RelatedDocument & { snippet?: string }>> {
  const params = new SqlParams();
  const seed = params.p(cleanText(assetId));
  const src = params.p(scope.sourceId);
  const lim = params.p(Math.max(1, Math.floor(limit)));
  // Visibility and filters go into every branch, before any ranking or LIMIT.
  const where = () => [visibilitySql('c', scope, params), ...filterSql('c', opts.filters ?? {}, params, scope), `c.asset_id <> ${seed}`].join(' AND ');
  // Only fields the caller may see unmasked relate documents: the seed's links, entities and
  // searchable terms, and the candidate's links, entities and searchable vector.
  const bodyShown = opts.query !== undefined ? fieldShownSql('a', scope, 'body', params) : '';
  const snippet =
    opts.query !== undefined
      ? `, CASE WHEN ${bodyShown} THEN ts_headline('english'::regconfig, left(a.body, 100000), websearch_to_tsquery('english'::regconfig, ${params.p(cleanQuery(opts.query))}), ${params.p(HEADLINE)}) END AS snippet, CASE WHEN ${bodyShown} THEN NULL ELSE a.body END AS body`
      : '';
  const sql = `
    WITH seed AS (
      SELECT s.asset_id,
             CASE WHEN ${fieldShownSql('s', scope, 'links', params)} THEN s.links ELSE '{}'::text[] END AS links,
             CASE WHEN ${fieldShownSql('s', scope, 'entities', params)} THEN s.entity_keys ELSE '{}'::text[] END AS entity_keys,
             ${vectorSql('s', scope, params)} AS tsv
        FROM assets s WHERE s.asset_id = ${seed} AND s.source_id = ${src}
    ), terms AS (
      SELECT websearch_to_tsquery('simple'::regconfig, coalesce(string_agg(t.lexeme, ' OR '), '')) AS q
        FROM (SELECT u.lexeme FROM seed, unnest(seed.tsv) u
               WHERE length(u.lexeme) >= 3 AND u.lexeme ~ '^[[:alnum:]][[:alnum:]_]*$'
               ORDER BY (CASE WHEN 'A' = ANY(u.weights) THEN 4 ELSE 0 END) + cardinality(u.positions) DESC, u.lexeme
               LIMIT ${SIMILAR_TERMS}) t
    ), link AS (
      SELECT c.asset_id, 1 AS prio, 1::float8 AS score FROM assets c, seed WHERE c.asset_id = ANY(seed.links) AND ${where()}
      UNION
      SELECT c.asset_id, 1, 1::float8 FROM assets c, seed WHERE c.links @> ARRAY[seed.asset_id] AND ${fieldShownSql('c', scope, 'links', params)} AND ${where()}
    ), ent AS (
      SELECT c.asset_id, 2 AS prio, (SELECT count(*) FROM unnest(c.entity_keys) k WHERE k = ANY(seed.entity_keys))::float8 AS score
        FROM assets c, seed WHERE c.entity_keys && seed.entity_keys AND ${fieldShownSql('c', scope, 'entities', params)} AND ${where()}
    ), sim AS (
      SELECT c.asset_id, 3 AS prio, ts_rank(${vectorSql('c', scope, params)}, terms.q, 32)::float8 AS score
        FROM assets c, terms WHERE ${matchSql('c', scope, 'terms.q', params)} AND ${where()}
       ORDER BY score DESC, c.asset_id
       LIMIT ${lim}::int + (SELECT count(*) FROM link) + (SELECT count(*) FROM ent)
    ), best AS (
      SELECT DISTINCT ON (asset_id) asset_id, prio, score
        FROM (SELECT * FROM link UNION ALL SELECT * FROM ent UNION ALL SELECT * FROM sim) cand
       ORDER BY asset_id, prio, score DESC
    )
    SELECT a.asset_id, a.relation, a.title, a.document_type, a.category_path, a.ts, b.prio, b.score${snippet}
      FROM best b JOIN assets a ON a.asset_id = b.asset_id AND a.source_id = ${src}
     ORDER BY b.prio, b.score DESC, a.asset_id
     LIMIT ${lim}`;
  const rows = (await db.query<RelatedRow>(sql, params.values)).rows;
  const rel: Relation[] = ['link', 'entity', 'similar'];
  return rows.map((r) => {
    const p = presentRow(scope, r);
    const out: RelatedDocument & { snippet?: string } = {
      asset_id: r.asset_id,
      title: p.title,
      relation: rel[r.prio - 1],
      score: round(r.score),
      document_type: p.document_type,
      category_path: p.category_path,
      timestamp: p.timestamp,
    };
    if (p.snippet !== undefined) out.snippet = p.snippet;
    return out;
  });
}

/**
 * The full content of one asset for get_document, or null when it does not exist in the scope's
 * source or is not visible under `scope` (action request). `links` keeps only linked assets of the
 * same source visible under `linkScope` (action discover): links to other sources or to assets the
 * caller may not see are left out, never hinted at.
 */
export async function getDocument(db: Queryable, scope: DiscoveryScope, linkScope: DiscoveryScope, assetId: string): Promise<DocumentContent | null> {
  const params = new SqlParams();
  const id = params.p(cleanText(assetId));
  const r = await db.query(
    `SELECT a.asset_id, a.source_id, a.relation, a.title, a.body, a.document_type, a.category_path, a.ts, a.entities, a.links, a.indexed_at
       FROM assets a WHERE a.asset_id = ${id} AND ${visibilitySql('a', scope, params)}`,
    params.values,
  );
  const d = r.rows[0];
  if (!d) return null;
  const access = accessOf(scope.relations, d.relation);
  const shownLinks = presentItems(d.links as string[], stateOf(access, 'links'));
  let links: string[] = [];
  if (shownLinks.length) {
    const lp = new SqlParams();
    const ids = lp.p(shownLinks);
    const lr = await db.query<{ asset_id: string }>(`SELECT a.asset_id FROM assets a WHERE a.asset_id = ANY(${ids}::text[]) AND ${visibilitySql('a', linkScope, lp)}`, lp.values);
    const ok = new Set(lr.rows.map((x) => x.asset_id));
    links = shownLinks.filter((l) => ok.has(l));
  }
  const p = presentRow(scope, d);
  return {
    asset_id: d.asset_id,
    source_id: d.source_id,
    title: p.title,
    body: presentText(d.body, stateOf(access, 'body'), scope.maskSecret),
    document_type: p.document_type,
    category_path: p.category_path,
    timestamp: p.timestamp,
    entities: presentItems(d.entities as AssetEntity[], stateOf(access, 'entities')),
    links,
    indexed_at: (d.indexed_at as Date).toISOString(),
  };
}
